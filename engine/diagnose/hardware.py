"""Hardware-flow detectors: low accelerator utilisation, memory pressure, thermal or power throttling,
and data-loader wait. Grids are devices (or ranks) × steps. Thresholds: ``cases/thresholds/hardware.ttl``.
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, need_steps
from debugtune.engine.diagnose.stats import ffill, first_run, smooth

DIM = "hardware"


def _hardware_steps(ctx: Context, metric: str) -> None:
    """NotJudged when ``metric`` has fewer recorded steps than the knowledge base's minimum."""
    need_steps(ctx, ctx.view.steps(metric), metric)


def _persistent_low(ctx: Context, grid: Grid, limit: float, below: bool) -> tuple[int, int, float, int] | None:
    """(row, onset index, median after onset, detection index) of the worst row that stays beyond ``limit``."""
    th = ctx.th
    window = ctx.persist("hardware.persist_steps", grid.steps)
    best = None
    for i in range(len(grid.labels)):
        v = ffill(grid.values[i])
        mask = v < limit if below else v > limit
        start = first_run(mask, window)
        if start is None or mask[start:].mean() < th["hardware.persist_frac"]:
            continue
        level = float(np.median(v[start:]))
        if best is None or (level < best[2] if below else level > best[2]):
            best = (i, start, level, start + window - 1)
    return best


def utilisation(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    _hardware_steps(ctx, "util_pct")
    grid = view.by_entity("util_pct")
    limit = th["hardware.util.low_pct"]
    hit = _persistent_low(ctx, grid, limit, below=True)
    if hit is None:
        return
    i, start, level, detected = hit
    out.add(make_finding(
        "LowAcceleratorUtilization", DIM, str(grid.labels[i]) or "device", grid.steps, start, grid.steps.size - 1,
        severity(limit / max(level, 1e-3), 1.0, limit), {"util_pct": level, "threshold_pct": limit},
        "hardware.util", detected), (grid.steps, ffill(grid.values[i])))


def memory(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    _hardware_steps(ctx, "mem_used_bytes")
    used, total = view.by_entity("mem_used_bytes", reduce="max"), view.by_entity("mem_total_bytes", reduce="max")
    if used.values.shape != total.values.shape:
        return
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = Grid("mem_used_frac", used.labels, used.steps, used.values / total.values)
    limit = th["hardware.memory.used_frac"]
    hit = _persistent_low(ctx, frac, limit, below=False)
    if hit is None:
        return
    i, start, level, detected = hit
    out.add(make_finding(
        "MemoryPressure", DIM, str(used.labels[i]) or "device", used.steps, start, used.steps.size - 1,
        severity(level, limit, 1.0), {"used_fraction": level, "threshold": limit},
        "hardware.memory", detected), (used.steps, ffill(frac.values[i])))


def throttling(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    _hardware_steps(ctx, "throttle" if view.has("throttle") else "clock_mhz")
    best = None
    if view.has("throttle"):
        g = view.by_entity("throttle", reduce="max")
        frac = np.nanmean(np.nan_to_num(g.values) > 0, axis=1)
        i = int(np.argmax(frac))
        if frac[i] >= th["hardware.throttle.frac"]:
            best = (str(g.labels[i]), g, np.nan_to_num(g.values[i]) > 0, float(frac[i]), "flag")
    if best is None and view.has("clock_mhz"):
        g = view.by_entity("clock_mhz")
        v = np.where(np.isfinite(g.values), g.values, np.nan)
        top = np.nanmax(v, axis=1, keepdims=True)
        # msprof-analyze's AI Core frequency rule: Σ(max_f − f) / (max_f · n) ≥ limit
        with np.errstate(invalid="ignore", divide="ignore"):
            deficit = np.nanmean((top - v) / top, axis=1)
        i = int(np.nanargmax(deficit)) if np.isfinite(deficit).any() else 0
        if np.isfinite(deficit[i]) and deficit[i] >= th["hardware.clock.deficit"]:
            mask = (top[i] - v[i]) / top[i] >= th["hardware.clock.deficit"]
            best = (str(g.labels[i]), g, np.nan_to_num(mask), float(deficit[i]), "clock")
    if best is None:
        return
    entity, g, mask, level, rule = best
    start = int(np.argmax(mask))
    ev = {"throttled_fraction" if rule == "flag" else "clock_deficit": level}
    if view.has("temp_c"):
        ev["temp_c_max"] = float(np.nanmax(view.by_entity("temp_c").values))
    if view.has("power_w"):
        ev["power_w_max"] = float(np.nanmax(view.by_entity("power_w").values))
    out.add(make_finding(
        "ThermalThrottling", DIM, entity or "device", g.steps, start, g.steps.size - 1,
        severity(level, th["hardware.throttle.frac"] if rule == "flag" else th["hardware.clock.deficit"], 1.0),
        ev, f"hardware.throttle.{rule}", start), (g.steps, mask.astype(float)))


def dataloader(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    _hardware_steps(ctx, "dataloader_wait_ms")
    wait = view.by_rank("dataloader_wait_ms")
    step = view.by_rank("step_time_ms") if view.has("step_time_ms") else None
    share = None
    if step is not None and not step.empty:
        with np.errstate(invalid="ignore", divide="ignore"):
            share = wait.values / step.like(wait)
    abs_limit, share_limit = th["hardware.dataloader.wait_ms"], th["hardware.dataloader.share"]
    floor = th["hardware.dataloader.min_wait_ms"]
    window = ctx.persist("hardware.persist_steps", wait.steps)
    per_rank = np.nanmean(wait.values, axis=1)
    i = int(np.nanargmax(per_rank))
    w = smooth(ffill(wait.values[i]), window)  # the wait per step, averaged over a few steps
    mask = w >= abs_limit
    if share is not None:  # or a material share of a short step (the advisor's rule assumes long steps)
        mask |= (smooth(ffill(share[i]), window) >= share_limit) & (w >= floor)
    start = first_run(mask, window)
    if start is None or mask[start:].mean() < th["hardware.persist_frac"]:
        return
    others = np.delete(per_rank, i)
    single = others.size > 0 and per_rank[i] > th["hardware.dataloader.rank_factor"] * max(np.nanmedian(others), 1e-9)
    entity = f"rank:{int(wait.labels[i])}" if single else ""
    ev = {"wait_ms": float(np.mean(w[start:])), "threshold_ms": abs_limit, "ranks_affected":
          float(1 if single else np.sum(per_rank >= abs_limit))}
    if share is not None:
        ev["share_of_step"] = float(np.nanmean(share[i][start:]))
    out.add(make_finding(
        "DataLoaderWait", DIM, entity, wait.steps, start, wait.steps.size - 1,
        severity(float(np.mean(w[start:])), floor, abs_limit * 20), ev,
        "hardware.dataloader", start + window - 1), (wait.steps, w))
