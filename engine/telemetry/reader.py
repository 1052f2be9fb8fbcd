"""Read a run's telemetry: filtered through ``pyarrow.dataset`` (rank partitions pruned, row groups skipped
by statistics on dimension/metric/entity/step) into a :class:`Telemetry` with helpers for the detectors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from debugtune.engine.telemetry.errors import TelemetryError
from debugtune.engine.telemetry.runmeta import RUN_JSON, read_run_json
from debugtune.engine.telemetry.schema import METRICS, SCHEMA
from debugtune.engine.telemetry.writer import TELEMETRY_DIR

_PARTITIONING = ds.partitioning(pa.schema([("rank", pa.int32())]), flavor="hive")
_DICT_COLUMNS = ("run", "dimension", "metric", "entity")
StepFilter = int | range | slice | Iterable[int] | None


def _names(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _step_expression(steps: StepFilter) -> ds.Expression | None:
    if steps is None:
        return None
    if isinstance(steps, int | np.integer):
        return ds.field("step") == int(steps)
    if isinstance(steps, range | slice):
        if steps.step not in (None, 1):
            return ds.field("step").isin(list(range(steps.start or 0, steps.stop, steps.step)))
        expr = None
        if steps.start is not None:
            expr = ds.field("step") >= int(steps.start)
        if steps.stop is not None:
            upper = ds.field("step") < int(steps.stop)
            expr = upper if expr is None else expr & upper
        return expr
    return ds.field("step").isin([int(s) for s in steps])


Names = str | Iterable[str] | None


def _filter(dimensions: Names, metrics: Names, entities: Names, steps: StepFilter,
            ranks: int | Iterable[int] | None) -> ds.Expression | None:
    parts = []
    for name, values in (("dimension", dimensions), ("metric", metrics), ("entity", entities)):
        names = _names(values)
        if names is not None:
            parts.append(ds.field(name) == names[0] if len(names) == 1 else ds.field(name).isin(names))
    if (expr := _step_expression(steps)) is not None:
        parts.append(expr)
    if ranks is not None:
        rank_list = [int(ranks)] if isinstance(ranks, int | np.integer) else [int(r) for r in ranks]
        parts.append(ds.field("rank").isin(rank_list))
    if not parts:
        return None
    expr = parts[0]
    for p in parts[1:]:
        expr = expr & p
    return expr


def _check_fragment(fragment: ds.ParquetFileFragment) -> None:
    """Raise TelemetryError naming the part when its footer is unreadable or a column has a wrong type."""
    try:
        physical = fragment.physical_schema
    except (pa.ArrowException, OSError) as err:
        raise TelemetryError(fragment.path, f"corrupt Parquet part: {err}") from None
    check_part_schema(fragment.path, physical)


def check_part_schema(path: str, physical: pa.Schema) -> None:
    """Raise TelemetryError naming the part when a column is missing or has a wrong type."""
    for want in SCHEMA:
        if want.name not in physical.names:
            if want.name == "rank":
                continue  # supplied by the hive partition
            raise TelemetryError(path, f"column {want.name!r} is missing")
        got = physical.field(want.name).type
        expected = want.type.value_type if pa.types.is_dictionary(want.type) else want.type
        if pa.types.is_dictionary(got):
            got = got.value_type
        ok = (got == expected or (pa.types.is_string(expected) and pa.types.is_large_string(got))
              or (pa.types.is_integer(expected) and pa.types.is_integer(got)))
        if not ok:
            raise TelemetryError(path, f"column {want.name!r} has type {got}, expected {expected}")


def telemetry_dataset(run_dir: str | Path, parts: Iterable[str] | None = None) -> ds.FileSystemDataset:
    """The run's Parquet dataset with the telemetry schema (nothing read yet); only ``parts`` when given."""
    root = Path(run_dir) / TELEMETRY_DIR
    if not root.is_dir():
        raise TelemetryError(root, "telemetry directory not found")
    try:
        if parts is not None:  # in the order discovery gives (by path), so rows come in the same order
            return ds.dataset(sorted(parts), format="parquet", schema=SCHEMA, partitioning=_PARTITIONING,
                              partition_base_dir=str(root))
        return ds.dataset(root, format="parquet", schema=SCHEMA, partitioning=_PARTITIONING)
    except (pa.ArrowException, OSError) as err:
        raise TelemetryError(root, f"cannot open telemetry dataset: {err}") from err


