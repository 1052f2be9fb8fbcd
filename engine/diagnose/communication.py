"""Communication-flow detectors: slow link, bandwidth utilisation against the link peak, communication share of
step time, MoE all-to-all size imbalance and step-time regression (the slow rank and stage: ``stragglers``).

Grids are ranks × steps (or links × steps). Every finding reports the steps it was judged from and its evidence
weight (``evidence``). Thresholds: ``cases/thresholds/communication.ttl``; link peaks:
``cases/hardware-peaks.ttl``.
"""

from __future__ import annotations

import warnings

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import centred_trimmed_mean, ffill, first_run, trimmed_mean
from debugtune.engine.diagnose.stragglers import complete
from debugtune.engine.telemetry.shares import shares

DIM = "communication"


def slow_link(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    grid = view.by_entity("link_bw_gbps")
    if len(grid.labels) < 2:
        raise NotJudged("one link recorded")
    per_link = np.nanmedian(grid.values, axis=1)
    avg = float(np.nanmean(per_link))
    slow = int(np.nanargmin(per_link))
    ratio = float(per_link[slow] / max(avg, 1e-12))
    if ratio >= th["communication.slow_link.ratio"]:
        return
    values = ffill(grid.values[slow])
    mask = values < th["communication.slow_link.ratio"] * avg
    start = first_run(mask, min(ctx.persist("communication.persist_steps", grid.steps), mask.size)) or 0
    sev, ev = evidence.scaled(
        ctx, severity(1 / max(ratio, 1e-9), 1 / th["communication.slow_link.ratio"], 100.0), mask,
        extra={"bandwidth_gbps": float(per_link[slow]), "average_gbps": avg, "ratio_to_average": ratio,
               "links": len(grid.labels)})
    out.add(make_finding("SlowLink", DIM, str(grid.labels[slow]), grid.steps, start, grid.steps.size - 1, sev, ev,
                         "communication.slow_link", start), (grid.steps, values))


def bus_factor(ctx: Context, op: str, n: int) -> float | None:
    """nccl-tests bus-bandwidth factor of a collective kind for ``n`` ranks (None for an unknown kind)."""
    key = op.split("@", 1)[0].lower().replace("_", "").replace("-", "")
    for name in ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce"):
        if key.startswith(name) or name in key:
            coef, const = ctx.th[f"busbw.{name}.coef"], ctx.th[f"busbw.{name}.const"]
            return coef * (n - 1) / n + const
    return None


def _link_peak(ctx: Context) -> tuple[str, float]:
    kind = str(ctx.meta.get("interconnect") or ctx.meta.get("link_kind") or "").lower()
    peak = ctx.th.get(f"link_peak_gbps.{kind}") if kind else None
    if peak is None:
        why = ctx.meta.get("interconnect_from") or "run.json names no interconnect"
        raise NotJudged(f"the link is unknown or has no peak bandwidth in the knowledge base ({why}; give "
                        "--interconnect)")
    return kind, float(peak)


def bandwidth(ctx: Context, data: object, out: Emit) -> None:
    """Bus bandwidth (nccl-tests factors) of every collective kind whose messages are large enough to measure a
    link, against the link's peak; one finding per kind below ``communication.bandwidth.util_low``."""
    th, view = ctx.th, ctx.view
    kind, peak = _link_peak(ctx)
    floor = th["communication.bandwidth.min_bytes"]
    rows: list[tuple[str, np.ndarray, np.ndarray]] = []
    ops = sorted(set(view.entities("collective_bytes")) | set(view.entities("busbw_gbps")))
    for op in ops:
        if any(k in op for k in ("send", "recv", "barrier")):
            continue
        b = view.by_rank("collective_bytes", op)
        if b.empty:  # a producer that measured the bus bandwidth itself, without message sizes
            g = view.by_rank("busbw_gbps", op)
            rows.append((op, g.steps, np.nanmedian(g.values, axis=0)))
            continue
        count = view.by_rank("collective_count", op).like(b) if view.has("collective_count") else None
        with np.errstate(invalid="ignore", divide="ignore"):
            size = np.nanmedian(b.values / count if count is not None else b.values, axis=0)
        if view.has("busbw_gbps") and op in view.entities("busbw_gbps"):
            busbw = np.nanmedian(view.by_rank("busbw_gbps", op).like(b), axis=0)
        elif view.has("collective_ms"):
            f = bus_factor(ctx, op, max(int(view.ranks().size), 2))
            if f is None:
                continue
            t = view.by_rank("collective_ms", op).like(b)
            # the last-arriving rank's time is the transfer itself (TraceLens): the minimum over ranks
            with np.errstate(invalid="ignore", divide="ignore"):
                busbw = np.nanmedian(b.values, axis=0) / (np.nanmin(t, axis=0) * 1e-3) / 1e9 * f
        else:
            continue
        keep = (size >= floor) & np.isfinite(busbw)
        if keep.any():
            rows.append((op, b.steps[keep], busbw[keep]))
    if not rows:
        raise NotJudged(f"no collective with messages of at least {floor / 2**20:.0f} MiB to measure the link by")
    low = th["communication.bandwidth.util_low"]
    for op, s, v in rows:
        u = v / peak
        level = float(np.nanmedian(u))
        if level >= low:
            continue
        sev, ev = evidence.scaled(ctx, severity(1 / max(level, 1e-6), 1 / low, 20.0), u < low, extra={
            "utilisation": level, "busbw_gbps": float(np.nanmedian(v)), "peak_gbps": peak, "interconnect": kind})
        out.add(make_finding("LowBandwidthUtilization", DIM, op, s, 0, s.size - 1, sev, ev,
                             "communication.bandwidth", ctx.persist("communication.persist_steps", s) - 1), (s, u))


def comm_share(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    num = "comm_not_overlapped_ms" if view.has("comm_not_overlapped_ms") else "comm_ms"
    c, t = view.by_rank(num), view.by_rank("step_time_ms")
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no rank measured stays NaN
        share = np.nanmedian(shares(c.values, t.like(c)), axis=0)
    judged = np.isfinite(share)
    share = ffill(share)
    level = float(np.nanmedian(share))
    limit = th["communication.comm_share.max"]
    if not level > limit:
        return
    mask = share > limit
    persist = min(ctx.persist("communication.persist_steps", c.steps), mask.size)
    start = first_run(mask, persist) or 0
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), mask[judged], extra={"share": level, "metric": num})
    out.add(make_finding(
        "HighCommunicationShare", DIM, "", c.steps, start, c.steps.size - 1, sev, ev,
        "communication.comm_share", start + persist - 1), (c.steps, share))


