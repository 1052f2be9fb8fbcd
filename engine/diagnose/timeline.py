"""Device-timeline detectors: the device idle for much of the step (DeviceIdle) and the host setting the pace
(HostBound). They read what the trace importers derive with HTA's definitions (``device_timeline``): the idle
time of each step's device window and its split into host wait / kernel wait / other, and the median kernel
duration against the median launch interval. On a CPU-only trace (no device) a step is host bound when the
training thread spends at least ``hardware.host_bound.host_share`` of it outside operators and collectives.
Thresholds: ``cases/thresholds/hardware.ttl`` (``hardware.idle.*``, ``hardware.host_bound.*``).
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, NotJudged
from debugtune.engine.telemetry.shares import shares

DIM = "hardware"


def _share(ctx: Context, metric: str) -> tuple[Grid, np.ndarray]:
    """``metric`` over the step's device window, ranks × steps."""
    part = ctx.view.by_rank(metric)
    step = ctx.view.by_rank("step_time_ms").like(part)
    return part, shares(part.values, step)


def _worst(share: np.ndarray, mask: np.ndarray) -> int:
    """The rank (row) where the condition held most often, ties to the larger median share."""
    hits = np.nansum(mask, axis=1)
    level = np.nan_to_num(np.nanmedian(share, axis=1), nan=-1.0)
    return int(np.lexsort((level, hits))[-1])


def _where(ctx: Context, grid: Grid, mask: np.ndarray, row: int) -> str:
    """Run-wide ("") when most ranks show it, else the rank."""
    ranks_hit = int(np.sum(np.nanmean(mask, axis=1) >= ctx.th["hardware.persist_frac"]))
    return "" if len(grid.labels) == 1 or ranks_hit > len(grid.labels) / 2 else f"rank:{int(grid.labels[row])}"


def device_idle(ctx: Context, data: object, out: Emit) -> None:
    th = ctx.th
    free, share = _share(ctx, "free_ms")
    if not np.isfinite(share).any():
        raise NotJudged("no step with both free_ms and step_time_ms")
    limit = th["hardware.idle.share"]
    mask = np.nan_to_num(share) > limit
    row = _worst(share, mask)
    s = share[row]
    judged = np.isfinite(s)
    hit = mask[row][judged]
    if not hit.any() or hit.mean() < th["hardware.persist_frac"]:
        return
    level = float(np.nanmedian(s))
    parts: dict[str, float | str] = {"idle_share": level}
    for metric, key in (("idle_host_wait_ms", "host_wait_share"), ("idle_kernel_wait_ms", "kernel_wait_share"),
                        ("idle_other_ms", "other_idle_share"), ("compute_ms", "compute_share"),
                        ("comm_not_overlapped_ms", "exposed_comm_share"), ("memcpy_ms", "memcpy_share")):
        if ctx.view.has(metric):
            _, sh = _share(ctx, metric)
            parts[key] = float(np.nanmedian(sh[row]))
    losses = {k: v for k, v in parts.items() if k in ("idle_share", "exposed_comm_share", "memcpy_share")}
    parts["dominant_loss"] = max(losses, key=lambda k: float(losses[k])).removesuffix("_share")
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), hit,
                              extra={**parts, "threshold": limit, "ranks": float(len(free.labels))})
    steps = free.steps[judged]
    start = int(np.argmax(hit))
    out.add(make_finding("DeviceIdle", DIM, _where(ctx, free, mask, row), steps, start, steps.size - 1, sev, ev,
                         "hardware.device_idle", start), (steps, s[judged]))


def host_bound(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    limit, host_share, ratio = th["hardware.idle.share"], th["hardware.host_bound.host_share"], \
        th["hardware.host_bound.launch_ratio"]
    cpu = not view.has("free_ms")
    idle_metric = "host_gap_ms" if cpu else "free_ms"
    if not view.has(idle_metric):
        raise NotJudged(f"{idle_metric} not recorded")
    idle, share = _share(ctx, idle_metric)
    material = np.nan_to_num(share) > limit
    rules = np.zeros(share.shape, dtype=bool)
    why = ""
    if not cpu and view.has("idle_host_wait_ms"):
        host = view.by_rank("idle_host_wait_ms").like(idle)
        with np.errstate(invalid="ignore", divide="ignore"):
            waited = np.nan_to_num(host / idle.values) >= host_share
        rules |= waited
        why = "host wait"
    if cpu:  # no device: the host sets the pace when it spends most of the step outside operators and waits
        rules |= np.nan_to_num(share) >= host_share
        why = "host time outside operators"
    gap_metric = "launch_gap_median_us"
    if not cpu and view.has("op_dur_median_us") and view.has(gap_metric):
        dur = view.by_rank("op_dur_median_us").like(idle)
        gap = view.by_rank(gap_metric).like(idle)
        short = np.nan_to_num(dur) < ratio * np.nan_to_num(gap)
        rules |= short
        why = why + " or short kernels" if why else "short kernels"
    if not why:
        raise NotJudged("neither the idle split nor kernel and launch intervals were recorded")
    mask = material & rules
    row = _worst(share, mask)
    judged = np.isfinite(share[row])
    hit = mask[row][judged]
    if not hit.any() or hit.mean() < th["hardware.persist_frac"]:
        return
    level = float(np.nanmedian(share[row]))
    extra: dict[str, float | str] = {"idle_share" if not cpu else "host_gap_share": level, "rule": why.strip()}
    if not cpu and view.has("idle_host_wait_ms"):
        with np.errstate(invalid="ignore", divide="ignore"):
            extra["host_wait_of_idle"] = float(np.nanmedian(view.by_rank("idle_host_wait_ms").like(idle)[row]
                                                            / idle.values[row]))
    if not cpu and view.has("op_dur_median_us") and view.has(gap_metric):
        extra["kernel_median_us"] = float(np.nanmedian(view.by_rank("op_dur_median_us").like(idle)[row]))
        extra["gap_median_us"] = float(np.nanmedian(view.by_rank(gap_metric).like(idle)[row]))
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), hit, extra=extra)
    steps = idle.steps[judged]
    start = int(np.argmax(hit))
    out.add(make_finding("HostBound", DIM, _where(ctx, idle, mask, row), steps, start, steps.size - 1, sev, ev,
                         "hardware.host_bound", start), (steps, share[row][judged]))
