"""Ascend PyTorch profiler output (torch_npu) and msprof-analyze cluster files → telemetry.

Per rank (``*_ascend_pt/ASCEND_PROFILER_OUTPUT/``; rank from ``profiler_info_<r>.json``):

- ``step_trace_time.csv`` (µs) → step_time_ms, compute_ms, comm_ms, comm_not_overlapped_ms, free_ms, bubble_ms,
  preparing_ms;
- ``communication.json`` (ms, MB = 10^6 bytes) → per collective kind: collective_ms (elapse), collective_wait_ms,
  collective_transit_ms, collective_count, collective_bytes; per transport (HCCS, RDMA, PCIE, SIO):
  transport_bytes, transport_bw_gbps;
- ``communication_matrix.json`` → per link (``link:<src>-<dst>``, local copies skipped): link_bytes, link_ms,
  link_bw_gbps, from the ``<op>-total@<group>`` entries;
- ``kernel_details.csv`` → kernel_ms and kernel_count per operator type (``op:<Type>``; '' = all non-HCCL
  kernels) and the duration-weighted cube_util_pct;
- ``npu_module_mem.csv`` → module_mem_bytes per ``device:<dev>/<component>`` and mem_used_bytes per device, the
  maximum over the samples that fall in each step's kernel time window.

Cluster analysis output (``cluster_step_trace_time.csv``, ``cluster_communication.json``) gives the same step and
collective metrics for every rank; it is read when the directory holds no per-rank profiler folders.
Column names drift across versions (``Device_id`` present or not, ``Step`` empty without a schedule) and
timestamps carry a trailing tab; both are handled.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.capture.importers import devices
from debugtune.engine.capture.importers.collectives import kind_from_hcom
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import CsvTable, clean, open_text, to_float

OUTPUT = "ASCEND_PROFILER_OUTPUT"
CLUSTER_FILES = ("cluster_step_trace_time.csv", "cluster_communication.json")
RANK_FILES = ("step_trace_time.csv", "communication.json", "communication_matrix.json", "kernel_details.csv",
              "npu_module_mem.csv")
MB = 1e6
_STEP_KEY = re.compile(r"^step\s*(\d*)$", re.IGNORECASE)
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_INFO = re.compile(r"^profiler_info(?:_(\d+))?\.json$")

# step_trace_time column → (metric, required)
_STEP_COLUMNS = {
    "Computing": ("compute_ms", True),
    "Communication(Not Overlapped)": ("comm_not_overlapped_ms", True),
    "Communication": ("comm_ms", False),
    "Overlapped": ("comm_overlapped_ms", False),
    "Free": ("free_ms", True),
    "Bubble": ("bubble_ms", False),
    "Preparing": ("preparing_ms", False),
}
_TRANSPORTS = ("HCCS", "PCIE", "SIO", "RDMA")
Acc = dict[tuple[int, int, str, str], float]  # (rank, step, metric, entity) → value


# -- locating the files -----------------------------------------------------------------------------------------
def rank_dirs(path: Path) -> list[Path]:
    """Profiler folders (those holding ASCEND_PROFILER_OUTPUT) at or below ``path`` (two levels)."""
    if path.is_file():
        return []
    if path.name == OUTPUT:
        return [path.parent]
    if (path / OUTPUT).is_dir():
        return [path]
    found = sorted(p.parent for p in path.glob(f"*/{OUTPUT}") if p.is_dir())
    return found or sorted(p.parent for p in path.glob(f"*/*/{OUTPUT}") if p.is_dir())


def cluster_dir(path: Path) -> Path | None:
    """The folder holding cluster analysis files (``path`` or its cluster_analysis_output/), if any."""
    for d in (path, path / "cluster_analysis_output"):
        if d.is_dir() and any((d / f).is_file() for f in CLUSTER_FILES):
            return d
    return None


def detect(path: Path) -> bool:
    if path.is_file():
        return path.name in RANK_FILES + CLUSTER_FILES and path.parent.name in (OUTPUT, "cluster_analysis_output") \
            or path.name in CLUSTER_FILES
    return bool(rank_dirs(path)) or cluster_dir(path) is not None


# -- small parsers ------------------------------------------------------------------------------------------------
def _read_json(path: Path) -> Any:
    try:
        with open_text(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as err:
        raise ImportFormatError(path, f"malformed JSON: {err.msg}", line=err.lineno) from None
    except (OSError, EOFError) as err:
        raise ImportFormatError(path, f"cannot read: {err}") from None


def _step_of_key(key: str, path: Path) -> int:
    m = _STEP_KEY.match(key.strip())
    if not m:
        raise ImportFormatError(path, f"expected a step key like 'step12', found {key!r}", field=key)
    return int(m.group(1)) if m.group(1) else 0


def _step_of_cell(cell: str, path: Path, line: int) -> int:
    text = clean(cell)
    if not text:
        return 0
    try:
        return int(float(text))
    except ValueError:
        raise ImportFormatError(path, f"step is not a number: {text!r}", line=line, field="Step") from None


def _obj(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ImportFormatError(path, f"expected a JSON object, found {type(value).__name__}", field=where)
    return value


def _flush(acc: Acc, sink: RunSink) -> None:
    for (rank, step, metric, entity), value in sorted(acc.items()):
        sink.add(rank, step, metric, value, entity)


# -- step_trace_time.csv / cluster_step_trace_time.csv ------------------------------------------------------------
def read_step_trace(path: Path, rank: int | None, acc: Acc) -> list[int]:
    """Step breakdown rows (µs → ms). ``rank=None``: the cluster file, whose rows name their rank."""
    steps = []
    with CsvTable(path) as table:
        i_step = table.column("Step", "Step Id", required=False)
        cols = {metric: table.column(name, required=required) for name, (metric, required) in _STEP_COLUMNS.items()}
        i_stage = table.column("Stage", required=False)
        i_type = table.column("Type", required=rank is None)
        i_index = table.column("Index", required=rank is None)
        for line, row in table.rows():
            if rank is None:
                assert i_type is not None and i_index is not None  # required for the cluster file
                if clean(row[i_type]).lower() != "rank":
                    continue  # 'stage' rows are maxima over a pipeline group
                r = int(to_float(row[i_index], path, line, "Index"))
            else:
                r = rank
            step = _step_of_cell(row[i_step], path, line) if i_step is not None else 0
            values = {m: to_float(row[i], path, line, table.header[i], required=req)
                      for (m, i), (_, req) in zip(cols.items(), _STEP_COLUMNS.values(), strict=True) if i is not None}
            for metric, value in values.items():
                acc[(r, step, metric, "")] = value / 1e3
            bubble = values.get("bubble_ms", 0.0)
            bubble = 0.0 if math.isnan(bubble) else bubble
            if i_stage is not None:
                total = to_float(row[i_stage], path, line, "Stage") + bubble
            else:
                total = values["compute_ms"] + values["comm_not_overlapped_ms"] + values["free_ms"]
            acc[(r, step, "step_time_ms", "")] = total / 1e3
            steps.append(step)
    return steps


# -- communication.json / cluster_communication.json ---------------------------------------------------------------
def _op_bytes(info: dict[str, Any], path: Path, where: str) -> float:
    bw = info.get("Communication Bandwidth Info") or {}
    if not isinstance(bw, dict):
        raise ImportFormatError(path, "expected an object", field=f"{where}.Communication Bandwidth Info")

    def size(transport: str) -> float:
        block = bw.get(transport) or {}
        return float(block.get("Transit Size(MB)") or 0.0) if isinstance(block, dict) else 0.0

    # SDMA aggregates the on-node transports (HCCS, PCIe, SIO); RDMA is the inter-node one.
    on_node = size("SDMA") if "SDMA" in bw else size("HCCS") + size("PCIE") + size("SIO")
    return (on_node + size("RDMA")) * MB


def _add_op(acc: Acc, rank: int, step: int, op_name: str, info: dict[str, Any], path: Path, where: str) -> None:
    times = info.get("Communication Time Info")
    if not isinstance(times, dict) or "Elapse Time(ms)" not in times:
        raise ImportFormatError(path, "missing 'Communication Time Info' / 'Elapse Time(ms)'", field=where)
    kind = kind_from_hcom(op_name)
    for metric, key in (("collective_ms", "Elapse Time(ms)"), ("collective_wait_ms", "Wait Time(ms)"),
                        ("collective_transit_ms", "Transit Time(ms)")):
        value = times.get(key)
        if value is None:
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ImportFormatError(path, f"not a number: {value!r}", field=f"{where}.{key}") from None
        acc[(rank, step, metric, kind)] = acc.get((rank, step, metric, kind), 0.0) + value
    acc[(rank, step, "collective_count", kind)] = acc.get((rank, step, "collective_count", kind), 0.0) + 1
    acc[(rank, step, "collective_bytes", kind)] = acc.get((rank, step, "collective_bytes", kind), 0.0) + _op_bytes(
        info, path, where)


#: (rank, step, transport) → [MB transferred, ms]
TransportSizes = dict[tuple[int, int, str], list[float]]


def _add_transports(acc: Acc, rank: int, step: int, total: dict[str, Any], sizes: TransportSizes) -> None:
    bw = total.get("Communication Bandwidth Info") or {}
    for transport in _TRANSPORTS:
        block = bw.get(transport)
        if isinstance(block, dict):
            s = sizes.setdefault((rank, step, transport), [0.0, 0.0])
            s[0] += float(block.get("Transit Size(MB)") or 0.0)
            s[1] += float(block.get("Transit Time(ms)") or 0.0)


def _emit_transports(acc: Acc, sizes: TransportSizes) -> None:
    for (rank, step, transport), (size_mb, time_ms) in sizes.items():
        if size_mb <= 0 or time_ms <= 0:
            continue
        entity = f"transport:{transport}"
        acc[(rank, step, "transport_bytes", entity)] = size_mb * MB
        acc[(rank, step, "transport_bw_gbps", entity)] = size_mb / time_ms  # MB/ms = GB/s


def read_communication(path: Path, rank: int, acc: Acc) -> None:
    data = _obj(_read_json(path), path, "$")
    sizes: TransportSizes = {}
    for step_key, sections in data.items():
        step = _step_of_key(step_key, path)
        sections = _obj(sections, path, step_key)
        for section in ("collective", "p2p"):
            ops = _obj(sections.get(section) or {}, path, f"{step_key}.{section}")
            for op_name, info in ops.items():
                where = f"{step_key}.{section}.{op_name}"
                info = _obj(info, path, where)
                if op_name == "Total Op Info":
                    _add_transports(acc, rank, step, info, sizes)
                else:
                    _add_op(acc, rank, step, op_name, info, path, where)
    _emit_transports(acc, sizes)


def _used_transports(info: dict[str, Any]) -> set[str]:
    """The transports an op moved bytes over (its 'Communication Bandwidth Info' with a transit size)."""
    bw = info.get("Communication Bandwidth Info") or {}
    return {t for t in _TRANSPORTS if isinstance(bw, dict) and isinstance(bw.get(t), dict)
            and float(bw[t].get("Transit Size(MB)") or 0.0) > 0}


def traced_link(acc: Acc, used: set[str]) -> str | None:
    """The slowest link the collectives crossed, as the profiler saw it: RDMA (RoCE between nodes) when any
    bytes went over it, else HCCS (inside the node)."""
    used = used | {e.split(":", 1)[1] for (_, _, m, e), v in acc.items() if m == "transport_bytes" and v > 0}
    if "RDMA" in used:
        return "roce"
    return "hccs" if used & {"HCCS", "SIO", "PCIE"} else None


def read_cluster_communication(path: Path, acc: Acc, used: set[str] | None = None) -> set[int]:
    data = _obj(_read_json(path), path, "$")
    ranks: set[int] = set()
    for group, steps in data.items():
        for step_key, ops in _obj(steps, path, group).items():
            step = _step_of_key(step_key, path)
            for op_name, per_rank in _obj(ops, path, f"{group}.{step_key}").items():
                for rank_key, info in _obj(per_rank, path, f"{group}.{step_key}.{op_name}").items():
                    where = f"{group}.{step_key}.{op_name}.{rank_key}"
                    try:
                        rank = int(rank_key)
                    except ValueError:
                        raise ImportFormatError(path, f"rank key is not a number: {rank_key!r}", field=where) from None
                    ranks.add(rank)
                    _add_op(acc, rank, step, op_name, _obj(info, path, where), path, where)
                    if used is not None:
                        used |= _used_transports(info)
    return ranks


# -- communication_matrix.json ------------------------------------------------------------------------------------
def read_matrix(path: Path, rank: int, acc: Acc) -> None:
    data = _obj(_read_json(path), path, "$")
    links: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for step_key, sections in data.items():
        step = _step_of_key(step_key, path)
        for section, ops in _obj(sections, path, step_key).items():
            for op_key, pairs in _obj(ops, path, f"{step_key}.{section}").items():
                if "-total@" not in op_key and not op_key.split("@", 1)[0].endswith("total"):
                    continue  # top1/middle/bottom entries are sampled instances of the same traffic
                for pair, info in _obj(pairs, path, f"{step_key}.{section}.{op_key}").items():
                    info = _obj(info, path, f"{step_key}.{section}.{op_key}.{pair}")
                    src, _, dst = pair.partition("-")
                    if info.get("Transport Type") == "LOCAL" or src == dst:
                        continue
                    link = links[(step, f"link:{src}-{dst}")]
                    link[0] += float(info.get("Transit Size(MB)") or 0.0)
                    link[1] += float(info.get("Transit Time(ms)") or 0.0)
    for (step, entity), (size_mb, time_ms) in links.items():
        acc[(rank, step, "link_bytes", entity)] = size_mb * MB
        acc[(rank, step, "link_ms", entity)] = time_ms
        if time_ms > 0:
            acc[(rank, step, "link_bw_gbps", entity)] = size_mb / time_ms


# -- kernel_details.csv / npu_module_mem.csv ----------------------------------------------------------------------
def read_kernels(path: Path, rank: int, acc: Acc, default_step: int) -> dict[int, tuple[float, float]]:
    """Kernel time per operator type and step; returns each step's time window (µs)."""
    per: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    cube: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    windows: dict[int, list[float]] = {}
    with CsvTable(path) as table:
        i_step = table.column("Step Id", "Step", required=False)
        i_type = table.column("Type", "OP Type")
        i_core = table.column("Accelerator Core", "Task Type", required=False)
        i_start = table.column("Start Time(us)", "Task Start Time(us)")
        i_dur = table.column("Duration(us)", "Task Duration(us)")
        i_cube = table.column("cube_utilization(%)", required=False)
        for line, row in table.rows():
            step = _step_of_cell(row[i_step], path, line) if i_step is not None else default_step
            start = to_float(row[i_start], path, line, table.header[i_start])
            dur = to_float(row[i_dur], path, line, table.header[i_dur])
            w = windows.setdefault(step, [start, start + dur])
            w[0], w[1] = min(w[0], start), max(w[1], start + dur)
            core = clean(row[i_core]).upper() if i_core is not None else ""
            op_type = clean(row[i_type])
            if core == "HCCL" or op_type.lower().startswith("hcom"):
                continue
            for entity in ("", f"op:{op_type}"):
                per[(step, entity)][0] += dur
                per[(step, entity)][1] += 1
            if i_cube is not None and core in ("AI_CORE", "MIX_AIC"):
                util = to_float(row[i_cube], path, line, "cube_utilization(%)", required=False)
                if not math.isnan(util):
                    cube[step][0] += util * dur
                    cube[step][1] += dur
    for (step, entity), (total_us, count) in per.items():
        acc[(rank, step, "kernel_ms", entity)] = total_us / 1e3
        acc[(rank, step, "kernel_count", entity)] = count
    for step, (weighted, dur) in cube.items():
        if dur > 0:
            acc[(rank, step, "cube_util_pct", "")] = weighted / dur
    return {s: (w[0], w[1]) for s, w in windows.items()}


