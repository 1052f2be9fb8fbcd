"""Per-operation timing tables (Parquet or CSV, one row per operation of a rank) → per-step telemetry and the
rank layout.

The format of ByteDance's straggler traces (StragglerAnalysis ``trace-*.parquet``) and of similar timer dumps:
columns ``rank``, ``step``, the operation type (``optype`` / ``op`` / ``name``), its start and duration
(``start_ts`` / ``ts`` and ``duration`` / ``dur``), and optionally ``stage`` (pipeline rank), ``dp_rank``,
``tp_rank``. Times are seconds unless a column says ``_ms`` / ``_us`` in its name. Per rank and step:

- ``compute_ms`` (forward/backward/optimizer compute operations), ``dataloader_wait_ms`` (data loading),
  ``microbatch_count`` (the ``forward-compute`` operations: micro-batches per step),
  ``step_time_ms`` (first start to last end of the rank's operations in the step);
- per collective kind (reduce-scatter of gradients, all-gather of parameters, all-reduce, tensor-parallel ones,
  pipeline send/recv): ``collective_ms`` and ``collective_count``; ``comm_ms`` (their union) and
  ``comm_not_overlapped_ms`` (the part not under compute);
- run.json ``layout.stage`` (rank → pipeline stage), ``layout.dp`` (rank → data-parallel replica) and ``parallel``
  sizes from the stage, dp and tp columns.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from debugtune.engine.capture.importers.device_timeline import Coverage
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink

_OP = ("optype", "op_type", "op", "name")
_START = ("start_ts", "start", "ts", "start_ms", "start_us", "ts_us", "ts_ms")
_DUR = ("duration", "dur", "duration_ms", "duration_us", "dur_us", "dur_ms")
_P2P = re.compile(r"(send|recv)")
_KINDS = (("reducescatter", "reducescatter"), ("reduce-scatter", "reducescatter"), ("allgather", "allgather"),
          ("all-gather", "allgather"), ("allreduce", "allreduce"), ("all-reduce", "allreduce"),
          ("alltoall", "alltoall"), ("all-to-all", "alltoall"), ("broadcast", "broadcast"),
          # Megatron's timer around the gradient-norm all-reduce (its wait for the slowest rank included): data-
          # parallel communication in ByteDance's own timeline (StragglerAnalysis analyzer/to_timeline.py)
          ("clip-main-grad", "allreduce"))


def kind_of(op: str) -> str | None:
    """The collective kind of an operation type ('grads-reduce-scatter' → 'reducescatter', 'forward-send' →
    'send'); None for computation and data loading."""
    low = op.lower()
    if _P2P.search(low):
        return "sendrecv" if "send" in low and "recv" in low else ("send" if "send" in low else "recv")
    return next((kind for key, kind in _KINDS if key in low), None)


def _is_table(path: Path) -> bool:
    if not path.is_file() or not path.name.lower().endswith((".parquet", ".csv")):
        return False
    try:
        names = pq.read_schema(path).names if path.suffix.lower() == ".parquet" else \
            path.open(encoding="utf-8", errors="replace").readline().strip().split(",")
    except (OSError, pa.ArrowInvalid):
        return False
    cols = {n.strip().lower() for n in names}
    return {"rank", "step"} <= cols and bool(cols & set(_OP)) and bool(cols & set(_START)) and bool(cols & set(_DUR))


def tables(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if _is_table(path) else []
    return sorted(p for p in path.glob("*") if _is_table(p))


def detect(path: Path) -> bool:
    return bool(tables(path))


def _column(table: pa.Table, names: tuple[str, ...], path: Path, required: bool = True) -> tuple[str, np.ndarray]:
    lower = {n.lower(): n for n in table.column_names}
    for n in names:
        if n in lower:
            return n, table.column(lower[n]).to_numpy(zero_copy_only=False)
    if required:
        raise ImportFormatError(path, f"no column {' / '.join(names)}", field=names[0])
    return "", np.zeros(0)


def _scale(name: str) -> float:
    """Seconds per unit of a time column (seconds unless its name ends in _ms / _us)."""
    return 1e-6 if name.endswith("_us") else 1e-3 if name.endswith("_ms") else 1.0


def _read(path: Path) -> pa.Table:
    try:
        return pq.read_table(path) if path.suffix.lower() == ".parquet" else pacsv.read_csv(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise ImportFormatError(path, f"cannot read the table: {err}") from None


def load(path: Path, sink: RunSink) -> None:
    files = tables(path)
    if not files:
        raise ImportFormatError(path, "no per-operation table (rank, step, optype, start_ts, duration) found")
    stage: dict[int, int] = {}
    replica: dict[int, int] = {}
    sizes: dict[str, set[int]] = defaultdict(set)
    for f in files:
        sink.source(f)
        table = _read(f)
        _, rank = _column(table, ("rank",), f)
        _, step = _column(table, ("step",), f)
        _, op = _column(table, _OP, f)
        start_name, start = _column(table, _START, f)
        dur_name, dur = _column(table, _DUR, f)
        try:
            rank, step = rank.astype(np.int64), step.astype(np.int64)
            t0 = start.astype(np.float64) * _scale(start_name) * 1e3  # ms
            d = dur.astype(np.float64) * _scale(dur_name) * 1e3
        except (TypeError, ValueError) as err:
            raise ImportFormatError(f, f"rank, step, start and duration must be numbers ({err})") from None
        op = np.array([str(o) for o in op])
        for col, key in (("stage", "pp"), ("dp_rank", "dp"), ("tp_rank", "tp")):
            name, values = _column(table, (col,), f, required=False)
            if name:
                sizes[key] |= set(values.astype(np.int64).tolist())
                if col in ("stage", "dp_rank"):
                    (stage if col == "stage" else replica).update(
                        zip(rank.tolist(), values.astype(np.int64).tolist(), strict=True))
        emit_ops(sink, rank, step, op, t0, d)
    sink.meta.update({"framework": "per-operation timing table", "world_size": len(sink.ranks),
                      "from_run_start": False, **grid_meta(stage, replica, sizes)})


def grid_meta(stage: dict[int, int], replica: dict[int, int], sizes: dict[str, set[int]]) -> dict[str, Any]:
    """run.json ``parallel`` sizes and ``layout`` (rank → stage, rank → data-parallel replica)."""
    out: dict[str, Any] = {"parallel": {k: len(v) for k, v in sizes.items() if v}}
    if stage:
        out["layout"] = {"stage": {str(r): s for r, s in sorted(stage.items())},
                         **({"dp": {str(r): d for r, d in sorted(replica.items())}} if replica else {})}
    return out


def emit_ops(sink: RunSink, rank: np.ndarray, step: np.ndarray, op: np.ndarray, t0: np.ndarray, d: np.ndarray,
             kind: np.ndarray | None = None) -> None:
    """Per (rank, step) metrics of the module docstring from one row per operation (times in ms); ``kind`` gives
    the collective kind of each operation where its name does not ('' = computation), else ``kind_of``."""
    if kind is None:
        kinds = {o: kind_of(o) for o in np.unique(op)}
        kind = np.array([kinds[o] or "" for o in op])
    low = np.char.lower(op.astype(str))
    loading = np.char.find(low, "data-load") >= 0
    compute = (kind == "") & ~loading & (np.char.find(low, "data-sync") < 0)
    forward = low == "forward-compute"
    order = np.lexsort((step, rank))
    rank, step, kind, t0, d, loading, compute, forward = (
        a[order] for a in (rank, step, kind, t0, d, loading, compute, forward))
    keys = np.stack([rank, step], axis=1)
    bounds = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(rank)]]), strict=True):
        r, s = int(rank[lo]), int(step[lo])
        sl = slice(lo, hi)
        ts, te = t0[sl], t0[sl] + d[sl]
        comp, comm = compute[sl], kind[sl] != ""
        row: dict[tuple[str, str], Any] = {("step_time_ms", ""): float(te.max() - ts.min()),
                                            ("compute_ms", ""): float(d[sl][comp].sum())}
        if forward[sl].any():
            row[("microbatch_count", "")] = float(forward[sl].sum())
        if loading[sl].any():
            row[("dataloader_wait_ms", "")] = float(d[sl][loading[sl]].sum())
        if comm.any():
            c = Coverage(ts[comm], te[comm])
            either = Coverage(np.concatenate([ts[comm], ts[comp]]), np.concatenate([te[comm], te[comp]])).total
            under = Coverage(ts[comp], te[comp]).total
            row[("comm_ms", "")] = c.total
            row[("comm_not_overlapped_ms", "")] = max(either - under, 0.0)
            for k in sorted(set(kind[sl][comm])):
                mine = kind[sl] == k
                row[("collective_ms", k)] = float(d[sl][mine].sum())
                row[("collective_count", k)] = float(mine.sum())
        for (metric, entity), value in row.items():
            sink.add(r, s, metric, value, entity)
