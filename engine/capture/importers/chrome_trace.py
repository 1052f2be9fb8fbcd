"""PyTorch profiler (Kineto) Chrome traces → per-step telemetry of the device timeline and the collectives, streamed.

Per rank (one trace file per rank; a directory of traces is one multi-rank run) and per ``ProfilerStep#N``:

- where the device time went (``device_timeline``: the step's device window as ``step_time_ms``, compute,
  exposed and overlapped communication, memory copies, idle split into host wait / kernel wait / other, HTA's
  definitions); the CPU-side step (the annotation) is ``cpu_step_ms``. A kernel belongs to the step whose CPU
  side launched it (the runtime event with the same ``correlation``);
- per collective kind (allreduce, allgather, …; ``<kind>@pg:<name>`` when the run's collectives use several
  process groups, so ranks are only compared with the members of the same communicator): time, count, bytes,
  algorithm and bus bandwidth with the nccl-tests factors;
- from the training thread: ``dataloader_wait_ms`` (PyTorch's ``enumerate(DataLoader)`` annotation).

A trace with no ``ProfilerStep`` takes its steps from a repeated named marker (``step_markers``: PARAM's
``[param|…|forward]`` iterations); with device events and no marker (a benchmark rather than a training loop) it
is one step, 0. CUPTI range-profiler traces (``cupti_ranges``) give per step the kernel count and FLOPs of the
counters, their device timeline not measured. MTIA traces (``mtia_ccp_events`` on the device, ``mtia_runtime``
launches) read as device traces, ``dma_request`` as memory copies.

CPU-only traces (gloo) have no device: their collectives come from the ``gloo:<op>`` annotations with the bytes
from their input shapes, and the training thread's operator timeline gives ``compute_ms`` (top-level
operators), ``comm_not_overlapped_ms`` (blocked in collective calls), ``host_gap_ms`` (Python time between
operators) and the median operator duration and gap between operators.

run.json gets the device name and the interconnect (``devices.resolve``), the process groups of
``distributedInfo`` and the point-to-point peers (``process_groups``).
"""

from __future__ import annotations

import math
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from debugtune.engine.capture.importers import cupti_ranges, devices, worker_timeline
from debugtune.engine.capture.importers.collectives import (
    busbw_factor,
    dtype_bytes,
    kind_from_kernel,
    normalize_kind,
)
from debugtune.engine.capture.importers.device_timeline import COMM, COMPUTE, MEMORY, Coverage, step_breakdown
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.json_stream import Event, TraceStream, args_of
from debugtune.engine.capture.importers.process_groups import GroupBook, peer_of
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.step_markers import marker_steps
from debugtune.engine.capture.importers.trace_kinds import is_chrome_trace, is_worker_timeline