def read_module_memory(path: Path, rank: int, acc: Acc, windows: dict[int, tuple[float, float]],
                       default_step: int) -> None:
    samples: list[tuple[float, str, str, float]] = []
    with CsvTable(path) as table:
        i_comp = table.column("Component")
        i_ts = table.column("Timestamp(us)")
        i_mem = table.column("Total Reserved(MB)", "Total Reserved(KB)")
        scale = 1e3 if table.header[i_mem].endswith("(KB)") else MB
        i_dev = table.column("Device", "Device_id", "Device Type", required=False)
        for line, row in table.rows():
            samples.append((to_float(row[i_ts], path, line, "Timestamp(us)"),
                            clean(row[i_dev]) if i_dev is not None else "npu",
                            clean(row[i_comp]), to_float(row[i_mem], path, line, table.header[i_mem]) * scale))
    if not samples:
        return
    steps = sorted(windows, key=lambda s: windows[s][0])
    starts = np.array([windows[s][0] for s in steps])

    def step_of(ts: float) -> int:
        if not steps:
            return default_step
        return steps[max(0, int(np.searchsorted(starts, ts, side="right")) - 1)]

    per_component: dict[tuple[int, str], float] = {}
    per_time: dict[tuple[int, str, float], float] = defaultdict(float)
    for ts, dev, comp, value in samples:
        step = step_of(ts)
        key = (step, f"device:{dev}/{comp}")
        per_component[key] = max(per_component.get(key, 0.0), value)
        per_time[(step, dev, ts)] += value
    for (step, entity), value in per_component.items():
        if value > 0:
            acc[(rank, step, "module_mem_bytes", entity)] = value
    for (step, dev, _), value in per_time.items():
        used = (rank, step, "mem_used_bytes", f"device:{dev}")
        acc[used] = max(acc.get(used, 0.0), value)


