"""Where each step's device time went, from the device timeline of a profiler trace (HTA's definitions).

Kernels (and memory copies/sets) belong to the step whose CPU side launched them (the runtime call with the same
correlation id). A step's device window runs from the end of the previous step's last device event to the end
of its own last one (the first step starts at its first event): the windows tile the device timeline, so the
data-loader and host stalls between steps fall in the step that waited. Within a window:

- ``compute_ms``: time any computation kernel runs; ``comm_ms``: time any communication kernel runs;
  ``comm_overlapped_ms``: both at once; ``comm_not_overlapped_ms``: communication alone (exposed);
- ``memcpy_ms``: time only memory copies/sets run; ``free_ms``: no device event runs (idle), so
  compute + exposed communication + memcpy + idle = the window (``step_time_ms``);
- the idle split of HTA's ``get_idle_time_breakdown`` applied to the whole device: a gap is *host wait* when the
  kernel that ends it was launched after the device went idle, *kernel wait* when it is shorter than HTA's
  ``consecutive_kernel_delay`` (30 µs), *other* otherwise (e.g. waiting on an event of another stream);
- ``op_dur_median_us`` / ``launch_gap_median_us``: median computation-kernel duration and median interval
  between consecutive launches (kernels that finish faster than the host launches them leave the device idle).

HTA's temporal breakdown computes the idle share the same way over the whole trace (first to last kernel, minus
their union; hta/analyzers/breakdown_analysis.py), so Σ idle / Σ window over the steps HTA keeps is its figure.
"""

from __future__ import annotations

import numpy as np

HTA_KERNEL_WAIT_US = 30.0
"""HTA ``consecutive_kernel_delay`` default: gaps shorter than this are launch overhead (kernel wait).
Source: https://github.com/facebookresearch/HolisticTraceAnalysis/blob/main/hta/trace_analysis.py"""