def cross_cabinet(ctx: Context, data: object, out: Emit) -> None:
    """The share of dispatched tokens whose expert sits in another cabinet than their rank, above
    ``communication.cross_cabinet.max_share`` (median over the steps); onset where it first stays above."""
    th, view = ctx.th, ctx.view
    g = view.by_rank("cross_cabinet_share")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no rank measured stays NaN
        share = np.nanmedian(g.values, axis=0)
    judged = np.isfinite(share)
    share = ffill(share)
    level, limit = float(np.nanmedian(share)), th["communication.cross_cabinet.max_share"]
    if not level > limit:
        return
    mask = share > limit
    persist = min(ctx.persist("communication.persist_steps", g.steps), mask.size)
    start = first_run(mask, persist) or 0
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), mask[judged], extra={"share": level,
                                                                                   "max_share": float(share.max())})
    out.add(make_finding("CrossCabinetTraffic", DIM, "", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.cross_cabinet", start + persist - 1), (g.steps, share))


def alltoall(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    g = complete(view.by_rank("alltoall_bytes", reduce="sum"))
    if len(g.labels) < 2 or g.steps.size == 0:
        raise NotJudged("fewer than two ranks with all-to-all sizes on the same steps")
    with np.errstate(invalid="ignore", divide="ignore"):
        imb = g.values.max(axis=0) / g.values.mean(axis=0)
    imb = np.nan_to_num(imb, nan=1.0)
    limit = th["communication.alltoall.imbalance"]
    mask = imb >= limit
    persist = min(ctx.persist("communication.persist_steps", g.steps), mask.size)
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["communication.persist_frac"]:
        return
    heavy = int(g.labels[int(np.argmax(g.values[:, start:].sum(axis=1)))])
    sev, ev = evidence.scaled(ctx, severity(float(np.median(imb[start:])), limit, len(g.labels)), mask, extra={
        "size_imbalance": float(np.median(imb[start:])), "heavy_rank": heavy, "ranks": float(len(g.labels))})
    out.add(make_finding(
        "AllToAllImbalance", DIM, f"rank:{heavy}", g.steps, start, g.steps.size - 1, sev, ev,
        "communication.alltoall", start + persist - 1), (g.steps, imb))


def step_time(ctx: Context, data: object, out: Emit) -> None:
    """Step time that rises and stays up (BLOOM-176B: +5% with a normal loss was one slow GPU). The level is a
    trimmed mean, which a stall on every k-th step raises as it does the wall time, not a median, which it
    leaves at the fast steps' time until half the steps stall."""
    th, view = ctx.th, ctx.view
    g = view.by_rank("step_time_ms")
    need_steps(ctx, g.steps, "step_time_ms")
    t = ffill(np.nanmax(g.values, axis=0))  # the step ends when the slowest rank ends
    n = t.size
    skip = int(n * th["communication.step_time.skip_frac"])
    w = max(3, int(n * th["communication.step_time.window_frac"]))
    if n - skip < 3 * w:
        return
    trim = th["communication.step_time.trim"]
    trend = centred_trimmed_mean(t, w, trim)
    base = trimmed_mean(t[skip: skip + w], trim)
    rise = trend / max(base, 1e-12) - 1
    mask = rise >= th["communication.step_time.rise"]
    mask[: skip + w] = False
    start = first_run(mask, max(w, ctx.persist("communication.persist_steps", g.steps)))
    if start is None or mask[start:].mean() < th["communication.persist_frac"]:
        return
    level = float(np.median(rise[start:]))
    sev, ev = evidence.scaled(ctx, severity(level, th["communication.step_time.rise"], 2.0), mask[start:], extra={
        "relative_rise": level, "step_time_ms_before": base, "step_time_ms_after": trimmed_mean(t[start:], trim)})
    out.add(make_finding(
        "StepTimeRegression", DIM, "", g.steps, start, n - 1, sev, ev, "communication.step_time", start + w - 1),
        (g.steps, t))
