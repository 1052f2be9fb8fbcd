"""What a Chrome-trace JSON file is, from its first 64 KiB: a PyTorch profiler (Kineto) trace, or a timeline whose
tracks are workers (ByteDance's ``timeline-*.json.gz``, a Perfetto/Chrome export of a per-operation table), and
what an input no importer reads looks like — so the error can name the importer that would read it."""

from __future__ import annotations

import re
from pathlib import Path

from debugtune.engine.capture.importers.textio import head_text

HEAD = 65536
# Kineto writes its header (schemaVersion, deviceProperties, distributedInfo) first and tags every event with
# one of its categories; a worker timeline has neither
_KINETO = re.compile(r'"(schemaVersion|deviceProperties|distributedInfo|baseTimeNanoseconds)"|"cat"\s*:\s*"('
                     r'kernel|Kernel|cuda_runtime|cuda_driver|cpu_op|Operator|python_function|user_annotation|'
                     r'gpu_memcpy|gpu_memset|gpu_user_annotation|cuda_profiler_range|mtia_runtime|'
                     r'mtia_ccp_events|ac2g|Runtime|Trace)"')


def is_chrome_trace(path: Path) -> bool:
    """A .json / .json.gz holding a Chrome trace (an object with ``traceEvents`` or an array of events)."""
    name = path.name.lower()
    if not path.is_file() or not (name.endswith(".json") or name.endswith(".json.gz")):
        return False
    head = head_text(path, HEAD)
    return '"traceEvents"' in head or (head.lstrip().startswith("[") and '"ph"' in head)


def is_worker_timeline(path: Path) -> bool:
    """A Chrome trace with complete (``ph: X``) events and nothing of Kineto's: its tracks are workers."""
    if not is_chrome_trace(path):
        return False
    head = head_text(path, HEAD)
    return re.search(r'"ph"\s*:\s*"X"', head) is not None and _KINETO.search(head) is None


def describe(path: Path) -> str:
    """What an unrecognised input looks like and which importer (or tool) would read it; '' when nothing is known."""
    if path.is_dir():
        return ""
    name = path.name.lower()
    try:
        head = head_text(path, 4096)
    except (OSError, EOFError, UnicodeDecodeError):
        return ""
    stripped = head.lstrip()
    if name.endswith((".json", ".json.gz")) and stripped.startswith(("{", "[")):
        if '"traceEvents"' in head or '"ph"' in head:
            return ("a Chrome trace with no events an importer reads (no ProfilerStep, kernels, CPU operators or "
                    "worker tracks)")
        return "a JSON document that is not a Chrome trace (no traceEvents array, no events with 'ph')"
    if name.endswith((".pftrace", ".perfetto-trace", ".perfetto", ".pb")):
        return ("a Perfetto protobuf trace: export it as JSON (Perfetto UI: 'Convert to .json') and import it as "
                "format 'worker-timeline' or 'pytorch-trace'")
    if name.endswith((".nsys-rep", ".qdrep", ".sqlite")):
        return ("an Nsight Systems report: export it with `nsys export --type json` (or the op table with "
                "`nsys stats`) and import the result")
    if name.endswith((".csv", ".parquet")):
        return ("a table without the columns of a known format (op-table needs rank, step, optype, start_ts, "
                "duration; csv needs a step or iteration column)")
    return ""