COMPUTE, COMM, MEMORY = 0, 1, 2


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint sorted blocks (start, end) of the union of [start, end); also the order of the inputs by start
    and the block index of each input in that order."""
    if len(starts) == 0:
        z = np.zeros(0)
        return z, z, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    run_end = np.maximum.accumulate(ends[order])
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    block = np.cumsum(new) - 1
    b_start = s[new]
    b_end = np.full(len(b_start), -np.inf)
    np.maximum.at(b_end, block, ends[order])
    return b_start, b_end, order, block


class Coverage:
    """The union of a set of intervals, answering "how much of [a, b) is covered" for many windows at once."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        self.s, self.e, _, _ = merge(np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64))
        self.cum = np.concatenate([[0.0], np.cumsum(self.e - self.s)])

    @property
    def total(self) -> float:
        return float(self.cum[-1])

    def upto(self, t: np.ndarray) -> np.ndarray:
        n = len(self.s)
        if n == 0:
            return np.zeros(len(t))
        j = np.searchsorted(self.e, t, side="right")
        part = np.where(j < n, np.clip(t - self.s[np.minimum(j, n - 1)], 0.0, None), 0.0)
        out: np.ndarray = self.cum[j] + part
        return out

    def within(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.upto(b) - self.upto(a)
        return out


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length covered by the union of intervals [start, end)."""
    return Coverage(starts, ends).total


def _median_by(groups: np.ndarray, values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Median of ``values`` per key (NaN where a key has none)."""
    out = np.full(len(keys), np.nan)
    if len(values) == 0:
        return out
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    bounds = np.searchsorted(g, keys, side="left"), np.searchsorted(g, keys, side="right")
    for i, (lo, hi) in enumerate(zip(*bounds, strict=True)):
        if hi > lo:
            out[i] = float(np.median(v[lo:hi]))
    return out


def step_breakdown(numbers: list[int], ts: np.ndarray, dur: np.ndarray, kind: np.ndarray, step: np.ndarray,
                   launch: np.ndarray) -> dict[int, dict[str, float]]:
    """Per step number: the device metrics of the module docstring (times in ms, medians in µs).

    ``ts``/``dur`` (µs), ``kind`` (COMPUTE/COMM/MEMORY), ``step`` (the launching step, −1 outside the profiled
    steps) and ``launch`` (µs of the launching runtime call, NaN when unknown) are per device event."""
    # an event without a finite start or with a negative duration (clock skew, a truncated trace) has no extent
    sel = (step >= 0) & np.isfinite(ts) & np.isfinite(dur) & (dur >= 0)
    if not sel.any():
        return {}
    ts, dur, kind, step, launch = ts[sel], dur[sel], kind[sel], step[sel], launch[sel]
    end = ts + dur
    present = [n for n in numbers if (step == n).any()]
    if not present:
        return {}
    keys = np.array(present, dtype=np.int64)
    first = np.array([ts[step == n].min() for n in present])
    last = np.maximum.accumulate(np.array([end[step == n].max() for n in present]))
    w0 = np.concatenate([[first[0]], last[:-1]])
    w1 = last
    length = np.maximum(w1 - w0, 0.0)
    comp_m, comm_m = kind == COMPUTE, kind == COMM
    busy = Coverage(ts, end).within(w0, w1)
    comp = Coverage(ts[comp_m], end[comp_m]).within(w0, w1)
    comm = Coverage(ts[comm_m], end[comm_m]).within(w0, w1)
    either = comp_m | comm_m
    cm = Coverage(ts[either], end[either]).within(w0, w1)
    overlapped = np.clip(comp + comm - cm, 0.0, None)
    idle = np.clip(length - busy, 0.0, None)
    host, short, other = _idle_split(ts, end, launch, w0, w1)

    op_dur = _median_by(step[comp_m], dur[comp_m], keys)
    known = np.isfinite(launch)
    gaps_step, gaps = _launch_gaps(step[known], launch[known])
    gap_med = _median_by(gaps_step, gaps, keys)
    out: dict[int, dict[str, float]] = {}
    for i, n in enumerate(present):
        row = {"step_time_ms": length[i] / 1e3, "compute_ms": comp[i] / 1e3, "comm_ms": comm[i] / 1e3,
               "comm_overlapped_ms": overlapped[i] / 1e3, "comm_not_overlapped_ms": (comm[i] - overlapped[i]) / 1e3,
               "memcpy_ms": max(busy[i] - cm[i], 0.0) / 1e3, "free_ms": idle[i] / 1e3,
               "idle_host_wait_ms": host[i] / 1e3, "idle_kernel_wait_ms": short[i] / 1e3,
               "idle_other_ms": other[i] / 1e3, "kernel_count": float(np.count_nonzero(comp_m & (step == n)))}
        if np.isfinite(op_dur[i]):
            row["op_dur_median_us"] = float(op_dur[i])
        if np.isfinite(gap_med[i]):
            row["launch_gap_median_us"] = float(gap_med[i])
        out[n] = row
    return out


def _idle_split(ts: np.ndarray, end: np.ndarray, launch: np.ndarray, w0: np.ndarray,
                w1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle time per window as host wait / kernel wait / other (HTA's rules at the level of the whole device)."""
    n = len(w0)
    b_start, b_end, order, block = merge(ts, end)
    host, short, other = np.zeros(n), np.zeros(n), np.zeros(n)
    if len(b_start) < 2:
        return host, short, other
    # the event that opens each block (the earliest one in start order) and its launch
    opener = np.zeros(len(b_start), dtype=np.int64)
    firsts = np.flatnonzero(np.concatenate([[True], block[1:] != block[:-1]]))
    opener[block[firsts]] = order[firsts]
    g0, g1 = b_end[:-1], b_start[1:]
    gap = g1 - g0
    opened_by = launch[opener[1:]]
    is_host = np.isfinite(opened_by) & (opened_by > g0)
    is_short = ~is_host & (gap < HTA_KERNEL_WAIT_US)
    win = np.searchsorted(w1, g0, side="right")
    inside = (win < n) & (g0 >= w0[np.minimum(win, n - 1)])
    for mask, acc in ((is_host, host), (is_short, short), (~is_host & ~is_short, other)):
        m = mask & inside
        acc += np.bincount(win[m], weights=gap[m], minlength=n)[:n]
    return host, short, other


def _launch_gaps(step: np.ndarray, launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intervals between consecutive launches within each step, with their step."""
    if len(launch) < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    order = np.lexsort((launch, step))
    s, t = step[order], launch[order]
    same = s[1:] == s[:-1]
    return s[1:][same], np.diff(t)[same]
