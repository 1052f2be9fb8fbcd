"""nvidia-smi CSV logs: ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,... --format=csv -l 1``.

Header names carry units (``memory.used [MiB]``); values carry them too unless ``nounits``. One device per
``index`` (entity ``device:gpu<index>``), step = the sample number of that device, plus ``sample_time_s`` from
``timestamp``. ``[N/A]`` / ``[Not Supported]`` cells are skipped; repeated header lines (concatenated logs) are
skipped. Throttling (``throttle``) = any of SW power cap, HW slowdown, SW/HW thermal slowdown, HW power brake in
``clocks_throttle_reasons.active`` / ``clocks_event_reasons.active`` (NVML bitmask) or in the per-reason fields
(``clocks_event_reasons.sw_power_cap`` ... ``Active`` / ``Not Active``); ``throttle_power`` = the power ones
(SW power cap, HW power brake). ``power.limit`` / ``enforced.power.limit`` → ``power_limit_w``. Which query
fields each metric comes from, and which detector reads it: docs/import.md, "Hardware logs".
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import CsvTable, clean, head_text, to_float

_MIB = float(1 << 20)
# query field → (metric, scale from the field's unit)
_FIELDS = {
    "utilization.gpu": ("util_pct", 1.0), "utilization.memory": ("mem_util_pct", 1.0),
    "memory.used": ("mem_used_bytes", _MIB), "memory.total": ("mem_total_bytes", _MIB),
    "power.draw": ("power_w", 1.0), "power.draw.instant": ("power_w", 1.0), "temperature.gpu": ("temp_c", 1.0),
    "clocks.sm": ("clock_mhz", 1.0), "clocks.current.sm": ("clock_mhz", 1.0),
    "power.limit": ("power_limit_w", 1.0), "enforced.power.limit": ("power_limit_w", 1.0),
}
_THROTTLE_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")
_POWER_BITS = 0x4 | 0x80  # SwPowerCap, HwPowerBrakeSlowdown
_THROTTLE_BITS = _POWER_BITS | 0x8 | 0x20 | 0x40  # and HwSlowdown, SwThermalSlowdown, HwThermalSlowdown
# per-reason fields (either prefix) → whether the reason is a power one
_REASONS = {"sw_power_cap": True, "hw_power_brake_slowdown": True, "hw_slowdown": False,
            "sw_thermal_slowdown": False, "hw_thermal_slowdown": False}
_UNSUPPORTED = re.compile(r"^\[(n/a|not supported|unknown error|gpu is lost)\]$", re.IGNORECASE)


def _key(header: str) -> str:
    return header.split("[", 1)[0].strip().lower()


def _active(cell: str, path: Path, line: int, field: str) -> bool | None:
    """A per-reason cell: ``Active`` / ``Not Active`` (None when unsupported)."""
    if _UNSUPPORTED.match(cell):
        return None
    low = cell.strip().lower()
    if low not in ("active", "not active"):
        raise ImportFormatError(path, f"expected 'Active' or 'Not Active', got {cell!r}", line=line, field=field)
    return low == "active"


def detect(path: Path) -> bool:
    if not path.is_file():
        return False
    first = head_text(path, 2048).split("\n", 1)[0].lower()
    return ("utilization.gpu" in first or "memory.used" in first or "temperature.gpu" in first) and "," in first


def _time(text: str) -> float | None:
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(text, fmt).timestamp()
        except ValueError:
            continue
    return None


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    samples: dict[str, int] = defaultdict(int)
    t0: float | None = None
    with CsvTable(path) as table:
        keys = [_key(h) for h in table.header]
        i_index = keys.index("index") if "index" in keys else None
        i_time = keys.index("timestamp") if "timestamp" in keys else None
        mapped = [(i, *_FIELDS[k]) for i, k in enumerate(keys) if k in _FIELDS]
        i_throttle = next((i for i, k in enumerate(keys) if k in _THROTTLE_FIELDS), None)
        reasons = [(i, _REASONS[k.rsplit(".", 1)[1]]) for i, k in enumerate(keys)
                   if k.startswith(("clocks_throttle_reasons.", "clocks_event_reasons."))
                   and k.rsplit(".", 1)[1] in _REASONS] if i_throttle is None else []
        if not mapped and i_throttle is None and not reasons:
            raise ImportFormatError(path, "no known --query-gpu field (utilization.gpu, memory.used, ...)", line=1)
        for line, row in table.rows():
            if _key(row[0]) == keys[0]:
                continue  # a repeated header
            device = f"device:gpu{clean(row[i_index])}" if i_index is not None else "device:gpu0"
            step = samples[device]
            samples[device] += 1
            if i_time is not None and (t := _time(clean(row[i_time]))) is not None:
                t0 = t if t0 is None else t0
                sink.add(0, step, "sample_time_s", t - t0, device, dimension="hardware")
            for i, metric, scale in mapped:
                cell = clean(row[i])
                if _UNSUPPORTED.match(cell):
                    continue
                number = re.sub(r"\s*(%|MiB|W|MHz|C)$", "", cell)
                sink.add(0, step, metric, to_float(number, path, line, table.header[i]) * scale, device)
            if i_throttle is not None:
                cell = clean(row[i_throttle])
                if not _UNSUPPORTED.match(cell):
                    try:
                        mask = int(cell, 16)
                    except ValueError:
                        raise ImportFormatError(path, f"not a hex bitmask: {cell!r}", line=line,
                                                field=table.header[i_throttle]) from None
                    sink.add(0, step, "throttle", float(bool(mask & _THROTTLE_BITS)), device)
                    sink.add(0, step, "throttle_power", float(bool(mask & _POWER_BITS)), device)
            elif reasons:
                active = [(power, _active(clean(row[i]), path, line, table.header[i])) for i, power in reasons]
                known = [(power, on) for power, on in active if on is not None]
                if known:
                    sink.add(0, step, "throttle", float(any(on for _, on in known)), device)
                    if any(power for power, _ in known):
                        sink.add(0, step, "throttle_power", float(any(on for power, on in known if power)), device)
    sink.meta.update({"environment": {"device_kind": "cuda"}})
