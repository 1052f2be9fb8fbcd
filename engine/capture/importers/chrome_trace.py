"""PyTorch profiler (Kineto) Chrome traces → per-step communication telemetry, streamed.

Per rank (one trace file per rank; a directory of traces is one multi-rank run) and per ``ProfilerStep#N``:
step time, compute / communication / not-overlapped communication / free time from the union of GPU
kernel intervals, and per collective kind (allreduce, allgather, …): time, count, bytes, algorithm
bandwidth and bus bandwidth with the nccl-tests factors. A GPU kernel belongs to the step in which its
launch (the runtime event with the same ``correlation``) happened. CPU-only traces (gloo) take their
collectives from the ``gloo:<op>`` annotations with the bytes from their input shapes.
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.capture.importers.collectives import (
    busbw_factor,
    dtype_bytes,
    kind_from_kernel,
    normalize_kind,
)
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.json_stream import TraceStream, args_of
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import head_text

_KERNEL = frozenset({"kernel", "Kernel"})
_MEMORY = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
_RUNTIME = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime", "xpu_runtime"})
_ANNOTATION = frozenset({"user_annotation", "cpu_op", "Operator"})
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_CPU_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc):")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
COMPUTE, COMM, MEMORY = 0, 1, 2


@dataclass(frozen=True)
class Collective:
    """One collective call as seen in the trace (times in µs, bandwidths in GB/s; NaN where unknown)."""

    kind: str
    name: str
    ts: float
    dur: float
    bytes: float
    group_size: int | None
    algbw_gbps: float
    busbw_gbps: float
    step: int | None
    process_group: str = ""


@dataclass
class TraceSummary:
    """What one trace file holds after analysis."""

    path: Path
    rank: int | None
    world_size: int | None
    steps: list[tuple[int, float, float]]  # (number, start µs, duration µs)
    per_step: dict[int, dict[tuple[str, str], float]]  # step → {(metric, entity): value}
    collectives: list[Collective]
    meta: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by the union of intervals [start, end)."""
    if len(starts) == 0:
        return 0.0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    # a new merged block begins where a start exceeds every end before it
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    block = np.cumsum(new) - 1
    block_start = s[new]
    block_end = np.zeros(len(block_start))
    np.maximum.at(block_end, block, e)
    return float(np.sum(block_end - block_start))


class _Collector:
    """Accumulates the few fields of the relevant events while the trace streams by."""

    def __init__(self) -> None:
        self.k_ts, self.k_dur, self.k_corr = array("d"), array("d"), array("q")
        self.k_type = array("b")
        self.comm: list[tuple[int, str, dict[str, Any]]] = []  # (kernel index, name, args)
        self.rt_corr, self.rt_ts = array("q"), array("d")
        self.steps: list[tuple[int, float, float]] = []
        self.cpu_comm: list[tuple[str, float, float, dict[str, Any]]] = []

    def feed(self, batch: list) -> None:
        kernel, memory, runtime, annotation = _KERNEL, _MEMORY, _RUNTIME, _ANNOTATION
        for ev in batch:
            if ev.ph != "X":
                continue
            cat = ev.cat
            if cat in runtime:
                corr = args_of(ev).get("correlation")
                if isinstance(corr, int):
                    self.rt_corr.append(corr)
                    self.rt_ts.append(_num(ev.ts))
            elif cat in kernel or cat in memory:
                args = args_of(ev)
                corr = args.get("correlation")
                idx = len(self.k_ts)
                self.k_ts.append(_num(ev.ts))
                self.k_dur.append(_num(ev.dur))
                self.k_corr.append(corr if isinstance(corr, int) else -1)
                if cat in memory:
                    self.k_type.append(MEMORY)
                elif "Collective name" in args or kind_from_kernel(ev.name) or ev.name.lower().startswith(
                        ("nccl", "rccl", "hccl")):
                    self.k_type.append(COMM)
                    self.comm.append((idx, ev.name, args))
                else:
                    self.k_type.append(COMPUTE)
            elif cat in annotation:
                name = ev.name
                if name.startswith("ProfilerStep"):
                    m = _STEP.match(name)
                    if m:
                        self.steps.append((int(m.group(1)), _num(ev.ts), _num(ev.dur)))
                elif _CPU_COLLECTIVE.match(name):
                    self.cpu_comm.append((name, _num(ev.ts), _num(ev.dur), args_of(ev)))


def _group_size(args: dict[str, Any], header: dict[str, Any]) -> int | None:
    size = args.get("Group size")
    if isinstance(size, int) and size > 0:
        return size
    info = header.get("distributedInfo") or {}
    pg_name = args.get("Process Group Name")
    for pg in info.get("pg_config") or []:
        if pg_name is not None and str(pg.get("pg_name")) == str(pg_name) and pg.get("pg_size"):
            return int(pg["pg_size"])
    ws = info.get("world_size")
    return int(ws) if isinstance(ws, int) and ws > 0 else None


