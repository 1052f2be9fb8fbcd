"""Kineto traces of the CUPTI range profiler (``cuda_profiler_range`` events): per kernel, hardware counters
instead of a measured duration. The profiler replays each kernel to read its counters, so the events' times are
the replay ranges laid end to end (every one the same length), not when or how long the kernel ran: the device
timeline of such a trace (idle, overlap) is not measured. The k-th range is the k-th kernel launched (the ranges
carry no correlation id; both run in launch order).

Per step: ``kernel_count`` and ``flop_count`` per precision (entity fp64 / fp32 / fp16) from the SASS
instruction counters, add + mul + 2 × fma (``smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum``,
Nsight Compute's roofline FLOP count)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CATEGORY = "cuda_profiler_range"
FLOP_SOURCE = "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#roofline-charts"
_PRECISION = {"d": "fp64", "f": "fp32", "h": "fp16"}
_OPS = {"add": 1.0, "mul": 1.0, "fma": 2.0}
NOTE = ("CUPTI range-profiler trace: kernel times are counter-replay ranges, not durations, so the device "
        "timeline (idle, overlap) is not measured; per step: kernel count and FLOPs from the SASS counters")


def flops(args: dict[str, object]) -> dict[str, float]:
    """FLOPs per precision of one range's counters (precisions without counters are left out)."""
    out: dict[str, float] = {}
    for p, precision in _PRECISION.items():
        total, seen = 0.0, False
        for op, weight in _OPS.items():
            value = args.get(f"smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum")
            if isinstance(value, int | float) and not isinstance(value, bool):
                total += weight * float(value)
                seen = True
        if seen:
            out[precision] = total
    return out


def range_rows(ranges: list[dict[str, object]], launches: np.ndarray,
               step_of: Callable[[np.ndarray], np.ndarray]) -> dict[int, dict[tuple[str, str], float]]:
    """Per step: kernel count and FLOPs of the ranges matched, in order, to the kernel launches (µs)."""
    out: dict[int, dict[tuple[str, str], float]] = {}
    order = np.sort(launches)
    steps = step_of(order[: len(ranges)]) if len(order) else np.full(len(ranges), 0)
    for i, args in enumerate(ranges):
        step = int(steps[i]) if i < len(steps) else -1
        if step < 0:
            continue
        row = out.setdefault(step, {})
        row[("kernel_count", "")] = row.get(("kernel_count", ""), 0.0) + 1.0
        for precision, value in flops(args).items():
            row[("flop_count", precision)] = row.get(("flop_count", precision), 0.0) + value
    return out
