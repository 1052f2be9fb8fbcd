"""Communication-flow detectors: slow link, bandwidth utilisation against the link peak, communication share of
step time, MoE all-to-all size imbalance and step-time regression (the slow rank and stage: ``stragglers``).

Grids are ranks × steps (or links × steps). Every finding reports the steps it was judged from and its evidence
weight (``evidence``). Thresholds: ``cases/thresholds/communication.ttl``; link peaks:
``cases/hardware-peaks.ttl``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.rankscans import RankScans
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.scan import Block, Partial, ScanJob
from debugtune.engine.diagnose.stats import centred_trimmed_mean, ffill, first_run, sustained_onset, trimmed_mean
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


@dataclass(frozen=True)
class _Bandwidth:
    """How one collective kind's bus bandwidth is measured: the companions of ``collective_bytes`` recorded
    (``count``, ``busbw``: the producer's own bus bandwidth, else ``time``: from collective_ms with ``factor``)."""

    count: bool
    busbw: bool
    factor: float


def bandwidth_kernel(block: Block, p: _Bandwidth) -> Partial:
    """Per step: the median message size (``size``) and bus bandwidth (``busbw``) over the ranks."""
    b = block.values
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        size = np.nanmedian(b / block.also["collective_count"] if p.count else b, axis=1)
        if p.busbw:
            busbw = np.nanmedian(block.also["busbw_gbps"], axis=1)
        else:  # the last-arriving rank's time is the transfer itself (TraceLens): the minimum over ranks
            busbw = np.nanmedian(b, axis=1) / (np.nanmin(block.also["collective_ms"], axis=1) * 1e-3) / 1e9 * p.factor
    return Partial(block.steps, {"size": size, "busbw": busbw})


def median_kernel(block: Block, p: object) -> Partial:
    """Per step: the median over the ranks (``median``, NaN-aware)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return Partial(block.steps, {"median": np.nanmedian(block.values, axis=1)})


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
        if op not in view.entities("collective_bytes"):  # a producer that measured the bus bandwidth itself
            g = ctx.scan(ScanJob("busbw_gbps", median_kernel, None, entity=op, complete=False))
            rows.append((op, g.steps, g.per_step["median"]))
            continue
        busbw = view.has("busbw_gbps") and op in view.entities("busbw_gbps")
        if not busbw and not view.has("collective_ms"):
            continue
        factor = 0.0
        if not busbw:
            f = bus_factor(ctx, op, max(int(view.ranks().size), 2))
            if f is None:
                continue
            factor = f
        count = view.has("collective_count")
        also = ("collective_count",) * count + (("busbw_gbps",) if busbw else ("collective_ms",))
        part = ctx.scan(ScanJob("collective_bytes", bandwidth_kernel, _Bandwidth(count, busbw, factor), entity=op,
                                complete=False, also=also))
        size, bw = part.per_step["size"], part.per_step["busbw"]
        keep = (size >= floor) & np.isfinite(bw)
        if keep.any():
            rows.append((op, part.steps[keep], bw[keep]))
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


def share_kernel(block: Block, p: object) -> Partial:
    """Per step: the median over the ranks of the communication time's share of the step (``share``)."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no rank measured stays NaN
        return Partial(block.steps, {"share": np.nanmedian(shares(block.values, block.also["step_time_ms"]),
                                                           axis=1)})


def comm_share(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    num = "comm_not_overlapped_ms" if view.has("comm_not_overlapped_ms") else "comm_ms"
    part = ctx.scan(ScanJob(num, share_kernel, None, complete=False, also=("step_time_ms",)))
    steps, share = part.steps, part.per_step["share"]
    judged = np.isfinite(share)
    share = ffill(share)
    level = float(np.nanmedian(share))
    limit = th["communication.comm_share.max"]
    if not level > limit:
        return
    mask = share > limit
    persist = min(ctx.persist("communication.persist_steps", steps), mask.size)
    start = first_run(mask, persist) or 0
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), mask[judged], extra={"share": level, "metric": num})
    out.add(make_finding(
        "HighCommunicationShare", DIM, "", steps, start, steps.size - 1, sev, ev,
        "communication.comm_share", start + persist - 1), (steps, share))