_KERNEL = frozenset({"kernel", "Kernel", "mtia_ccp_events"})
_MEMORY = frozenset({"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
_RUNTIME = frozenset({"cuda_runtime", "Runtime", "cuda_driver", "hip_runtime", "xpu_runtime", "mtia_runtime"})
_ANNOTATION = frozenset({"user_annotation", "cpu_op", "Operator"})
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_CPU_COLLECTIVE = re.compile(r"^(gloo|mpi|ucc):")
_COLLECTIVE_CALL = ("c10d::", "record_param_comms", "nccl:", "hccl:")
_DATALOADER = "enumerate(DataLoader)"
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
OP, CALL, LOADER = 0, 1, 2  # classes of training-thread events


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
    per_step: dict[int, dict[tuple[str, str], float]]  # step → {(metric, entity): value}, collectives apart
    collectives: list[Collective]
    meta: dict[str, Any] = field(default_factory=dict)
    bytes_read: int = 0
    groups: GroupBook = field(default_factory=GroupBook)
    devices_listed: int = 0
    device_name: str | None = None
    notes: list[str] = field(default_factory=list)


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


class _Collector:
    """Accumulates the few fields of the relevant events while the trace streams by."""

    def __init__(self) -> None:
        self.k_ts, self.k_dur, self.k_corr = array("d"), array("d"), array("q")
        self.k_type = array("b")
        self.comm: list[tuple[int, str, dict[str, Any]]] = []  # (kernel index, name, args)
        self.rt_corr, self.rt_ts = array("q"), array("d")
        self.steps: list[tuple[int, float, float, int]] = []
        self.cpu_comm: list[tuple[str, float, float, dict[str, Any]]] = []
        self.h_ts, self.h_dur, self.h_tid, self.h_cls = array("d"), array("d"), array("q"), array("b")
        self.peers: list[int] = []
        self._tids: dict[Any, int] = {}
        self.ranges: list[dict[str, Any]] = []  # CUPTI range-profiler counters, in launch order
        self.launch_ts = array("d")
        self.annotations: list[tuple[str, float, float, int]] = []  # candidate step markers

    def _tid(self, tid: Any) -> int:
        code = self._tids.get(tid)
        if code is None:
            code = self._tids[tid] = len(self._tids)
        return code

    def _host(self, ev: Event, cls: int) -> None:
        self.h_ts.append(_num(ev.ts))
        self.h_dur.append(_num(ev.dur))
        self.h_tid.append(self._tid(ev.tid))
        self.h_cls.append(cls)

    def feed(self, batch: list[Event]) -> None:
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
                if "LaunchKernel" in ev.name:
                    self.launch_ts.append(_num(ev.ts))
            elif cat == cupti_ranges.CATEGORY:
                self.ranges.append(args_of(ev))
            elif cat in kernel or cat in memory:
                args = args_of(ev)
                corr = args.get("correlation")
                idx = len(self.k_ts)
                self.k_ts.append(_num(ev.ts))
                self.k_dur.append(_num(ev.dur))
                self.k_corr.append(corr if isinstance(corr, int) else -1)
                if cat in memory or ev.name == "dma_request":
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
                        self.steps.append((int(m.group(1)), _num(ev.ts), _num(ev.dur), self._tid(ev.tid)))
                elif _CPU_COLLECTIVE.match(name):
                    self.cpu_comm.append((name, _num(ev.ts), _num(ev.dur), args_of(ev)))
                elif name.startswith(_DATALOADER):
                    self._host(ev, LOADER)
                elif cat == "user_annotation":
                    self.annotations.append((name, _num(ev.ts), _num(ev.dur), self._tid(ev.tid)))
                elif cat == "cpu_op" or cat == "Operator":
                    if name.startswith(_COLLECTIVE_CALL):
                        self._host(ev, CALL)
                        if name.startswith(("c10d::send", "c10d::recv")):
                            peer = peer_of(args_of(ev))
                            if peer is not None:
                                self.peers.append(peer)
                    else:
                        self._host(ev, OP)


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


def _arr(a: array[Any], dtype: npt.DTypeLike) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def analyze_trace(path: Path) -> TraceSummary:
    """Stream one trace file and compute its per-step metrics and collectives."""
    stream = TraceStream(path)
    col = _Collector()
    for batch in stream:
        col.feed(batch)
    header = stream.header
    info = header.get("distributedInfo") or {}
    rank = info.get("rank") if isinstance(info.get("rank"), int) else None
    by_number: dict[int, tuple[int, float, float, int]] = {}
    for s in col.steps:
        by_number.setdefault(s[0], s)
    steps4 = sorted(by_number.values(), key=lambda s: s[1])
    k_ts, k_dur = _arr(col.k_ts, np.float64), _arr(col.k_dur, np.float64)
    notes: list[str] = []
    if not steps4 and col.annotations:  # no ProfilerStep: a repeated named marker, where there is one
        steps4, marker = marker_steps(col.annotations)
        if steps4:
            notes.append(f"no ProfilerStep annotations: {len(steps4)} steps from the repeated annotation "
                         f"'{marker}'")
    launches = _arr(col.launch_ts, np.float64)
    if not steps4 and not len(k_ts) and col.ranges and len(launches):  # one step over the profiled launches
        steps4 = [(0, float(launches.min()), float(launches.max() - launches.min()) + 1e-3, -1)]
    if not steps4 and len(k_ts):  # no ProfilerStep (a benchmark, not a training loop): the trace is one step, 0
        first = min(float(k_ts.min()), float(_arr(col.rt_ts, np.float64).min()) if len(col.rt_ts) else np.inf)
        steps4 = [(0, first, float((k_ts + k_dur).max()) - first + 1e-3, -1)]
    steps = [(n, ts, dur) for n, ts, dur, _ in steps4]
    index = _StepIndex(steps)

    k_type = _arr(col.k_type, np.int8)
    launch = np.full(len(k_ts), np.nan)
    if len(col.rt_corr) and len(k_ts):
        rt_corr, rt_ts = _arr(col.rt_corr, np.int64), _arr(col.rt_ts, np.float64)
        order = np.argsort(rt_corr, kind="stable")
        rt_corr, rt_ts = rt_corr[order], rt_ts[order]
        k_corr = _arr(col.k_corr, np.int64)
        pos = np.clip(np.searchsorted(rt_corr, k_corr), 0, len(rt_corr) - 1)
        hit = (rt_corr[pos] == k_corr) & (k_corr >= 0)
        launch[hit] = rt_ts[pos[hit]]
    k_step = index.of(np.where(np.isfinite(launch), launch, k_ts))
    # as HTA, a device event whose launch the trace did not record belongs to no step of the device timeline
    # (Kineto drops runtime events it blocklists or that fall out of range; their kernels cannot be attributed)
    timeline_step = np.where(np.isfinite(launch), k_step, -1) if np.isfinite(launch).any() else k_step

    book = GroupBook()
    book.add_header(info)
    for peer in col.peers:
        book.add_peer(rank, peer)
    collectives: list[Collective] = []
    for idx, name, args in col.comm:
        kind = normalize_kind(args["Collective name"]) if "Collective name" in args else (
            kind_from_kernel(name) or "unknown")
        pg = args.get("Process Group Name")
        book.add_group(pg, args.get("Process Group Description"), args.get("Process Group Ranks"))
        collectives.append(_collective(kind, name, float(k_ts[idx]), float(k_dur[idx]), _kernel_bytes(args),
                                       _group_size(args, header), int(k_step[idx]), "" if pg is None else str(pg)))
    cpu_intervals: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    if not col.comm and col.cpu_comm:
        starts = np.array([c[1] for c in col.cpu_comm])
        durs = np.array([c[2] for c in col.cpu_comm])
        c_step = index.of(starts)
        for (name, ts, dur, args), step in zip(col.cpu_comm, c_step, strict=True):
            collectives.append(_collective(normalize_kind(name), name, ts, dur, _input_bytes(args),
                                           _group_size(args, header), int(step)))
        cpu_intervals = (starts, starts + durs, c_step)

    numbers = [s[0] for s in steps]
    device = step_breakdown(numbers, k_ts, k_dur, k_type, timeline_step, launch) if len(k_ts) else {}
    counters = cupti_ranges.range_rows(col.ranges, launches, index.of) if col.ranges else {}
    if col.ranges:
        notes.append(cupti_ranges.NOTE)
    host = _host_breakdown(steps4, col, cpu_only=not device and not col.ranges, comm=cpu_intervals)
    per_step: dict[int, dict[tuple[str, str], float]] = {}
    for number, _, dur in steps:
        row: dict[tuple[str, str], float] = {("cpu_step_ms", ""): dur / 1e3}
        row.update({(k, ""): v for k, v in host.get(number, {}).items()})
        if device.get(number):
            row.update({(k, ""): v for k, v in device[number].items()})
        else:
            row[("step_time_ms", "")] = dur / 1e3
            row.update(counters.get(number, {}))
            if cpu_intervals is not None:
                starts, ends, c_step = cpu_intervals
                mine = c_step == number
                row[("comm_ms", "")] = Coverage(starts[mine], ends[mine]).total / 1e3
        per_step[number] = row
    props = header.get("deviceProperties") or []
    props = [p for p in props if isinstance(p, dict)]
    device_name = props[0].get("name") if props else None
    kind = "cuda" if props or len(k_ts) or col.ranges else "cpu"
    if kind == "cpu":
        notes.append("CPU-only trace (no GPU kernels" + (", collectives from gloo annotations" if col.cpu_comm
                                                         else "") + "): device idle and overlap are not measured; "
                     "compute and communication are the training thread's operator and collective times")
    meta = {"device_kind": kind, "backend": info.get("backend"),
            "nccl_version": info.get("nccl_version"), "device_name": device_name,
            "process_groups": len(info.get("pg_config") or []) or None}
    world = info.get("world_size")
    return TraceSummary(path, rank, world if isinstance(world, int) else None, steps, per_step, collectives,
                        {k: v for k, v in meta.items() if v is not None}, stream.bytes_read, book, len(props),
                        str(device_name) if device_name else None, notes)


def _host_breakdown(steps: list[tuple[int, float, float, int]], col: _Collector, cpu_only: bool,
                    comm: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[int, dict[str, float]]:
    """Per step, from the training thread (the thread of the ProfilerStep annotations): the data-loader wait,
    and for a trace without device events the operator timeline (see the module docstring). Time the training
    thread spends while a collective of the communication threads (``comm``: starts, ends) is in flight is
    waiting, not host overhead: it is left out of ``host_gap_ms`` and of the gaps between operators."""
    if not steps or not len(col.h_ts):
        return {}
    ts, dur = _arr(col.h_ts, np.float64), _arr(col.h_dur, np.float64)
    tid, cls = _arr(col.h_tid, np.int64), _arr(col.h_cls, np.int8)
    main = np.isin(tid, list({s[3] for s in steps}))
    ts, dur, cls = ts[main], dur[main], cls[main]
    order = np.lexsort((-dur, ts))
    ts, dur, cls = ts[order], dur[order], cls[order]
    end = ts + dur
    top = np.ones(len(ts), dtype=bool)
    if len(ts) > 1:
        top[1:] = ts[1:] >= np.maximum.accumulate(end)[:-1]
    ts, dur, cls, end = ts[top], dur[top], cls[top], end[top]
    w0 = np.array([s[1] for s in steps])
    w1 = w0 + np.array([s[2] for s in steps])
    loader = Coverage(ts[cls == LOADER], end[cls == LOADER]).within(w0, w1)
    out: dict[int, dict[str, float]] = {}
    if cpu_only:
        ops, calls = cls == OP, cls == CALL
        compute = Coverage(ts[ops], end[ops]).within(w0, w1)
        blocked = Coverage(ts[calls], end[calls]).within(w0, w1)
        c0, c1 = (comm[0], comm[1]) if comm is not None else (np.zeros(0), np.zeros(0))
        busy = Coverage(np.concatenate([ts, c0]), np.concatenate([end, c1])).within(w0, w1)
        gaps = np.concatenate([ts[1:] - end[:-1], [np.nan]]) if len(ts) else np.zeros(0)
        if len(ts) > 1 and len(c0):  # a gap under a collective in flight is a wait
            waited = Coverage(c0, c1).within(end[:-1], ts[1:])
            gaps[:-1] = np.where(waited > 0, np.nan, gaps[:-1])
    for i, (number, _, length, _) in enumerate(steps):
        row: dict[str, float] = {}
        if loader[i] > 0:
            row["dataloader_wait_ms"] = loader[i] / 1e3
        if cpu_only:
            inside = (ts >= w0[i]) & (end <= w1[i])
            row.update({"compute_ms": compute[i] / 1e3, "comm_not_overlapped_ms": blocked[i] / 1e3,
                        "host_gap_ms": max(length - busy[i], 0.0) / 1e3})
            if (inside & ops).any():
                row["op_dur_median_us"] = float(np.median(dur[inside & ops]))
            g = gaps[inside]
            g = g[np.isfinite(g) & (g >= 0)]
            if g.size:
                row["op_gap_median_us"] = float(np.median(g))
        out[number] = row
    return out


def _collective(kind: str, name: str, ts: float, dur: float, nbytes: float, group: int | None, step: int,
                pg: str = "") -> Collective:
    algbw = nbytes / (dur * 1e3) if dur > 0 and not math.isnan(nbytes) else math.nan
    factor = busbw_factor(kind, group) if group else None
    busbw = algbw * factor if factor is not None else math.nan
    return Collective(kind, name, ts, dur, nbytes, group, algbw, busbw, None if step < 0 else step, pg)


def collective_rows(collectives: list[Collective], by_group: bool) -> dict[int, dict[tuple[str, str], float]]:
    """Per step and collective entity (kind, or ``kind@pg:<name>`` when ``by_group``): time, count, bytes,
    algorithm bandwidth and duration-weighted bus bandwidth."""
    out: dict[int, dict[tuple[str, str], float]] = {}
    grouped: dict[tuple[int, str], list[Collective]] = {}
    for c in collectives:
        if c.step is None:
            continue
        entity = f"{c.kind}@pg:{c.process_group}" if by_group and c.process_group else c.kind
        grouped.setdefault((c.step, entity), []).append(c)
    for (step, entity), group in sorted(grouped.items()):
        row = out.setdefault(step, {})
        row[("collective_ms", entity)] = sum(c.dur for c in group) / 1e3
        row[("collective_count", entity)] = float(len(group))
        known = [c for c in group if not math.isnan(c.bytes)]
        if not known:
            continue
        tk = sum(c.dur for c in known)
        row[("collective_bytes", entity)] = sum(c.bytes for c in known)
        if tk > 0:
            row[("algbw_gbps", entity)] = sum(c.bytes for c in known) / (tk * 1e3)
            bus = [c for c in known if not math.isnan(c.busbw_gbps)]
            if bus:
                row[("busbw_gbps", entity)] = sum(c.busbw_gbps * c.dur for c in bus) / sum(c.dur for c in bus)
    return out


def read_collectives(path: str | Path) -> list[Collective]:
    """Every collective of one trace file, with bytes and bandwidths."""
    return analyze_trace(Path(path)).collectives


# -- importer interface --------------------------------------------------------------------------------------
def trace_files(path: Path) -> list[Path]:
    """The trace files at ``path`` (the file itself, or the traces in a directory and its subdirectories)."""
    if path.is_file():
        return [path] if is_chrome_trace(path) else []
    found = sorted(p for p in path.glob("*") if p.is_file() and is_chrome_trace(p))
    if not found:
        found = sorted(p for p in path.glob("*/*") if p.is_file() and is_chrome_trace(p))
    return found


def detect(path: Path) -> bool:
    return bool(trace_files(path))


def load(path: Path, sink: RunSink) -> None:
    files = trace_files(path)
    if not files:
        raise ImportFormatError(path, "no Chrome trace (.json / .json.gz with traceEvents) found")
    if all(is_worker_timeline(f) for f in files):  # tracks are workers, not Kineto's: the importer for those
        worker_timeline.load(path, sink)
        return
    summaries = [analyze_trace(f) for f in files]
    taken: dict[int, Path] = {}
    book = GroupBook()
    pgs = {c.process_group for s in summaries for c in s.collectives if c.process_group}
    for i, s in enumerate(summaries):
        rank = s.rank
        if rank is None or len(files) > 1 and rank in taken:
            m = _RANK_IN_NAME.search(s.path.name)
            rank = int(m.group(1)) if m else i
        if rank in taken:
            raise ImportFormatError(s.path, f"rank {rank} already imported from {taken[rank].name}",
                                    field="distributedInfo.rank")
        taken[rank] = s.path
        book.merge(s.groups)
        sink.source(s.path)
        rows = collective_rows(s.collectives, by_group=len(pgs) > 1)
        for step in sorted(set(s.per_step) | set(rows)):
            for (metric, entity), value in {**s.per_step.get(step, {}), **rows.get(step, {})}.items():
                sink.add(rank, step, metric, value, entity)
    worlds = [s.world_size for s in summaries if s.world_size]
    world = max(worlds) if worlds else len(summaries)
    named = next((s for s in summaries if s.device_name), None)
    hardware = devices.resolve(named.device_name if named else None, world,
                               named.devices_listed if named else None)
    sink.meta.update({"framework": "pytorch", "world_size": world, "ranks_imported": sorted(taken),
                      "from_run_start": False,  # a profiler records a window of the run, after its first steps
                      "environment": {k: v for s in summaries for k, v in s.meta.items()},
                      "source": {"bytes": sum(s.bytes_read for s in summaries)}, **hardware, **book.meta(),
                      "notes": sorted({n for s in summaries for n in s.notes})})
