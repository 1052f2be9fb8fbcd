"""The out-of-core view of a run: the detectors' interface (``TelemetryView``'s) over the Parquet parts in place.

Nothing is read whole. The catalog (``engine.telemetry.catalog``: Parquet footers) says which metrics, entities,
ranks and steps there are. Metrics small enough (``diagnose.out_of_core.resident_rows``, smallest first) are read
into an in-memory view as they are, so every detector on them runs exactly as in memory. The others are only
scanned window by window (``scan``: DuckDB, or Ray tasks), aggregated per step in DuckDB (``series``,
``by_entity``: one row per entity and step comes back), or read a batch of ranks at a time (``by_rank`` with
``ranks``). A whole ranks × steps grid of such a metric is handed out only up to ``diagnose.out_of_core.grid_cells``
cells; above, the detector that asked is not judged, and says why.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.diagnose.frame import Grid, TelemetryView, pivot
from debugtune.engine.diagnose.registry import NotJudged
from debugtune.engine.diagnose.scan import Block, Partial, ScanJob, ScanPlan, merge, run_block
from debugtune.engine.telemetry import read_telemetry
from debugtune.engine.telemetry.aliases import AliasPlan
from debugtune.engine.telemetry.catalog import Catalog
from debugtune.engine.telemetry.duck import DuckSource, DuckSpec, Where


@dataclass(frozen=True)
class OutOfCore:
    """The out-of-core engine's sizes (``diagnose.out_of_core.*`` in the knowledge base)."""

    resident_rows: int
    grid_cells: int
    memory_mb: int

    @classmethod
    def from_thresholds(cls, th: Any) -> OutOfCore:
        return cls(th.as_int("diagnose.out_of_core.resident_rows"), th.as_int("diagnose.out_of_core.grid_cells"),
                   th.as_int("diagnose.out_of_core.memory_mb"))


@dataclass(frozen=True)
class Window:
    """What a worker needs to build one window's :class:`Block` (picklable)."""

    metric: str
    where: Where
    also: tuple[tuple[str, Where], ...]
    labels: np.ndarray
    reduce: str
    chunk_steps: int


def _grid(src: DuckSource, metric: str, where: Where, reduce: str) -> Grid | None:
    t = src.rows(where)
    if t.num_rows == 0:
        return None
    grid, _ = pivot(metric, t.column("rank").to_numpy(), t.column("step").to_numpy(), t.column("value").to_numpy(),
                    reduce)
    return grid