# -- ranks and metadata ---------------------------------------------------------------------------------------------
def rank_of(folder: Path, index: int) -> tuple[int, dict[str, Any]]:
    """The rank of a profiler folder (profiler_info_<r>.json 'rank_id', its file name, the folder name, else
    ``index``) and its config facts."""
    facts: dict[str, Any] = {}
    for info_file in sorted(folder.glob("profiler_info*.json")):
        m = _INFO.match(info_file.name)
        if not m:
            continue
        info = _obj(_read_json(info_file), info_file, "$")
        level = (info.get("config") or {}).get("experimental_config", {}).get("_profiler_level")
        if level:
            facts["profiler_level"] = level
        rid = info.get("rank_id")
        if isinstance(rid, int) and rid >= 0:
            return rid, facts
        if m.group(1):
            return int(m.group(1)), facts
    m = _RANK_IN_NAME.search(folder.name)
    return (int(m.group(1)) if m else index), facts


def _parallel(folder: Path) -> dict[str, int]:
    meta_file = folder / "profiler_metadata.json"
    if not meta_file.is_file():
        return {}
    meta = _read_json(meta_file)
    args = meta.get("distributed_args") if isinstance(meta, dict) else None
    if not isinstance(args, dict):
        return {}
    return {k: int(args[k]) for k in ("tp", "pp", "dp", "ep", "cp") if isinstance(args.get(k), int)}


