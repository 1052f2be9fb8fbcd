"""Hardware-flow detectors: low accelerator utilisation, memory pressure, thermal or power throttling, running at
the power cap, and data-loader wait (device idle and host-bound steps: ``timeline``). Sampled counters are judged
per sample (devices × samples, see :func:`sampled`); the data-loader wait per step (ranks × steps). Every finding
reports the steps (or samples) it was judged from and its evidence weight (``evidence``).
Thresholds: ``cases/thresholds/hardware.ttl``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import ffill, first_run, smooth
from debugtune.engine.telemetry.shares import shares

DIM = "hardware"


def _hardware_steps(ctx: Context, metric: str) -> None:
    """NotJudged when ``metric`` has fewer recorded steps than the knowledge base's minimum."""
    need_steps(ctx, ctx.view.steps(metric), metric)


def _persistent_low(ctx: Context, grid: Grid, limit: float, below: bool,
                    window: int | None = None) -> tuple[int, int, float, int, np.ndarray] | None:
    """(row, onset index, median after onset, detection index, mask) of the worst row that stays beyond ``limit``
    for ``window`` columns (default: the step persistence window)."""
    th = ctx.th
    window = window or ctx.persist("hardware.persist_steps", grid.steps)
    best = None
    for i in range(len(grid.labels)):
        v = ffill(grid.values[i])
        mask = v < limit if below else v > limit
        start = first_run(mask, window)
        if start is None or mask[start:].mean() < th["hardware.persist_frac"]:
            continue
        level = float(np.median(v[start:]))
        if best is None or (level < best[2] if below else level > best[2]):
            best = (i, start, level, start + window - 1, mask)
    return best


def utilisation(ctx: Context, data: object, out: Emit) -> None:
    th = ctx.th
    s = sampled(ctx, "util_pct")
    grid = s.grid("util_pct")
    limit = th["hardware.util.low_pct"]
    hit = _persistent_low(ctx, grid, limit, below=True, window=s.window)
    if hit is None:
        return
    i, start, level, detected, mask = hit
    sev, ev = evidence.scaled(ctx, severity(limit / max(level, 1e-3), 1.0, limit), mask,
                              extra={"util_pct": level, "threshold_pct": limit})
    out.add(make_finding(
        "LowAcceleratorUtilization", DIM, str(grid.labels[i]) or "device", grid.steps, start, grid.steps.size - 1,
        sev, ev, "hardware.util", detected), (grid.steps, ffill(grid.values[i])))


def memory(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    if view.has("mem_used_bytes", "mem_total_bytes"):
        s = sampled(ctx, "mem_used_bytes", "mem_total_bytes")
        with np.errstate(invalid="ignore", divide="ignore"):
            values, source = s.values["mem_used_bytes"] / s.values["mem_total_bytes"], "mem_used_bytes"
    elif view.has("mem_used_pct"):  # npu-smi watch's Memory(%)
        s = sampled(ctx, "mem_used_pct")
        values, source = s.values["mem_used_pct"] / 100.0, "mem_used_pct"
    else:
        raise NotJudged("mem_used_bytes recorded without mem_total_bytes or mem_used_pct: the used share is unknown")
    frac = Grid("mem_used_frac", s.labels, s.steps, values)
    limit = th["hardware.memory.used_frac"]
    hit = _persistent_low(ctx, frac, limit, below=False, window=s.window)
    if hit is None:
        return
    i, start, level, detected, mask = hit
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), mask, extra={"used_fraction": level,
                                                                             "threshold": limit})
    out.add(make_finding(
        "MemoryPressure", DIM, str(s.labels[i]) or "device", s.steps, start, s.steps.size - 1,
        sev, {**ev, "from": source}, "hardware.memory", detected), (s.steps, ffill(frac.values[i])))