def alltoall_kernel(block: Block, p: object) -> Partial:
    """Per step: the largest rank's all-to-all size over the mean (``imbalance``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        imb = block.values.max(axis=1) / block.values.mean(axis=1)
    return Partial(block.steps, {"imbalance": np.nan_to_num(imb, nan=1.0)})


def cross_cabinet(ctx: Context, data: object, out: Emit) -> None:
    """The share of dispatched tokens whose expert sits in another cabinet than their rank above
    ``communication.cross_cabinet.max_share``: from the step where it first stays above for the persistence window,
    on at least ``communication.persist_frac`` of the steps after it. Traffic that soars late in the run is found
    where it soars (a median over the whole run would wait until half the run had it); a router that starts
    spread and learns its locality is not."""
    th, view = ctx.th, ctx.view
    g = view.by_rank("cross_cabinet_share")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no rank measured stays NaN
        share = np.nanmedian(g.values, axis=0)
    judged = np.isfinite(share)
    share = ffill(share)
    limit = th["communication.cross_cabinet.max_share"]
    mask = share > limit
    persist = min(ctx.persist("communication.persist_steps", g.steps), mask.size)
    start = sustained_onset(mask, persist, th["communication.persist_frac"])
    if start is None:
        return
    level = float(np.nanmedian(share[start:]))
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), mask[judged], extra={"share": level,
                                                                                   "max_share": float(share.max())})
    out.add(make_finding("CrossCabinetTraffic", DIM, "", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.cross_cabinet", start + persist - 1), (g.steps, share))


def alltoall(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    labels = view.rank_labels("alltoall_bytes")
    part = ctx.scan(ScanJob("alltoall_bytes", alltoall_kernel, None, reduce="sum"))
    steps = part.steps
    if labels.size < 2 or steps.size == 0:
        raise NotJudged("fewer than two ranks with all-to-all sizes on the same steps")
    imb = part.per_step["imbalance"]
    limit = th["communication.alltoall.imbalance"]
    mask = imb >= limit
    persist = min(ctx.persist("communication.persist_steps", steps), mask.size)
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["communication.persist_frac"]:
        return
    heavy = _heaviest(ctx, labels, steps[start:])
    sev, ev = evidence.scaled(ctx, severity(float(np.median(imb[start:])), limit, labels.size), mask, extra={
        "size_imbalance": float(np.median(imb[start:])), "heavy_rank": heavy, "ranks": float(labels.size)})
    out.add(make_finding(
        "AllToAllImbalance", DIM, f"rank:{heavy}", steps, start, steps.size - 1, sev, ev,
        "communication.alltoall", start + persist - 1), (steps, imb))


def _heaviest(ctx: Context, labels: np.ndarray, steps: np.ndarray, batch: int = 64) -> int:
    """The rank that sent the most all-to-all bytes over ``steps``, read a batch of ranks at a time."""
    totals = []
    for i in range(0, labels.size, batch):
        g = ctx.view.by_rank("alltoall_bytes", reduce="sum", ranks=labels[i:i + batch])
        cols = np.searchsorted(g.steps, steps)
        totals.append(np.ascontiguousarray(g.values[:, cols]).sum(axis=1))
    return int(labels[int(np.argmax(np.concatenate(totals)))])


def step_time(ctx: Context, data: RankScans, out: Emit) -> None:
    """Step time that rises and stays up (BLOOM-176B: +5% with a normal loss was one slow GPU). The level is a
    trimmed mean, which a stall on every k-th step raises as it does the wall time, not a median, which it
    leaves at the fast steps' time until half the steps stall."""
    th = ctx.th
    part = data.step_time
    assert part is not None  # the detector requires step_time_ms
    steps = part.steps
    need_steps(ctx, steps, "step_time_ms")
    t = ffill(part.per_step["tmax"])  # the step ends when the slowest rank ends
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
    start = first_run(mask, max(w, ctx.persist("communication.persist_steps", steps)))
    if start is None or mask[start:].mean() < th["communication.persist_frac"]:
        return
    level = float(np.median(rise[start:]))
    sev, ev = evidence.scaled(ctx, severity(level, th["communication.step_time.rise"], 2.0), mask[start:], extra={
        "relative_rise": level, "step_time_ms_before": base, "step_time_ms_after": trimmed_mean(t[start:], trim)})
    out.add(make_finding(
        "StepTimeRegression", DIM, "", steps, start, n - 1, sev, ev, "communication.step_time", start + w - 1),
        (steps, t))