def _kernel_bytes(args: dict[str, Any]) -> float:
    size = dtype_bytes(args.get("dtype"))
    nel = [v for v in (args.get("In msg nelems"), args.get("Out msg nelems")) if isinstance(v, int | float)]
    if size is None or not nel:
        return math.nan
    return float(max(nel)) * size


def _input_bytes(args: dict[str, Any]) -> float:
    """Bytes of the tensors of a CPU collective annotation from its 'Input Dims' and 'Input type'."""
    total, known = 0.0, False
    for dims, dtype in zip(args.get("Input Dims") or [], args.get("Input type") or [], strict=False):
        size = dtype_bytes(dtype)
        if size is None or not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
            continue
        total += float(np.prod(dims)) * size
        known = True
    return total if known else math.nan


class _StepIndex:
    """Maps a time (µs) to the ProfilerStep it falls in (or follows, before the next one starts)."""

    def __init__(self, steps: list[tuple[int, float, float]]):
        steps = sorted(steps, key=lambda s: s[1])
        self.numbers = np.array([s[0] for s in steps], dtype=np.int64)
        self.starts = np.array([s[1] for s in steps])
        self.ends = self.starts + np.array([s[2] for s in steps])

    def of(self, t: np.ndarray) -> np.ndarray:
        """Step number per time; -1 before the first step or after the last one ends."""
        if not len(self.numbers):
            return np.zeros(len(t), dtype=np.int64)
        idx = np.searchsorted(self.starts, t, side="right") - 1
        out = np.where(idx >= 0, self.numbers[np.clip(idx, 0, None)], -1)
        after_last = (idx == len(self.numbers) - 1) & (t >= self.ends[-1])
        return np.where(after_last, -1, out)


def analyze_trace(path: Path) -> TraceSummary:
    """Stream one trace file and compute its per-step metrics and collectives."""
    stream = TraceStream(path)
    col = _Collector()
    for batch in stream:
        col.feed(batch)
    header = stream.header
    info = header.get("distributedInfo") or {}
    steps = sorted(set(col.steps), key=lambda s: s[1])
    index = _StepIndex(steps)

    k_ts = np.frombuffer(col.k_ts, dtype=np.float64) if len(col.k_ts) else np.zeros(0)
    k_dur = np.frombuffer(col.k_dur, dtype=np.float64) if len(col.k_dur) else np.zeros(0)
    k_type = np.frombuffer(col.k_type, dtype=np.int8) if len(col.k_type) else np.zeros(0, np.int8)
    launch = k_ts.copy()
    if len(col.rt_corr) and len(k_ts):
        rt_corr = np.frombuffer(col.rt_corr, dtype=np.int64)
        rt_ts = np.frombuffer(col.rt_ts, dtype=np.float64)
        order = np.argsort(rt_corr, kind="stable")
        rt_corr, rt_ts = rt_corr[order], rt_ts[order]
        k_corr = np.frombuffer(col.k_corr, dtype=np.int64)
        pos = np.clip(np.searchsorted(rt_corr, k_corr), 0, len(rt_corr) - 1)
        hit = (rt_corr[pos] == k_corr) & (k_corr >= 0)
        launch[hit] = rt_ts[pos[hit]]
    k_step = index.of(launch)

    collectives: list[Collective] = []
    for idx, name, args in col.comm:
        kind = normalize_kind(args["Collective name"]) if "Collective name" in args else (
            kind_from_kernel(name) or "unknown")
        collectives.append(_collective(kind, name, float(k_ts[idx]), float(k_dur[idx]), _kernel_bytes(args),
                                       _group_size(args, header), int(k_step[idx]),
                                       str(args.get("Process Group Description") or args.get("Process Group Name")
                                           or "")))
    cpu_intervals: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    if not col.comm and col.cpu_comm:
        starts = np.array([c[1] for c in col.cpu_comm])
        durs = np.array([c[2] for c in col.cpu_comm])
        c_step = index.of(starts)
        for (name, ts, dur, args), step in zip(col.cpu_comm, c_step, strict=True):
            collectives.append(_collective(normalize_kind(name), name, ts, dur, _input_bytes(args),
                                           _group_size(args, header), int(step), name.split(":", 1)[0]))
        cpu_intervals = (starts, starts + durs, c_step)

    per_step = _per_step(steps, k_ts, k_dur, k_type, k_step, collectives, cpu_intervals)
    device = (header.get("deviceProperties") or [{}])
    meta = {"device_kind": "cuda" if device and device != [{}] else "cpu",
            "backend": info.get("backend"), "nccl_version": info.get("nccl_version"),
            "device_name": device[0].get("name") if device and isinstance(device[0], dict) else None,
            "process_groups": len(info.get("pg_config") or []) or None}
    rank = info.get("rank")
    world = info.get("world_size")
    return TraceSummary(path, rank if isinstance(rank, int) else None, world if isinstance(world, int) else None,
                        steps, per_step, collectives, {k: v for k, v in meta.items() if v is not None},
                        stream.bytes_read)


