"""Telemetry as dense numpy grids: one metric pivoted to entities × steps or ranks × steps.

The long-form Arrow table (DESIGN §3) is decoded once into integer columns; a grid is then built
with ``np.bincount`` over flat indices (no Python loop over rows, steps or ranks). Missing cells
are NaN. This is what every detector family reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class Grid:
    """``values[i, j]`` = the metric at ``labels[i]`` (entity or rank) and ``steps[j]``; NaN where absent."""

    metric: str
    labels: tuple[Any, ...]
    steps: np.ndarray
    values: np.ndarray

    @property
    def empty(self) -> bool:
        return self.values.size == 0

    def row(self, label: Any) -> np.ndarray:
        return self.values[self.labels.index(label)]

    def like(self, other: Grid) -> np.ndarray:
        """This grid's values re-indexed onto ``other``'s labels and steps (NaN where this grid has none)."""
        out = np.full(other.values.shape, np.nan)
        if self.steps.size == 0:
            return out
        cols = np.searchsorted(self.steps, other.steps)
        ok = (cols < self.steps.size) & (self.steps[np.minimum(cols, self.steps.size - 1)] == other.steps)
        mine = {label: i for i, label in enumerate(self.labels)}
        pairs = [(i, mine[label]) for i, label in enumerate(other.labels) if label in mine]
        if pairs:
            dst, src = (np.array(x) for x in zip(*pairs, strict=True))
            out[np.ix_(dst, np.flatnonzero(ok))] = self.values[np.ix_(src, cols[ok])]
        return out

    def select(self, keep: np.ndarray) -> Grid:
        """The rows where ``keep`` (a boolean mask over labels) is true."""
        idx = np.flatnonzero(keep)
        return Grid(self.metric, tuple(self.labels[i] for i in idx), self.steps, self.values[idx])


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Integer codes (int32) and the string dictionary of a name column whose chunks share one dictionary."""
    if not pa.types.is_dictionary(column.type):
        column = pa.chunked_array([c.dictionary_encode() for c in column.chunks]).unify_dictionaries() \
            if column.num_chunks else pa.chunked_array([], pa.dictionary(pa.int32(), pa.string()))
    if column.num_chunks == 0:
        return np.zeros(0, dtype=np.int32), []
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in column.chunks])
    return codes.astype(np.int32, copy=False), column.chunk(0).dictionary.to_pylist()


def _numbers(column: pa.ChunkedArray, dtype) -> np.ndarray:
    return column.to_numpy().astype(dtype, copy=False)


def _dense_index(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique values, index of each element into them) in O(n) when the range is compact."""
    if x.size == 0:
        return x[:0], np.zeros(0, dtype=np.int64)
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo + 1
    if span <= 4 * x.size + 1024:
        present = np.bincount(x - lo, minlength=span) > 0
        uniq = np.flatnonzero(present) + lo
        lut = np.cumsum(present) - 1
        return uniq.astype(np.int64), lut[x - lo].astype(np.int64)
    uniq, inverse = np.unique(x, return_inverse=True)
    return uniq.astype(np.int64), inverse.astype(np.int64)


def _distinct(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an integer array (a presence table when the range is compact)."""
    if x.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(x.min()), int(x.max())
    if hi - lo + 1 > 4 * x.size + 1024:
        return np.unique(x).astype(np.int64)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[x - lo] = True
    return np.flatnonzero(present).astype(np.int64) + lo


