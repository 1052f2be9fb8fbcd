"""npu-smi logs: repeated ``npu-smi info`` tables (e.g. a ``while true; do npu-smi info; sleep 1; done`` log) or
``npu-smi info watch`` output.

``npu-smi info``: two lines per chip, after the ``| NPU  Name | Health | Power(W) Temp(C) ...`` header:
``| 0     910B3 | OK | 101.8   43   0 / 0 |`` then ``| 0 | 0000:C1:00.0 | 0   0 / 0   3318 / 65536 |`` →
power_w, temp_c, util_pct (AICore %), mem_used_bytes / mem_total_bytes (HBM, MB taken as MiB); the process table
that follows is skipped. Each table is one sample (step = sample number).
``npu-smi info watch``: whitespace columns ``NpuID(Idx) ChipId(Idx) Pwr(W) Temp(C) AI Core(%) ... Memory(%)
Memory BW(%)`` → power_w, temp_c, util_pct, mem_used_pct, mem_util_pct. Entity ``device:npu<id>`` (``.<chip>``
for chips other than 0).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import head_text, open_text, to_float

_MIB = float(1 << 20)
_INFO_HEADER = re.compile(r"^\|\s*NPU\s+Name\s*\|")
_PROC_HEADER = re.compile(r"Process\s+id", re.IGNORECASE)
_ROW = re.compile(r"^\|(.*)\|(.*)\|(.*)\|\s*$")
_WATCH_HEADER = re.compile(r"^\s*NpuID\(Idx\)\s+ChipId\(Idx\)")
_WATCH_COLUMNS = {"pwr(w)": "power_w", "temp(c)": "temp_c", "ai core(%)": "util_pct", "memory(%)": "mem_used_pct",
                  "memory bw(%)": "mem_util_pct"}


def detect(path: Path) -> bool:
    if not path.is_file():
        return False
    head = head_text(path, 1 << 14)
    return any(_INFO_HEADER.match(line) or _WATCH_HEADER.match(line) for line in head.splitlines())


def _device(npu: str, chip: str) -> str:
    return f"device:npu{npu}" if chip in ("0", "") else f"device:npu{npu}.{chip}"


def _pair(text: str, path: Path, line: int, field: str) -> tuple[float, float]:
    used, _, total = text.partition("/")
    return to_float(used, path, line, field), to_float(total, path, line, field)


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    samples: dict[str, int] = defaultdict(int)
    state, first_line = "idle", None
    watch_cols: list[str] = []  # the columns of the last watch header (state "watch" follows one)
    with open_text(path) as fh:
        for line_no, line in enumerate(fh, 1):
            text = line.rstrip("\n")
            if _INFO_HEADER.match(text):
                state, first_line = "header", None
                continue
            if _WATCH_HEADER.match(text):
                watch_cols = [c.strip().lower() for c in re.findall(r"[A-Za-z][A-Za-z ]*\([^)]*\)", text)]
                state = "watch"
                continue
            if state == "watch":
                cells = text.split()
                if not cells:
                    continue
                if len(cells) != len(watch_cols):
                    raise ImportFormatError(path, f"{len(cells)} columns, header has {len(watch_cols)}", line=line_no)
                device = _device(cells[0], cells[1])
                step = samples[device]
                samples[device] += 1
                for col, cell in zip(watch_cols, cells, strict=True):
                    if col in _WATCH_COLUMNS:
                        sink.add(0, step, _WATCH_COLUMNS[col], to_float(cell, path, line_no, col), device)
                continue
            if state == "idle":
                continue
            if _PROC_HEADER.search(text):
                state = "idle"
                continue
            m = _ROW.match(text)
            if not m or text.startswith("+") or set(text.strip()) <= set("+-=|"):
                continue
            if state == "header":  # the second header line ("| Chip | Bus-Id | AICore(%) ...")
                state = "chips"
                continue
            left, _, right = (g.strip() for g in m.groups())
            if first_line is None:
                first_line = (line_no, left, right)
                continue
            (l1, left1, right1), first_line = first_line, None
            npu = left1.split()[0] if left1 else "0"
            chip = left.split()[0] if left else "0"
            device = _device(npu, chip)
            step = samples[device]
            samples[device] += 1
            power_temp = right1.split()
            if len(power_temp) < 2:
                raise ImportFormatError(path, "expected 'Power(W) Temp(C) ...'", line=l1, field="Power(W)")
            sink.add(0, step, "power_w", to_float(power_temp[0], path, l1, "Power(W)"), device)
            sink.add(0, step, "temp_c", to_float(power_temp[1], path, l1, "Temp(C)"), device)
            usage = re.match(r"^(\S+)\s+(\S+\s*/\s*\S+)\s+(\S+\s*/\s*\S+)$", right)
            if not usage:
                raise ImportFormatError(path, "expected 'AICore(%) Memory-Usage(MB) HBM-Usage(MB)'", line=line_no,
                                        field="HBM-Usage(MB)")
            sink.add(0, step, "util_pct", to_float(usage.group(1), path, line_no, "AICore(%)"), device)
            used, total = _pair(usage.group(3), path, line_no, "HBM-Usage(MB)")
            sink.add(0, step, "mem_used_bytes", used * _MIB, device)
            sink.add(0, step, "mem_total_bytes", total * _MIB, device)
    if first_line is not None:
        raise ImportFormatError(path, "truncated table: chip line without its second line", line=first_line[0])
    sink.meta.update({"environment": {"device_kind": "npu"}})