def _collective(kind: str, name: str, ts: float, dur: float, nbytes: float, group: int | None, step: int,
                pg: str) -> Collective:
    algbw = nbytes / (dur * 1e3) if dur > 0 and not math.isnan(nbytes) else math.nan
    factor = busbw_factor(kind, group) if group else None
    busbw = algbw * factor if factor is not None else math.nan
    return Collective(kind, name, ts, dur, nbytes, group, algbw, busbw, None if step < 0 else step, pg)


def _per_step(steps, k_ts, k_dur, k_type, k_step, collectives, cpu_intervals) -> dict[int, dict]:
    out: dict[int, dict[tuple[str, str], float]] = {}
    numbers = [s[0] for s in steps] or [0]
    k_end = k_ts + k_dur
    for number in numbers:
        row: dict[tuple[str, str], float] = {}
        dur = next((s[2] for s in steps if s[0] == number), None)
        if dur is not None:
            row[("step_time_ms", "")] = dur / 1e3
        sel = k_step == number
        if sel.any():
            comp, comm = sel & (k_type == COMPUTE), sel & (k_type == COMM)
            comp_len = _union_length(k_ts[comp], k_end[comp])
            comm_len = _union_length(k_ts[comm], k_end[comm])
            both = comp | comm
            overlap = comp_len + comm_len - _union_length(k_ts[both], k_end[both])
            busy = _union_length(k_ts[sel], k_end[sel])
            row[("compute_ms", "")] = comp_len / 1e3
            row[("comm_ms", "")] = comm_len / 1e3
            row[("comm_not_overlapped_ms", "")] = (comm_len - overlap) / 1e3
            if dur is not None:
                row[("free_ms", "")] = max(0.0, dur - busy) / 1e3
        elif cpu_intervals is not None:
            starts, ends, c_step = cpu_intervals
            mine = c_step == number
            row[("comm_ms", "")] = _union_length(starts[mine], ends[mine]) / 1e3
        mine = [c for c in collectives if c.step == number]
        for kind in sorted({c.kind for c in mine}):
            group = [c for c in mine if c.kind == kind]
            t = sum(c.dur for c in group)
            row[("collective_ms", kind)] = t / 1e3
            row[("collective_count", kind)] = float(len(group))
            known = [c for c in group if not math.isnan(c.bytes)]
            if known:
                tk = sum(c.dur for c in known)
                row[("collective_bytes", kind)] = sum(c.bytes for c in known)
                if tk > 0:
                    row[("algbw_gbps", kind)] = sum(c.bytes for c in known) / (tk * 1e3)
                    bus = [c for c in known if not math.isnan(c.busbw_gbps)]
                    if bus:
                        row[("busbw_gbps", kind)] = sum(c.busbw_gbps * c.dur for c in bus) / sum(c.dur for c in bus)
        if row:
            out[number] = row
    return out


def read_collectives(path: str | Path) -> list[Collective]:
    """Every collective of one trace file, with bytes and bandwidths."""
    return analyze_trace(Path(path)).collectives


# -- importer interface --------------------------------------------------------------------------------------
def _is_trace_file(path: Path) -> bool:
    name = path.name.lower()
    if not (name.endswith(".json") or name.endswith(".json.gz")):
        return False
    head = head_text(path, 65536)
    stripped = head.lstrip()
    return '"traceEvents"' in head or (stripped.startswith("[") and '"ph"' in head)


def trace_files(path: Path) -> list[Path]:
    """The trace files at ``path`` (the file itself, or the traces in a directory and its subdirectories)."""
    if path.is_file():
        return [path] if _is_trace_file(path) else []
    found = sorted(p for p in path.glob("*") if p.is_file() and _is_trace_file(p))
    if not found:
        found = sorted(p for p in path.glob("*/*") if p.is_file() and _is_trace_file(p))
    return found


def detect(path: Path) -> bool:
    return bool(trace_files(path))


def load(path: Path, sink: RunSink) -> None:
    files = trace_files(path)
    if not files:
        raise ImportFormatError(path, "no Chrome trace (.json / .json.gz with traceEvents) found")
    summaries = [analyze_trace(f) for f in files]
    taken: dict[int, Path] = {}
    for i, s in enumerate(summaries):
        rank = s.rank
        if rank is None or len(files) > 1 and rank in taken:
            m = _RANK_IN_NAME.search(s.path.name)
            rank = int(m.group(1)) if m else i
        if rank in taken:
            raise ImportFormatError(s.path, f"rank {rank} already imported from {taken[rank].name}",
                                    field="distributedInfo.rank")
        taken[rank] = s.path
        sink.source(s.path)
        for step, row in s.per_step.items():
            for (metric, entity), value in row.items():
                sink.add(rank, step, metric, value, entity)
    worlds = [s.world_size for s in summaries if s.world_size]
    sink.meta.update({"framework": "pytorch", "world_size": max(worlds) if worlds else len(summaries),
                      "ranks_imported": sorted(taken),
                      "environment": {k: v for s in summaries for k, v in s.meta.items()},
                      "source": {"bytes": sum(s.bytes_read for s in summaries)}})