def _block(keys: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(sorted keys, block order, steps) when the rows are complete per-key blocks over the same
    strictly increasing steps (the usual layout: one partition per rank, sorted by step), else None."""
    if keys.size == 0:
        return None
    n = int(np.argmax(keys != keys[0])) or keys.size
    if keys.size % n:
        return None
    k = keys.size // n
    kb, sb = keys.reshape(k, n), steps.reshape(k, n)
    first = sb[0]
    if not (bool(np.all(kb == kb[:, :1])) and bool(np.all(first[1:] > first[:-1])) and bool(np.all(sb == first))):
        return None
    heads = kb[:, 0]
    order = np.argsort(heads, kind="stable")
    if k > 1 and not bool(np.all(np.diff(heads[order]) > 0)):
        return None
    return heads[order], order, first


def pivot(metric: str, raw_keys: np.ndarray, steps: np.ndarray, vals: np.ndarray,
          reduce: str) -> tuple[Grid, np.ndarray]:
    """Rows (key, step, value) as a keys × steps grid combining repeated cells with ``reduce`` ("mean", "sum" or
    "max"); returns it and the key values. A NaN or Inf observation stays visible in its cell."""
    block = _block(raw_keys, steps)
    if block is not None:  # one row per cell, in blocks: a reshape is the pivot
        heads, order, axis = block
        grid_values = vals.reshape(heads.size, -1)[order]
        return Grid(metric, tuple(heads.tolist()), axis.astype(np.int64), grid_values), heads
    key_vals, keys = _dense_index(raw_keys)
    step_vals, step_idx = _dense_index(steps)
    n_cells = key_vals.size * step_vals.size
    flat = keys * step_vals.size + step_idx
    count = np.bincount(flat, minlength=n_cells)
    if reduce == "max":
        out = np.full(n_cells, -np.inf)
        np.maximum.at(out, flat, np.nan_to_num(vals, nan=np.inf))
    else:
        finite = np.isfinite(vals)
        out = np.bincount(flat[finite], weights=vals[finite], minlength=n_cells)
        if reduce == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                out = out / np.bincount(flat[finite], minlength=n_cells)
        if not finite.all():  # a NaN or Inf observation stays visible in its cell
            bad = ~finite
            out[flat[bad]] = np.where(np.isposinf(vals[bad]), np.inf, np.nan)
    out[count == 0] = np.nan
    grid = Grid(metric, tuple(key_vals.tolist()), step_vals, out.reshape(key_vals.size, step_vals.size))
    return grid, key_vals


@dataclass
class TelemetryView:
    """Decoded columns of one run's telemetry; per-metric row indices are found on first use."""

    run: str
    meta: dict[str, Any]
    rank: np.ndarray
    step: np.ndarray
    value: np.ndarray
    entity_code: np.ndarray
    entity_names: list[str]
    metric_code: np.ndarray
    metric_names: list[str]
    dim_code: np.ndarray
    dim_names: list[str]
    _rows: dict[str, np.ndarray] = field(default_factory=dict)
    _cache: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_table(cls, table: pa.Table, meta: dict[str, Any] | None = None, run: str | None = None) -> TelemetryView:
        meta = dict(meta or {})
        table = table.unify_dictionaries()
        metric_code, metric_names = _codes(table.column("metric"))
        dim_code, dim_names = _codes(table.column("dimension"))
        entity_code, entity_names = _codes(table.column("entity"))
        return cls(run=run or str(meta.get("run_id") or meta.get("run") or ""), meta=meta,
                   rank=_numbers(table.column("rank"), np.int32), step=_numbers(table.column("step"), np.int64),
                   value=_numbers(table.column("value"), np.float64), entity_code=entity_code,
                   entity_names=entity_names, metric_code=metric_code, metric_names=metric_names,
                   dim_code=dim_code, dim_names=dim_names)

    def rows(self, metric: str) -> np.ndarray | None:
        """Row indices of ``metric`` (None when absent)."""
        if metric not in self._rows:
            hit = [i for i, name in enumerate(self.metric_names) if name == metric]
            if len(hit) == 1:
                rows = np.flatnonzero(self.metric_code == hit[0])
            else:
                rows = np.flatnonzero(np.isin(self.metric_code, hit)) if hit else np.zeros(0, dtype=np.int64)
            self._rows[metric] = rows
        rows = self._rows[metric]
        return rows if rows.size else None

    # -- what is there ---------------------------------------------------------------------------
    @property
    def metrics(self) -> set[str]:
        present = np.bincount(self.metric_code, minlength=len(self.metric_names)) > 0
        return {name for name, here in zip(self.metric_names, present, strict=True) if here}

    def has(self, *metrics: str) -> bool:
        return all(self.rows(m) is not None for m in metrics)

    def dimension_of(self, metric: str) -> str | None:
        rows = self.rows(metric)
        return None if rows is None else self.dim_names[int(self.dim_code[rows[0]])]

    def entities(self, metric: str) -> list[str]:
        rows = self.rows(metric)
        if rows is None:
            return []
        present = np.flatnonzero(np.bincount(self.entity_code[rows], minlength=len(self.entity_names)))
        return [self.entity_names[i] for i in present]

    def ranks(self, metric: str | None = None) -> np.ndarray:
        key = f"ranks:{metric or ''}"
        if key not in self._cache:
            rows = self.rows(metric) if metric else None
            self._cache[key] = _distinct(self.rank if rows is None else self.rank[rows])
        return self._cache[key]

    def steps(self, metric: str) -> np.ndarray:
        """The distinct steps at which ``metric`` was recorded."""
        key = f"steps:{metric}"
        if key not in self._cache:
            rows = self.rows(metric)
            self._cache[key] = np.zeros(0, dtype=np.int64) if rows is None else _distinct(self.step[rows])
        return self._cache[key]

    # -- grids -----------------------------------------------------------------------------------
    def _subset(self, metric: str, entity: str | None, ranks: np.ndarray | None = None) -> np.ndarray:
        rows = self.rows(metric)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        if entity is not None:
            try:
                code = self.entity_names.index(entity)
            except ValueError:
                return np.zeros(0, dtype=np.int64)
            rows = rows[self.entity_code[rows] == code]
        if ranks is not None:
            rows = rows[np.isin(self.rank[rows], ranks)]
        return rows

    def _pivot(self, metric: str, rows: np.ndarray, raw_keys: np.ndarray, reduce: str,
               values: np.ndarray | None = None) -> tuple[Grid, np.ndarray]:
        """Grid of ``rows`` by ``raw_keys`` (rank numbers or entity codes) × step; returns it and the key values.

        ``values`` replaces the rows' values (same length as ``rows``)."""
        return pivot(metric, raw_keys, self.step[rows], self.value[rows] if values is None else values, reduce)

    def by_entity(self, metric: str, *, reduce: str = "mean", ranks: np.ndarray | None = None) -> Grid:
        """Entities × steps, combining ranks with ``reduce`` ("mean", "sum" or "max")."""
        rows = self._subset(metric, None, ranks)
        if rows.size == 0:
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        grid, codes = self._pivot(metric, rows, self.entity_code[rows], reduce)
        return Grid(metric, tuple(self.entity_names[int(c)] for c in codes), grid.steps, grid.values)

    def nonfinite(self, metric: str) -> Grid:
        """Entities × steps: 1 where an observation was NaN or Inf (any rank), 0 where all were finite,
        NaN where nothing was recorded."""
        rows = self._subset(metric, None)
        if rows.size == 0:
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        bad = (~np.isfinite(self.value[rows])).astype(np.float64)
        grid, codes = self._pivot(metric, rows, self.entity_code[rows], "max", bad)
        return Grid(metric, tuple(self.entity_names[int(c)] for c in codes), grid.steps, grid.values)

    def by_rank(self, metric: str, entity: str | None = None, *, reduce: str = "mean",
                ranks: np.ndarray | list[int] | None = None) -> Grid:
        """Ranks × steps for one entity (all entities combined with ``reduce`` when ``entity`` is None); only
        ``ranks`` when given (a batch of ranks, or one rank's series)."""
        rows = self._subset(metric, entity, None if ranks is None else np.asarray(ranks))
        if rows.size == 0:
            return Grid(metric, (), np.zeros(0, dtype=np.int64), np.zeros((0, 0)))
        grid, ranks = self._pivot(metric, rows, self.rank[rows], reduce)
        return Grid(metric, tuple(int(r) for r in ranks), grid.steps, grid.values)

    def series(self, metric: str, entity: str = "", *, reduce: str = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one entity combined over ranks; empty arrays when absent."""
        rows = self._subset(metric, entity)
        if rows.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        grid, _ = self._pivot(metric, rows, np.zeros(rows.size, dtype=np.int64), reduce)
        return grid.steps, grid.values[0]

    # -- scans (``scan``): the same interface as the out-of-core view --------------------------------------
    def rank_labels(self, metric: str, entity: str | None = None) -> np.ndarray:
        """The ranks that recorded ``metric`` (of ``entity`` when given)."""
        rows = self._subset(metric, entity)
        return _distinct(self.rank[rows]) if rows.size else np.zeros(0, dtype=np.int64)

    def materialize(self, metrics: Any) -> TelemetryView:
        """The rows of ``metrics`` in memory: all of them are already."""
        return self

    def step_count(self) -> int:
        """Distinct steps with any row."""
        return int(_distinct(self.step).size)

    def scan(self, job: Any, plan: Any) -> Any:
        """Run a :class:`~debugtune.engine.diagnose.scan.ScanJob` over this run's grid (windows of ``plan``)."""
        from debugtune.engine.diagnose.scan import grid_blocks, merge, run_block

        grid = self.by_rank(job.metric, job.entity, reduce=job.reduce)
        also = {m: self.by_rank(m, job.entity, reduce=job.reduce).like(grid) for m in job.also}
        labels = np.asarray(grid.labels, dtype=np.int64)
        return merge([run_block(job, b) for b in grid_blocks(grid, also, plan)], labels)