def read_telemetry(run_dir: str | Path, *, dimensions: str | Iterable[str] | None = None,
                   metrics: str | Iterable[str] | None = None, entities: str | Iterable[str] | None = None,
                   steps: StepFilter = None, ranks: int | Iterable[int] | None = None,
                   columns: Iterable[str] | None = None, aliases: bool = True,
                   alias_plan: Any = None, parts: Iterable[str] | None = None) -> Telemetry:
    """Load the rows of a run that match every given filter.

    ``steps``: an int, a ``range``/``slice`` (half-open), or an iterable of step numbers. ``run.json`` is read
    when present (a malformed one raises); without it the metadata holds only what the rows tell.
    ``aliases``: metric spellings of the knowledge base are read as their canonical names (and dimensions;
    see :mod:`~debugtune.engine.telemetry.aliases`), and ``metrics`` may name either; False reads names as stored.
    ``alias_plan``: the run's :class:`~debugtune.engine.telemetry.aliases.AliasPlan` when the caller has it (from
    the catalog), so the whole run's metric column is not read to make it. ``parts``: only these Parquet parts
    hold rows that can match (from the catalog).
    """
    from debugtune.engine.telemetry.aliases import AliasPlan  # not at import: it is also a command

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TelemetryError(run_dir, "run directory not found")
    meta: dict[str, Any] = read_run_json(run_dir) if (run_dir / RUN_JSON).exists() else {}
    cols = list(SCHEMA.names) if columns is None else list(columns)
    unknown = [c for c in cols if c not in SCHEMA.names]
    if unknown:
        raise TelemetryError(run_dir, f"unknown telemetry column {unknown[0]!r} (columns: {list(SCHEMA.names)})")
    if not (run_dir / TELEMETRY_DIR).is_dir():
        if not meta:
            raise TelemetryError(run_dir, "neither telemetry/ nor run.json found (not a debugtune run directory?)")
        return Telemetry(SCHEMA.empty_table().select(cols), meta)
    dataset = telemetry_dataset(run_dir, parts)
    dims = _names(dimensions)
    if dims is not None and set(dims) >= set(METRICS):
        dimensions = dims = None  # every dimension the writer accepts: no filter
    plan = alias_plan if aliases else None
    if plan is None and aliases and any(f is not None for f in (dimensions, metrics, entities, steps, ranks)):
        everything = list(dataset.get_fragments())  # the renaming is decided on the whole run
        for fragment in everything:
            _check_fragment(fragment)
        plan = AliasPlan(_metric_rows(_read(everything, dataset, ["metric"], None, run_dir)))
    if plan is not None and (requested := _names(metrics)) is not None:
        metrics = plan.stored_for(plan.requested(requested))
    expr = _filter(None if plan else dimensions, metrics, entities, steps, ranks)
    if plan and dims is not None:
        into = ds.field("dimension").isin(dims)
        if moved := plan.moved_into(set(dims)):
            into = into | ds.field("metric").isin(moved)
        expr = into if expr is None else expr & into
    fragments = list(dataset.get_fragments(filter=expr))
    if plan is None or alias_plan is not None:  # else checked above
        for fragment in fragments:
            _check_fragment(fragment)
    needed = cols if not aliases else list(dict.fromkeys([*cols, "metric", "dimension"]))
    table = _read(fragments, dataset, needed, expr, run_dir)
    if aliases:
        plan = plan if plan is not None else AliasPlan(_metric_rows(table))
        table = _canonical(table, plan)
        if plan and dims is not None:
            table = table.filter(pc.is_in(table.column("dimension").cast(pa.string()), pa.array(dims)))
        table = table.select(cols)
    return Telemetry(table, meta)


def _read(fragments: list[ds.ParquetFileFragment], dataset: ds.FileSystemDataset, columns: list[str],
          expr: ds.Expression | None, run_dir: Path) -> pa.Table:
    try:
        return ds.FileSystemDataset(fragments, SCHEMA, dataset.format).to_table(columns=columns, filter=expr)
    except (pa.ArrowException, OSError) as err:
        raise TelemetryError(_culprit(str(err), fragments, run_dir), f"cannot read telemetry: {err}") from None


