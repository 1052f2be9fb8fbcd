"""nvidia-smi CSV logs: ``nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,... --format=csv -l 1``.

Header names carry units (``memory.used [MiB]``); values carry them too unless ``nounits``. One device per
``index`` (entity ``device:gpu<index>``), step = the sample number of that device, plus ``sample_time_s`` from
``timestamp``. ``[N/A]`` / ``[Not Supported]`` cells are skipped; repeated header lines (concatenated logs) are
skipped. Throttling = any of SW power cap, HW slowdown, SW/HW thermal slowdown, HW power brake in
``clocks_throttle_reasons.active`` / ``clocks_event_reasons.active`` (NVML bitmask).
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
}
_THROTTLE_FIELDS = ("clocks_throttle_reasons.active", "clocks_event_reasons.active")
_THROTTLE_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # SwPowerCap, HwSlowdown, SwThermal, HwThermal, HwPowerBrake
_UNSUPPORTED = re.compile(r"^\[(n/a|not supported|unknown error|gpu is lost)\]$", re.IGNORECASE)


def _key(header: str) -> str:
    return header.split("[", 1)[0].strip().lower()


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
        if not mapped and i_throttle is None:
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
    sink.meta.update({"environment": {"device_kind": "cuda"}})