def _scattered(src: DuckSource, w: Window, a: int, b: int) -> Grid | None:
    """The window [a, b) as a ranks × steps grid, its rows placed batch by batch as they stream from DuckDB; None
    when a cell has two rows (then :func:`~debugtune.engine.diagnose.frame.pivot` combines them)."""
    width = b - a
    out = np.full(w.labels.size * width, np.nan)
    filled = np.zeros(out.size, dtype=bool)
    rows = 0
    for batch in src.batches(replace(w.where, steps=(a, b))):
        flat = np.searchsorted(w.labels, batch.column(0).to_numpy()) * width + (batch.column(1).to_numpy() - a)
        out[flat] = batch.column(2).to_numpy()
        filled[flat] = True
        rows += batch.num_rows
    if rows == 0:
        return Grid(w.metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
    if int(filled.sum()) != rows:
        return None
    grid = out.reshape(w.labels.size, width)
    cols = np.flatnonzero(filled.reshape(w.labels.size, width).any(axis=0))
    if cols.size < width:
        grid = grid[:, cols]
    if w.reduce == "max":  # as pivot reads a NaN observation
        grid[np.isnan(grid) & filled.reshape(w.labels.size, width)[:, cols]] = np.inf
    else:
        grid[np.isneginf(grid)] = np.nan
    return Grid(w.metric, tuple(w.labels.tolist()), (a + cols).astype(np.int64), grid)


def fetch_block(src: DuckSource, w: Window, a: int, b: int) -> Block | None:
    """The window [a, b) of ``w``: rows fetched, pivoted, spread over every rank of the metric."""
    full = _scattered(src, w, a, b)
    if full is not None and full.steps.size == 0:
        return None
    if full is None:
        grid = _grid(src, w.metric, replace(w.where, steps=(a, b)), w.reduce)
        if grid is None:
            return None
        values = np.full((w.labels.size, grid.steps.size), np.nan)  # ranks without a row in this window: NaN
        values[np.searchsorted(w.labels, np.asarray(grid.labels, dtype=np.int64))] = grid.values
        full = Grid(w.metric, tuple(w.labels.tolist()), grid.steps, values)
    values = full.values
    also = {}
    for name, where in w.also:
        other = _grid(src, name, replace(where, steps=(a, b)), w.reduce)
        aligned = other.like(full) if other is not None else np.full(values.shape, np.nan)
        also[name] = np.ascontiguousarray(aligned.T)
    return Block(full.steps, w.labels, np.ascontiguousarray(values.T), also, w.chunk_steps)


def run_window(src: DuckSource, w: Window, job: ScanJob, a: int, b: int) -> Partial:
    """One window of a scan: fetched, then the job's kernel."""
    block = fetch_block(src, w, a, b)
    return Partial(np.zeros(0, dtype=np.int64)) if block is None else run_block(job, block)


Executor = Callable[[DuckSource, Window, ScanJob, Sequence[tuple[int, int]]], list[Partial]]


def local_executor(src: DuckSource, w: Window, job: ScanJob, windows: Sequence[tuple[int, int]]) -> list[Partial]:
    """Windows one after the other in this process, the next one read by DuckDB (which releases the GIL) while
    the kernel runs on this one: at most two windows in memory."""
    if len(windows) < 2:
        return [run_window(src, w, job, a, b) for a, b in windows]
    out = []
    reader = src.cursor()
    try:
        with ThreadPoolExecutor(1) as pool:
            ahead = pool.submit(fetch_block, reader, w, *windows[0])
            for i in range(len(windows)):
                block = ahead.result()
                if i + 1 < len(windows):
                    ahead = pool.submit(fetch_block, reader, w, *windows[i + 1])
                out.append(Partial(np.zeros(0, dtype=np.int64)) if block is None else run_block(job, block))
                del block
    finally:
        reader.close()
    return out


_AGG = {
    "mean": "avg(value)", "sum": "sum(value)",
}


def _aggregate(reduce: str) -> str:
    """SQL of :func:`~debugtune.engine.diagnose.frame.pivot`'s cell reduction: NaN or −Inf in a cell → NaN, +Inf
    → Inf (mean, sum); the largest value with NaN counted as +Inf (max)."""
    if reduce == "max":
        return "max(CASE WHEN isnan(value) THEN 'inf'::DOUBLE ELSE value END)"
    return (f"CASE WHEN bool_or(isnan(value) OR value = '-inf'::DOUBLE) THEN 'nan'::DOUBLE "
            f"WHEN bool_or(value = 'inf'::DOUBLE) THEN 'inf'::DOUBLE ELSE {_AGG[reduce]} END")


def release_memory() -> None:
    """Hand the heap the windows freed back to the system (glibc keeps freed blocks below its mmap threshold)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


class LazyView:
    """A run's telemetry out of core, with the detectors' view interface (module docstring)."""

    def __init__(self, run_dir: str | Path, catalog: Catalog, meta: dict[str, Any], run: str,
                 dimensions: Iterable[str], sizes: OutOfCore, executor: Executor = local_executor,
                 cache: Any = None):
        self.run_dir, self.catalog, self.meta, self.run = Path(run_dir), catalog, dict(meta), run
        self.sizes, self.executor, self.cache = sizes, executor, cache
        e = catalog.entries()
        stored_rows: dict[str, int] = {}
        for m, n in zip(e["metric"], e["rows"], strict=True):
            stored_rows[m] = stored_rows.get(m, 0) + int(n)
        self.plan = AliasPlan(stored_rows)
        dims = set(dimensions)
        name = np.array([self.plan.output(m) for m in e["metric"]], dtype=object)
        dim = np.array([self.plan.dimension(m) or d for m, d in zip(e["metric"], e["dimension"], strict=True)],
                       dtype=object)
        keep = np.array([d in dims for d in dim], dtype=bool)
        self._e = {k: v[keep] for k, v in e.items()} | {"name": name[keep], "dim": dim[keep]}
        self._stored: dict[str, tuple[str, ...]] = {}
        self._dims: dict[str, tuple[str, ...] | None] = {}
        for m in dict.fromkeys(self._e["name"].tolist()):
            mine = self._e["name"] == m
            self._stored[m] = tuple(sorted(set(self._e["metric"][mine].tolist())))
            whole = np.isin(e["metric"], self._stored[m])
            dropped = whole & ~keep  # the same stored name also recorded in a dimension not asked for
            self._dims[m] = tuple(sorted(set(e["dimension"][whole & keep].tolist()))) if dropped.any() else None
        rows = {m: int(self._e["rows"][self._e["name"] == m].sum()) for m in self._stored}
        resident, total = [], 0
        for m in sorted(rows, key=lambda m: (rows[m], m)):
            if total + rows[m] > sizes.resident_rows:
                break
            resident.append(m)
            total += rows[m]
        self.rows_total = int(sum(rows.values()))
        self.rows_by_metric = rows
        self.resident_metrics = frozenset(resident)
        self._resident = self._read(resident) if resident else None
        self._steps: dict[str, np.ndarray] = {}
        self._src: DuckSource | None = None

    # -- plumbing ------------------------------------------------------------------------------------------
    def _read(self, metrics: Sequence[str]) -> TelemetryView:
        stored = [s for m in metrics for s in self._stored[m]]
        dims = sorted(set(self._e["dim"].tolist()))
        parts = [p.path for p in self.catalog.parts if any(k[0] in stored for k in p.keys)]
        tel = read_telemetry(self.run_dir, metrics=stored, dimensions=dims, alias_plan=self.plan, parts=parts,
                             columns=("rank", "step", "dimension", "metric", "entity", "value"))
        return TelemetryView.from_table(tel.table, self.meta, run=self.run)

    @property
    def spec(self) -> DuckSpec:
        return DuckSpec(str(self.run_dir), tuple(self.catalog.files), memory_mb=self.sizes.memory_mb)

    @property
    def source(self) -> DuckSource:
        if self._src is None:
            self._src = DuckSource(self.spec)
        return self._src

    def close(self) -> None:
        if self._src is not None:
            self._src.close()
            self._src = None

    def where(self, metric: str, entity: str | None = None, ranks: Iterable[int] | None = None) -> Where:
        return Where(self._stored[metric], entity, self._dims[metric],
                     ranks=None if ranks is None else tuple(int(r) for r in ranks))

    def _local(self, metric: str) -> bool:
        return self._resident is not None and metric in self.resident_metrics

    def _mask(self, metric: str, entity: str | None = None) -> np.ndarray:
        mask = self._e["name"] == metric
        return mask if entity is None else mask & (self._e["entity"] == entity)

    # -- what is there -------------------------------------------------------------------------------------
    @property
    def metrics(self) -> set[str]:
        return set(self._stored)

    def has(self, *metrics: str) -> bool:
        return all(m in self._stored for m in metrics)

    def dimension_of(self, metric: str) -> str | None:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.dimension_of(metric)
        mask = self._mask(metric)
        return str(self._e["dim"][mask][0]) if mask.any() else None

    def entities(self, metric: str) -> list[str]:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.entities(metric)
        return sorted(set(self._e["entity"][self._mask(metric)].tolist()))

    def ranks(self, metric: str | None = None) -> np.ndarray:
        mask = self._mask(metric) if metric else np.ones(self._e["rank"].size, dtype=bool)
        return np.unique(self._e["rank"][mask]).astype(np.int64)

    def rank_labels(self, metric: str, entity: str | None = None) -> np.ndarray:
        return np.unique(self._e["rank"][self._mask(metric, entity)]).astype(np.int64)

    def steps(self, metric: str) -> np.ndarray:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.steps(metric)
        if metric not in self._steps:
            t = self.source.query(f"SELECT DISTINCT step FROM t WHERE {self.where(metric).sql()} ORDER BY step")
            self._steps[metric] = t.column("step").to_numpy().astype(np.int64)
        return self._steps[metric]

    def step_count(self) -> int:
        """Distinct steps with any row (of the dimensions asked for)."""
        steps = [self.steps(m) for m in self._stored]
        return int(np.unique(np.concatenate(steps)).size) if steps else 0

    # -- grids -----------------------------------------------------------------------------------------------
    def _small(self, metric: str, entity: str | None) -> bool:
        return int(self._e["rows"][self._mask(metric, entity)].sum()) <= self.sizes.resident_rows

    def _fetched(self, metric: str, where: Where, reduce: str, by: str) -> Grid:
        t = self.source.rows(where, ("rank", "step", "entity", "value"))
        if t.num_rows == 0:
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        if by == "rank":
            keys, names = t.column("rank").to_numpy().astype(np.int64), None
        else:
            enc = t.column("entity").combine_chunks().dictionary_encode()
            keys, names = enc.indices.to_numpy().astype(np.int64), enc.dictionary.to_pylist()
            if by == "one":
                keys = np.zeros_like(keys)
        grid, key_vals = pivot(metric, keys, t.column("step").to_numpy(), t.column("value").to_numpy(), reduce)
        if names is None or by == "one":
            return grid
        order = np.argsort([names[int(k)] for k in key_vals], kind="stable")
        return Grid(metric, tuple(names[int(key_vals[i])] for i in order), grid.steps, grid.values[order])

    def _pushed(self, metric: str, where: Where, keys: Sequence[str], value: str) -> Grid:
        """An aggregate per (entity,) step computed in DuckDB, placed as an entities × steps grid."""
        t = self.source.by_step(where, keys, value)
        if t.num_rows == 0:
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        names = sorted(set(t.column("entity").to_pylist())) if keys else [""]
        row = np.searchsorted(np.array(names, dtype=object), np.array(t.column("entity").to_pylist(), dtype=object)) \
            if keys else np.zeros(t.num_rows, dtype=np.int64)
        steps, col = np.unique(t.column("step").to_numpy(), return_inverse=True)
        values = np.full((len(names), steps.size), np.nan)
        values[row, col] = t.column("value").to_numpy()
        return Grid(metric, tuple(names), steps.astype(np.int64), values)

    def series(self, metric: str, entity: str = "", *, reduce: str = "mean") -> tuple[np.ndarray, np.ndarray]:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.series(metric, entity, reduce=reduce)
        if not self.has(metric):
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        where = self.where(metric, entity)
        g = self._fetched(metric, where, reduce, "one") if self._small(metric, entity) else \
            self._pushed(metric, where, (), _aggregate(reduce))
        return (g.steps, g.values[0]) if not g.empty else (np.zeros(0, dtype=np.int64), np.zeros(0))

    def by_entity(self, metric: str, *, reduce: str = "mean", ranks: np.ndarray | None = None) -> Grid:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.by_entity(metric, reduce=reduce, ranks=ranks)
        if not self.has(metric):
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        where = self.where(metric, None, ranks)
        if self._small(metric, None):
            return self._fetched(metric, where, reduce, "entity")
        return self._pushed(metric, where, ("entity",), _aggregate(reduce))

    def nonfinite(self, metric: str) -> Grid:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.nonfinite(metric)
        return self._pushed(metric, self.where(metric), ("entity",),
                            "max(CASE WHEN isfinite(value) THEN 0.0 ELSE 1.0 END)")

    def by_rank(self, metric: str, entity: str | None = None, *, reduce: str = "mean",
                ranks: np.ndarray | list[int] | None = None) -> Grid:
        if self._local(metric):
            assert self._resident is not None
            return self._resident.by_rank(metric, entity, reduce=reduce, ranks=ranks)
        if not self.has(metric):
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        if ranks is None:
            mask = self._mask(metric, entity)
            labels = np.unique(self._e["rank"][mask]).size
            span = int(self._e["step_max"][mask].max() - self._e["step_min"][mask].min() + 1)
            if labels * span > self.sizes.grid_cells:
                raise NotJudged(f"{metric} is read out of core: its {labels} ranks × {span} steps grid is larger "
                                f"than diagnose.out_of_core.grid_cells ({self.sizes.grid_cells})")
        return self._fetched(metric, self.where(metric, entity, ranks), reduce, "rank")

    def materialize(self, metrics: Iterable[str]) -> TelemetryView:
        """The rows of ``metrics`` in memory (NotJudged when they are more than the resident budget)."""
        wanted = [m for m in metrics if m in self._stored]
        if self._resident is not None and set(wanted) <= self.resident_metrics:
            return self._resident
        rows = sum(self.rows_by_metric[m] for m in wanted)
        if rows > self.sizes.resident_rows:
            raise NotJudged(f"{', '.join(wanted)} read out of core: {rows} rows are more than "
                            f"diagnose.out_of_core.resident_rows ({self.sizes.resident_rows})")
        return self._read(wanted)

    # -- scans -----------------------------------------------------------------------------------------------
    def step_range(self, metric: str, entity: str | None = None) -> tuple[int, int]:
        """(first, last) step of ``metric`` (of ``entity``), from the catalog."""
        mask = self._mask(metric, entity)
        return int(self._e["step_min"][mask].min()), int(self._e["step_max"][mask].max())

    def window(self, job: ScanJob, plan: ScanPlan) -> Window:
        labels = self.rank_labels(job.metric, job.entity)
        also = tuple((m, self.where(m, job.entity)) for m in job.also if self.has(m))
        return Window(job.metric, self.where(job.metric, job.entity), also, labels, job.reduce, plan.chunk_steps)

    def scan(self, job: ScanJob, plan: ScanPlan) -> Partial:
        if not self.has(job.metric):
            return merge([], np.zeros(0, dtype=np.int64))
        if self._local(job.metric) and all(self._local(m) for m in job.also if self.has(m)):
            assert self._resident is not None
            return self._resident.scan(job, plan)
        if self.cache is not None:  # a follow: only the chunks new parts touched are scanned
            part = self.cache.scan(self, job, plan)
        else:
            w = self.window(job, plan)
            if w.labels.size == 0:
                return merge([], w.labels)
            windows = plan.windows(*self.step_range(job.metric, job.entity), w.labels.size)
            part = merge(self.executor(self.source, w, job, windows), w.labels)
        if job.entity is None or len(self.entities(job.metric)) == 1:
            self._steps.setdefault(job.metric, part.seen)
        release_memory()
        return part