def _metric_rows(table: pa.Table) -> dict[str, int]:
    """Rows per stored metric name (from the dictionary codes: no string is decoded per row)."""
    rows: dict[str, int] = {}
    for chunk in table.column("metric").chunks:
        if not pa.types.is_dictionary(chunk.type):
            chunk = pc.dictionary_encode(chunk)
        counts = np.bincount(chunk.indices.to_numpy(zero_copy_only=False), minlength=len(chunk.dictionary))
        for name, n in zip(chunk.dictionary.to_pylist(), counts.tolist(), strict=True):
            if n:
                rows[name] = rows.get(name, 0) + n
    return rows


def _dictionary(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array of a name column (unified dictionaries)."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    arr = column.unify_dictionaries().combine_chunks()
    return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr


def _canonical(table: pa.Table, plan: Any) -> pa.Table:
    """The table with the plan's spellings renamed (metric column) and moved to their canonical dimension.

    Works on the dictionaries: one name lookup per distinct metric, one vectorised remap of the row codes."""
    if not plan or table.num_rows == 0:
        return table
    schema = table.schema
    metric = _dictionary(table.column("metric"))
    stored = metric.dictionary.to_pylist()
    names = [plan.output(n) for n in stored]
    uniq = list(dict.fromkeys(names))
    remap = np.array([uniq.index(n) for n in names], dtype=np.int32)
    codes = metric.indices.to_numpy(zero_copy_only=False)
    field = schema.field("metric")
    out = table.set_column(schema.get_field_index("metric"), field, pa.DictionaryArray.from_arrays(
        pa.array(remap[codes], field.type.index_type), pa.array(uniq, pa.string())))
    moved = [plan.dimension(n) for n in stored]
    if not any(moved):
        return out
    dim = _dictionary(table.column("dimension"))
    dims = dim.dictionary.to_pylist()
    dims += [d for d in dict.fromkeys(moved) if d and d not in dims]
    target = np.array([dims.index(d) if d else -1 for d in moved], dtype=np.int64)[codes]
    dcodes = np.where(target >= 0, target, dim.indices.to_numpy(zero_copy_only=False))
    field = schema.field("dimension")
    return out.set_column(schema.get_field_index("dimension"), field, pa.DictionaryArray.from_arrays(
        pa.array(dcodes, field.type.index_type), pa.array(dims, pa.string())))


def _culprit(message: str, fragments: list[ds.ParquetFileFragment], default: Path) -> str | Path:
    for fragment in fragments:
        if fragment.path in message:
            return str(fragment.path)
    return default


@dataclass(frozen=True)
class Telemetry:
    """Long-form telemetry rows (``table``, schema :data:`SCHEMA`) and the run metadata (``meta``)."""

    table: pa.Table
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @property
    def run_id(self) -> str | None:
        """The run id from run.json, else from the rows."""
        if self.meta.get("run_id"):
            return str(self.meta["run_id"])
        names = self._names("run")
        return names[0] if len(names) else None

    # -- decoded columns (computed once) --------------------------------------------------------------
    @cached_property
    def _decoded(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """For each name column present: (codes per row, names) after unifying the chunk dictionaries."""
        out = {}
        for name in _DICT_COLUMNS:
            if name not in self.table.column_names:
                continue
            col = self.table.column(name)
            if not pa.types.is_dictionary(col.type):
                col = pc.dictionary_encode(col)
            arr = col.unify_dictionaries().combine_chunks() if col.num_chunks else pa.array([], col.type)
            if isinstance(arr, pa.ChunkedArray):
                arr = arr.combine_chunks()
            out[name] = (arr.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False),
                         np.array(arr.dictionary.to_pylist(), dtype=object))
        return out

    def _column(self, name: str) -> np.ndarray:
        return self._numeric[name]

    @cached_property
    def _numeric(self) -> dict[str, np.ndarray]:
        return {name: self.table.column(name).to_numpy() for name in ("rank", "step", "value")
                if name in self.table.column_names}

    def _names(self, column: str) -> np.ndarray:
        codes, names = self._decoded[column]
        return names[np.unique(codes)] if len(codes) else np.array([], dtype=object)

    def _mask(self, column: str, value: str) -> np.ndarray:
        codes, names = self._decoded[column]
        hit = np.flatnonzero(names == value)
        if len(hit) == 0:
            return np.zeros(len(codes), dtype=bool)
        return np.isin(codes, hit)

    # -- what is there -------------------------------------------------------------------------------
    def metrics(self) -> list[str]:
        """Metric names present, sorted."""
        return sorted(self._names("metric"))

    def entities(self, metric: str | None = None) -> list[str]:
        """Entity names present (of one metric when given), sorted."""
        codes, names = self._decoded["entity"]
        if metric is not None:
            codes = codes[self._mask("metric", metric)]
        return sorted(names[np.unique(codes)]) if len(codes) else []

    def ranks(self) -> list[int]:
        """Ranks present, sorted."""
        return [int(r) for r in np.unique(self._column("rank"))]

    def steps(self) -> np.ndarray:
        """Distinct steps present, sorted."""
        return np.unique(self._column("step"))

    def filter(self, **filters: Any) -> Telemetry:
        """The rows matching the filters of :func:`read_telemetry` (in memory)."""
        expr = _filter(filters.pop("dimensions", None), filters.pop("metrics", None),
                       filters.pop("entities", None), filters.pop("steps", None), filters.pop("ranks", None))
        if filters:
            raise TypeError(f"unknown filter {next(iter(filters))!r}")
        return self if expr is None else Telemetry(self.table.filter(expr), self.meta)

    def to_pandas(self) -> Any:  # pragma: no cover - pandas is optional
        """The rows as a pandas DataFrame (needs pandas)."""
        return self.table.to_pandas()

    # -- shapes for the detectors -----------------------------------------------------------------------
    def _select(self, metric: str, entity: str | None, rank: int | None) -> np.ndarray:
        mask = self._mask("metric", metric)
        if entity is not None:
            mask &= self._mask("entity", entity)
        if rank is not None:
            mask &= self._column("rank") == int(rank)
        return np.flatnonzero(mask)

    def series(self, metric: str, entity: str = "", rank: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one metric and entity, sorted by step.

        ``rank=None`` takes the lowest rank that has the series. Where a step occurs more than once the
        last row (in table order) wins.
        """
        rows = self._select(metric, entity, rank)
        if rank is None and len(rows):
            rank_of = self._column("rank")[rows]
            rows = rows[rank_of == rank_of.min()]
        return self._last_per_step(rows)

    def _last_per_step(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        steps = self._column("step")[rows]
        values = self._column("value")[rows]
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
        if len(steps) > 1:
            last = np.append(steps[1:] != steps[:-1], True)
            steps, values = steps[last], values[last]
        return steps, values

    def pivot(self, metric: str, by: str = "entity", *, rank: int | None = None,
              entity: str | None = None) -> tuple[np.ndarray, list[str] | list[int], np.ndarray]:
        """(steps, keys, values[step, key]) of one metric, one column per entity or per rank; NaN where absent.

        ``by="entity"`` uses one rank (``rank``, default the lowest present); ``by="rank"`` uses one entity
        (``entity``, default ''). Duplicate (step, key) rows: the last wins.
        """
        if by not in ("entity", "rank"):
            raise ValueError(f"pivot by 'entity' or 'rank', not {by!r}")
        rows = self._select(metric, "" if by == "rank" and entity is None else entity, rank if by == "entity" else None)
        if by == "entity" and rank is None and len(rows):
            rank_of = self._column("rank")[rows]
            rows = rows[rank_of == rank_of.min()]
        if not len(rows):
            return np.array([], dtype=np.int64), [], np.empty((0, 0))
        if by == "entity":
            codes, names = self._decoded["entity"]
            key_codes = codes[rows]
        else:
            key_codes = self._column("rank")[rows].astype(np.int64)
        steps, step_idx = np.unique(self._column("step")[rows], return_inverse=True)
        uniq_keys, key_idx = np.unique(key_codes, return_inverse=True)
        keys: list[str] | list[int]
        if by == "entity":
            key_names = names[uniq_keys]
            order = np.argsort(key_names, kind="stable")
            keys = [str(k) for k in key_names[order]]
            remap = np.empty(len(order), dtype=np.int64)
            remap[order] = np.arange(len(order))
            key_idx = remap[key_idx]
        else:
            keys = [int(k) for k in uniq_keys]
        grid = np.full((len(steps), len(keys)), np.nan)
        grid[step_idx, key_idx] = self._column("value")[rows]
        return steps, keys, grid