def throttling(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    if not view.has("throttle") and not view.has("clock_mhz"):
        raise NotJudged("temp_c alone does not show throttling: throttle (clock-event reasons) or clock_mhz needed")
    best = None
    if view.has("throttle"):
        g = sampled(ctx, "throttle").grid("throttle")
        frac = np.nanmean(np.nan_to_num(g.values) > 0, axis=1)
        i = int(np.argmax(frac))
        if frac[i] >= th["hardware.throttle.frac"]:
            best = (str(g.labels[i]), g, np.nan_to_num(g.values[i]) > 0, float(frac[i]), "flag")
    if best is None and view.has("clock_mhz"):
        g = sampled(ctx, "clock_mhz").grid("clock_mhz")
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
    sev, ev = evidence.scaled(
        ctx, severity(level, th["hardware.throttle.frac"] if rule == "flag" else th["hardware.clock.deficit"], 1.0),
        np.asarray(mask, dtype=bool), extra=ev)
    out.add(make_finding(
        "ThermalThrottling", DIM, entity or "device", g.steps, start, g.steps.size - 1, sev, ev,
        f"hardware.throttle.{rule}", start), (g.steps, mask.astype(float)))


def dataloader(ctx: Context, data: object, out: Emit) -> None:
    """A short window (a profiler trace of a few steps) is judged too; its evidence weight says how little it
    rests on."""
    th, view = ctx.th, ctx.view
    wait = view.by_rank("dataloader_wait_ms")
    step = view.by_rank("step_time_ms") if view.has("step_time_ms") else None
    share = None
    if step is not None and not step.empty:
        with np.errstate(invalid="ignore", divide="ignore"):
            share = shares(wait.values, step.like(wait))
    abs_limit, share_limit = th["hardware.dataloader.wait_ms"], th["hardware.dataloader.share"]
    floor = th["hardware.dataloader.min_wait_ms"]
    window = min(ctx.persist("hardware.persist_steps", wait.steps), wait.steps.size)
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
    level = severity(float(np.mean(w[start:])), floor, abs_limit * 20)
    if share is not None:  # as severe as the worse of the two: a third of a short step lost is a third lost
        ev["share_of_step"] = float(np.nanmean(share[i][start:]))
        level = max(level, severity(ev["share_of_step"], share_limit, 1.0))
    sev, ev = evidence.scaled(ctx, level, mask[start:], extra=ev)  # the steps its persistence was judged on
    out.add(make_finding(
        "DataLoaderWait", DIM, entity, wait.steps, start, wait.steps.size - 1, sev, ev,
        "hardware.dataloader", start + window - 1), (wait.steps, w))


# -- sampled counters (issue 16) -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Samples:
    """Hardware counters as taken: one row per device (``rank:<r>/<device>`` when several ranks sampled), one
    column per sample in time order, NaN where a metric was not read. ``steps`` is the training step of each
    sample (the live probe drains several samples per step; an smi log has one sample per step number)."""

    labels: tuple[str, ...]
    steps: np.ndarray
    values: dict[str, np.ndarray]
    window: int

    def grid(self, metric: str) -> Grid:
        return Grid(metric, self.labels, self.steps, self.values[metric])


def sampled(ctx: Context, *metrics: str) -> Samples:
    """The samples of ``metrics`` aligned by sample (the k-th sample of a step of one device is one column);
    NotJudged when a metric has fewer samples per device than the knowledge base's ``hardware.min_samples``."""
    view = ctx.view.materialize(metrics)
    n_names = max(len(view.entity_names), 1)
    parts = []
    for m in metrics:
        rows = view.rows(m)
        if rows is None:
            raise NotJudged(f"{m} not recorded")
        key = view.rank[rows].astype(np.int64) * n_names + view.entity_code[rows]
        step = view.step[rows]
        order = np.lexsort((rows, step, key))  # by device, then step, then the order they were written
        rows, key, step = rows[order], key[order], step[order]
        first = np.ones(rows.size, dtype=bool)
        first[1:] = (key[1:] != key[:-1]) | (step[1:] != step[:-1])
        k = np.arange(rows.size) - np.maximum.accumulate(np.where(first, np.arange(rows.size), 0))
        parts.append((m, rows, key, step, k))
    width = int(max(p[4].max() for p in parts)) + 1
    keys = np.unique(np.concatenate([p[2] for p in parts]))
    sids = np.unique(np.concatenate([p[3] * width + p[4] for p in parts]))
    values = {}
    minimum = ctx.th.as_int("hardware.min_samples")
    for m, rows, key, step, k in parts:
        grid = np.full((keys.size, sids.size), np.nan)
        grid[np.searchsorted(keys, key), np.searchsorted(sids, step * width + k)] = view.value[rows]
        most = int(np.isfinite(grid).sum(axis=1).max())
        if most < minimum:
            raise NotJudged(f"{most} samples of {m} recorded per device, at least {minimum} are needed")
        values[m] = grid
    ranks = keys // n_names
    many = np.unique(ranks).size > 1
    labels = tuple(f"rank:{int(r)}/{view.entity_names[int(c)]}" if many else view.entity_names[int(c)]
                   for r, c in zip(ranks, keys % n_names, strict=True))
    return Samples(labels, sids // width, values, ctx.th.as_int("hardware.persist_samples"))


def power(ctx: Context, data: object, out: Emit) -> None:
    """Running at the power cap: the power clock-event reasons on a share of the samples, or board power held
    at the enforced limit."""
    th, view = ctx.th, ctx.view
    if not view.has("throttle_power") and not view.has("power_limit_w"):
        raise NotJudged("power_w recorded without power_limit_w or throttle_power: the device's power cap is unknown")
    best = None
    if view.has("throttle_power"):
        s = sampled(ctx, "throttle_power")
        flags = np.nan_to_num(s.values["throttle_power"]) > 0
        frac = flags.mean(axis=1)
        i = int(np.argmax(frac))
        if frac[i] >= th["hardware.throttle.frac"]:
            start = int(np.argmax(flags[i]))
            best = (s, i, start, start, {"capped_fraction": float(frac[i])},
                    severity(float(frac[i]), th["hardware.throttle.frac"], 1.0), "flag", flags[i].astype(float))
    if best is None and view.has("power_w", "power_limit_w"):
        s = sampled(ctx, "power_w", "power_limit_w")
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = s.values["power_w"] / ffill_rows(s.values["power_limit_w"])
        limit = th["hardware.power.cap_frac"]
        hit = _persistent_low(ctx, Grid("power_cap_frac", s.labels, s.steps, ratio), limit, below=False,
                              window=s.window)
        if hit is not None:
            i, start, level, detected, _ = hit
            best = (s, i, start, detected, {"cap_fraction": level, "threshold": limit},
                    severity(level, limit, 1.0), "level", ffill(ratio[i]))
    if best is None:
        return
    s, i, start, detected, ev, sev, rule, series = best
    for metric, key in (("power_w", "power_w_median"), ("power_limit_w", "power_limit_w")):
        try:
            other = sampled(ctx, metric) if view.has(metric) else None
        except NotJudged:
            other = None
        if other is not None and s.labels[i] in other.labels:
            ev[key] = float(np.nanmedian(other.values[metric][other.labels.index(s.labels[i])]))
    out.add(make_finding("PowerCapped", DIM, s.labels[i] or "device", s.steps, start, s.steps.size - 1, sev, ev,
                         f"hardware.power.{rule}", detected), (s.steps, series))


def ffill_rows(values: np.ndarray) -> np.ndarray:
    """Each row forward-filled (a power limit is read less often than the power, or only once)."""
    return np.vstack([ffill(row) for row in values]) if values.size else values