def _load_rank(folder: Path, rank: int, sink: RunSink, acc: Acc) -> None:
    out = folder / OUTPUT
    present = [out / f for f in RANK_FILES if (out / f).is_file()]
    if not present:
        raise ImportFormatError(out, f"none of {', '.join(RANK_FILES)} found")
    for f in present:
        sink.source(f)
    steps = read_step_trace(out / "step_trace_time.csv", rank, acc) if (out / "step_trace_time.csv").is_file() else []
    default_step = steps[0] if len(set(steps)) == 1 else 0
    if (out / "communication.json").is_file():
        read_communication(out / "communication.json", rank, acc)
    if (out / "communication_matrix.json").is_file():
        read_matrix(out / "communication_matrix.json", rank, acc)
    windows = {}
    if (out / "kernel_details.csv").is_file():
        windows = read_kernels(out / "kernel_details.csv", rank, acc, default_step)
    if (out / "npu_module_mem.csv").is_file():
        read_module_memory(out / "npu_module_mem.csv", rank, acc, windows, default_step)


def load(path: Path, sink: RunSink) -> None:
    acc: Acc = {}
    folders = rank_dirs(path)
    if path.is_file():
        folders = [path.parent.parent] if path.parent.name == OUTPUT else []
    facts: dict[str, Any] = {}
    parallel: dict[str, int] = {}
    used: set[str] = set()
    if folders:
        taken: dict[int, Path] = {}
        for i, folder in enumerate(folders):
            rank, f = rank_of(folder, i)
            if rank in taken:
                raise ImportFormatError(folder, f"rank {rank} also in {taken[rank].name}", field="rank_id")
            taken[rank] = folder
            facts.update(f)
            parallel = parallel or _parallel(folder)
            _load_rank(folder, rank, sink, acc)
        world = len(taken)
    else:
        cdir = cluster_dir(path) if path.is_dir() else path.parent
        if cdir is None:
            raise ImportFormatError(path, "no Ascend profiler folders or cluster analysis files found")
        ranks: set[int] = set()
        step_file, comm_file = cdir / CLUSTER_FILES[0], cdir / CLUSTER_FILES[1]
        if step_file.is_file():
            sink.source(step_file)
            read_step_trace(step_file, None, acc)
            ranks |= {k[0] for k in acc}
        if comm_file.is_file():
            sink.source(comm_file)
            ranks |= read_cluster_communication(comm_file, acc, used)
        world = len(ranks)
    _flush(acc, sink)
    sink.meta.update({"framework": "pytorch+torch_npu", "world_size": world, "parallel": parallel,
                      "from_run_start": False,  # the profiler's schedule records a window of the run
                      "environment": {"device_kind": "npu", **facts},
                      **devices.resolve(None, world, None, traced_link=traced_link(acc, used))})
