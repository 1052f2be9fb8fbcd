"""Communication-flow detectors: slow rank, slow link, bandwidth utilisation against the link peak,
communication share of step time, MoE all-to-all size imbalance and step-time regression.

Grids are ranks × steps (or links × steps). The slow-rank vote follows msprof-analyze's slow_rank
recipe (per collective instance, Dixon's test for ≤ 100 ranks, 3σ above; the rank with the
*shortest* collective time is the one the others waited for) together with the advisor's spread
rule ((max − min) / mean of per-rank compute time). Thresholds: ``cases/thresholds/communication.ttl``.
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import centred_median, change_point, dixon_low, ffill, first_run, sigma_low

DIM = "communication"


def _complete(grid: Grid) -> Grid:
    """Only the steps where every rank reported (a collective instance all ranks took part in)."""
    keep = np.isfinite(grid.values).all(axis=0)
    return Grid(grid.metric, grid.labels, grid.steps[keep], grid.values[:, keep])


def _votes(ctx: Context, grid: Grid) -> np.ndarray:
    """Per instance (column): the rank index the others waited for (shortest collective time), or −1."""
    n = len(grid.labels)
    if n > ctx.th.int("communication.slow_rank.dixon_max_n"):
        return sigma_low(grid.values, ctx.th["communication.slow_rank.sigma"])
    if n >= 3:
        return dixon_low(grid.values, {int(k): v for k, v in ctx.th.prefixed("dixon995.n").items()})
    # two ranks: no outlier test exists; the shorter one counts when the spread is material
    lo, hi = grid.values.min(axis=0), grid.values.max(axis=0)
    mean = grid.values.mean(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        material = (hi - lo) / mean > ctx.th["communication.slow_rank.spread"]
    return np.where(material, np.argmin(grid.values, axis=0), -1)


def slow_rank(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    ranks = view.ranks()
    if ranks.size < 2:
        raise NotJudged("one rank recorded")
    n = int(ranks.size)
    votes = np.zeros(n)
    instances = 0
    per_step_votes: list[tuple[np.ndarray, np.ndarray]] = []
    ops = view.entities("collective_ms") if view.has("collective_ms") else []
    grids = [_complete(view.by_rank("collective_ms", op)) for op in ops if "send" not in op and "recv" not in op]
    if not grids and view.has("comm_ms"):
        grids = [_complete(view.by_rank("comm_ms"))]
    label_pos = {int(r): i for i, r in enumerate(ranks)}
    for g in grids:
        if len(g.labels) != n or g.steps.size == 0:
            continue
        v = _votes(ctx, g)
        instances += int(g.steps.size)
        hit = v >= 0
        np.add.at(votes, [label_pos[int(g.labels[i])] for i in v[hit]], 1)
        per_step_votes.append((g.steps, v))
    spread, slow_by_time, comp, sign, metric = _advisor_spread(ctx, n)
    vote_frac = votes / max(instances, 1)
    top = int(np.argmax(votes)) if instances else -1
    # with two ranks one of them is always "shorter": only a consistent majority is a vote
    need = th["communication.slow_rank.vote_frac"] if n > 2 else th["communication.slow_rank.vote_frac_two"]
    by_vote = instances > 0 and vote_frac[top] >= need
    by_spread = slow_by_time is not None and spread > th["communication.slow_rank.spread"] and \
        (not by_vote or top == slow_by_time)
    if not (by_vote or by_spread):
        return
    slow = top if by_vote else slow_by_time
    rank = int(ranks[slow])
    steps, indicator = _indicator(per_step_votes, comp, slow, n, sign)
    persist = min(ctx.persist("communication.persist_steps", steps), steps.size)
    # onset: where the slow rank starts to stand out (a mean shift of its indicator), else from the start
    start = change_point(np.nan_to_num(indicator), th["communication.onset_z"])
    excess = 0.0
    if comp is not None and comp.steps.size:
        others = np.median(np.delete(comp.values, slow, axis=0), axis=0)
        excess = float(np.median(sign * (comp.values[slow] - others)))
    sev = max(severity(max(spread, 1e-9), th["communication.slow_rank.spread"], 1.0),
              severity(max(float(vote_frac[top]) if instances else 0.0, 1e-9),
                       th["communication.slow_rank.vote_frac"], 1.0) if by_vote else 0.5)
    out.add(make_finding(
        "SlowRank", DIM, f"rank:{rank}", steps, start, steps.size - 1, sev,
        {"rank": rank, "ranks": n, "spread": spread, "vote_fraction": float(vote_frac[slow]) if instances else 0.0,
         "instances": instances, "excess_ms": excess},
        "communication.slow_rank.vote" if by_vote else f"communication.slow_rank.spread.{metric}",
        start + persist - 1), (steps, indicator))


def _advisor_spread(ctx: Context, n: int) -> tuple[float, int | None, Grid | None, float, str]:
    """msprof-analyze advisor's rule: (max − min) of the per-rank computing, free or communication time over
    the mean step time (the metric's own mean where no step time is recorded).

    Returns (spread, slow rank index, the grid, +1 when the slow rank has the most of it (computing, free)
    or −1 when it has the least (communication: the others wait for it), metric) for the metric with the
    largest spread. A rank counts only when it is that extreme on ``communication.persist_frac`` of the
    steps: jitter on a shared host moves the extreme from rank to rank, a straggler keeps it."""
    view, th = ctx.view, ctx.th
    best: tuple[float, int | None, Grid | None, float, str] = (0.0, None, None, 1.0, "")
    comm = "comm_ms" if view.has("comm_ms") else None
    compute = "compute_ms" if view.has("compute_ms") else "step_time_ms"
    step_mean = None
    if compute != "step_time_ms" and view.has("step_time_ms"):
        step = _complete(view.by_rank("step_time_ms"))
        if step.steps.size:
            step_mean = float(np.mean(np.median(step.values, axis=1)))
    for metric, sign in ((compute, 1.0), ("free_ms", 1.0), (comm, -1.0)):
        if not metric or not view.has(metric):
            continue
        grid = _complete(view.by_rank(metric))
        if len(grid.labels) != n or grid.steps.size == 0:
            continue
        per_rank = np.median(grid.values, axis=1)
        scale = step_mean if step_mean and metric != "step_time_ms" else abs(float(per_rank.mean()))
        spread = float((per_rank.max() - per_rank.min()) / max(scale, 1e-12))
        slow = int(np.argmax(per_rank)) if sign > 0 else int(np.argmin(per_rank))
        extreme = np.argmax(sign * grid.values, axis=0)
        if spread > best[0] and float(np.mean(extreme == slow)) >= th["communication.persist_frac"]:
            best = (spread, slow, grid, sign, metric)
    return best


def _indicator(
    per_step_votes, comp: Grid | None, slow: int, n: int, sign: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """A per-step series of how much the slow rank stands out: its vote share, else its excess time."""
    if per_step_votes:
        steps = np.unique(np.concatenate([s for s, _ in per_step_votes]))
        hit = np.zeros(steps.size)
        cnt = np.zeros(steps.size)
        for s, v in per_step_votes:
            pos = np.searchsorted(steps, s)
            np.add.at(hit, pos, (v == slow).astype(float))
            np.add.at(cnt, pos, 1.0)
        return steps, hit / np.maximum(cnt, 1)
    assert comp is not None
    others = np.median(np.delete(comp.values, slow, axis=0), axis=0) if n > 1 else comp.values[slow]
    return comp.steps, sign * (comp.values[slow] - others) / np.maximum(np.abs(others), 1e-12)


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
    mask = ffill(grid.values[slow]) < th["communication.slow_link.ratio"] * avg
    start = first_run(mask, min(ctx.persist("communication.persist_steps", grid.steps), mask.size)) or 0
    out.add(make_finding(
        "SlowLink", DIM, str(grid.labels[slow]), grid.steps, start, grid.steps.size - 1,
        severity(1 / max(ratio, 1e-9), 1 / th["communication.slow_link.ratio"], 100.0),
        {"bandwidth_gbps": float(per_link[slow]), "average_gbps": avg, "ratio_to_average": ratio,
         "links": len(grid.labels)}, "communication.slow_link", start), (grid.steps, ffill(grid.values[slow])))


def bus_factor(ctx: Context, op: str, n: int) -> float | None:
    """nccl-tests bus-bandwidth factor of a collective kind for ``n`` ranks (None for an unknown kind)."""
    key = op.lower().replace("_", "").replace("-", "")
    for name in ("allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "reduce"):
        if key.startswith(name) or name in key:
            coef, const = ctx.th[f"busbw.{name}.coef"], ctx.th[f"busbw.{name}.const"]
            return coef * (n - 1) / n + const
    return None


def bandwidth(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    kind = str(ctx.meta.get("interconnect") or ctx.meta.get("link_kind") or "").lower()
    peak = th.get(f"link_peak_gbps.{kind}") if kind else None
    if peak is None:
        raise NotJudged("the link kind (run.json 'interconnect') is unknown or has no peak bandwidth in the "
                        "knowledge base")
    n = int(view.ranks().size)
    rows: list[tuple[str, np.ndarray, np.ndarray]] = []
    if view.has("busbw_gbps"):
        g = view.by_entity("busbw_gbps")
        rows = [(str(op), g.steps, g.values[i]) for i, op in enumerate(g.labels)]
    elif view.has("collective_bytes") and view.has("collective_ms"):
        for op in view.entities("collective_bytes"):
            f = bus_factor(ctx, op, max(n, 2))
            b, t = view.by_rank("collective_bytes", op), view.by_rank("collective_ms", op)
            if f is None or b.empty or t.empty or b.values.shape != t.values.shape:
                continue
            big = np.nanmedian(b.values, axis=0) >= th["communication.bandwidth.min_bytes"]
            # the last-arriving rank's time is the transfer itself (TraceLens): the minimum over ranks
            with np.errstate(invalid="ignore", divide="ignore"):
                busbw = np.nanmedian(b.values, axis=0) / (np.nanmin(t.values, axis=0) * 1e-3) / 1e9 * f
            rows.append((op, b.steps[big], busbw[big]))
    if not rows:
        raise NotJudged("no collective large enough to measure its bandwidth")
    util = [(op, s, v / peak) for op, s, v in rows if v.size and np.isfinite(v).any()]
    if not util:
        return
    op, s, u = min(util, key=lambda r: float(np.nanmedian(r[2])))
    level = float(np.nanmedian(u))
    if level >= th["communication.bandwidth.util_low"]:
        return
    out.add(make_finding(
        "LowBandwidthUtilization", DIM, op, s, 0, s.size - 1,
        severity(1 / max(level, 1e-6), 1 / th["communication.bandwidth.util_low"], 20.0),
        {"utilisation": level, "busbw_gbps": float(np.nanmedian(u) * peak), "peak_gbps": float(peak)},
        "communication.bandwidth", ctx.persist("communication.persist_steps", s) - 1), (s, u))


def comm_share(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    num = "comm_not_overlapped_ms" if view.has("comm_not_overlapped_ms") else "comm_ms"
    c, t = view.by_rank(num), view.by_rank("step_time_ms")
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.nanmedian(c.values / t.like(c), axis=0)
    share = ffill(share)
    level = float(np.nanmedian(share))
    limit = th["communication.comm_share.max"]
    if not level > limit:
        return
    mask = share > limit
    persist = min(ctx.persist("communication.persist_steps", c.steps), mask.size)
    start = first_run(mask, persist) or 0
    out.add(make_finding(
        "HighCommunicationShare", DIM, "", c.steps, start, c.steps.size - 1, severity(level, limit, 1.0),
        {"share": level, "metric": num},
        "communication.comm_share", start + persist - 1), (c.steps, share))


def alltoall(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    g = _complete(view.by_rank("alltoall_bytes", reduce="sum"))
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
    out.add(make_finding(
        "AllToAllImbalance", DIM, f"rank:{heavy}", g.steps, start, g.steps.size - 1,
        severity(float(np.median(imb[start:])), limit, len(g.labels)),
        {"size_imbalance": float(np.median(imb[start:])), "heavy_rank": heavy},
        "communication.alltoall", start + persist - 1), (g.steps, imb))


def step_time(ctx: Context, data: object, out: Emit) -> None:
    """Step time that rises and stays up (BLOOM-176B: +5% with a normal loss was one slow GPU)."""
    th, view = ctx.th, ctx.view
    g = view.by_rank("step_time_ms")
    need_steps(ctx, g.steps, "step_time_ms")
    t = ffill(np.nanmax(g.values, axis=0))  # the step ends when the slowest rank ends
    n = t.size
    skip = int(n * th["communication.step_time.skip_frac"])
    w = max(3, int(n * th["communication.step_time.window_frac"]))
    if n - skip < 3 * w:
        return
    trend = centred_median(t, w)
    base = float(np.median(t[skip: skip + w]))
    rise = trend / max(base, 1e-12) - 1
    mask = rise >= th["communication.step_time.rise"]
    mask[: skip + w] = False
    start = first_run(mask, max(w, ctx.persist("communication.persist_steps", g.steps)))
    if start is None or mask[start:].mean() < th["communication.persist_frac"]:
        return
    level = float(np.median(rise[start:]))
    out.add(make_finding(
        "StepTimeRegression", DIM, "", g.steps, start, n - 1, severity(level, th["communication.step_time.rise"], 2.0),
        {"relative_rise": level, "step_time_ms_before": base, "step_time_ms_after": float(np.median(t[start:]))},
        "communication.step_time", start + w - 1), (g.steps, t))
