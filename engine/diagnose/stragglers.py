"""Stragglers by group and stage: the slow rank (SlowRank), the slow pipeline stage (SlowPipelineStage), compute
imbalance with no single slow rank (ComputeImbalance) and per-step compute that varies across the data-parallel
replicas, every stage of a replica alike (ReplicaComputeVariation: uneven data).

Which of the three a slowdown is — a stage, a rank, the data — is decided on the parallel grid
(``parallel_grid``): the share of the slowdown that fixing the slowest workers, one stage, or the variation across
replicas would take back (ByteDance's M_W and M_S). A stage's ranks that are all slow are the stage's finding, not
a straggler's: a rank the vote names inside a slow stage, no slower than its stage peers, and whose fix would take
back less than ``communication.slow_rank.worker_share`` of the slowdown is not reported as a slow rank.

Ranks are compared only within their groups (``groups``: the members of the same communicator, else the ranks of
the same pipeline stage). The slow-rank vote follows msprof-analyze's slow_rank recipe per collective instance
(Dixon's test for ≤ 100 members, 3σ above; the member with the *shortest* collective time is the one the others
waited for) and the advisor's spread rule ((max − min) of per-rank compute, free or communication time over the
mean step time). With two members there is no outlier test: the vote then needs agreeing steps (its evidence
weight at least ``diagnose.evidence.likely``), and the spread counts for compute time only. A slow rank whose
compute is the outlier of its group (``communication.slow_rank.compute_ratio``) says so (``compute_outlier``),
whether or not the step time regressed. Every finding carries its evidence (``evidence``).
Thresholds: ``cases/thresholds/communication.ttl``.
"""

from __future__ import annotations

import math

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.groups import Layout, layout, member_groups
from debugtune.engine.diagnose.parallel_grid import Shares, WorkerGrid, bubble_fraction, shares, worker_grid
from debugtune.engine.diagnose.registry import Emit, NotJudged
from debugtune.engine.diagnose.stats import change_point, dixon_low, sigma_low

DIM = "communication"
_P2P = ("send", "recv", "barrier")


class GridData:
    """The parallel grid of the run's per-worker compute and its what-if shares (None where not measurable)."""

    def __init__(self, ctx: Context):
        self.layout = layout(ctx.meta, ctx.view.ranks().tolist())
        self.grid: WorkerGrid | None = None
        self.shares: Shares | None = None
        if not ctx.view.has("compute_ms"):
            return
        g = complete(ctx.view.by_rank("compute_ms"))
        if len(g.labels) >= 2 and g.steps.size:
            self.grid = worker_grid(g, self.layout, ctx.meta)
            self.shares = shares(self.grid, ctx.th["communication.grid.top_frac"])

    def stage_explains(self, ctx: Context, rank: int) -> bool:
        """Whether ``rank``'s stage, not the rank, holds the slowdown: the rank lies in the stage whose fix takes
        back ``communication.stage.share`` of it while fixing the slowest workers takes back less than
        ``communication.slow_rank.worker_share``."""
        sh, th = self.shares, ctx.th
        if sh is None or sh.stage is None or self.layout.stage.get(rank) != sh.stage:
            return False
        return sh.stage_share >= th["communication.stage.share"] and not \
            sh.worker_share >= th["communication.slow_rank.worker_share"]


def grid_data(ctx: Context) -> GridData:
    return GridData(ctx)


def complete(grid: Grid) -> Grid:
    """Only the steps where every rank of the grid reported (a collective instance all of them took part in)."""
    keep = np.isfinite(grid.values).all(axis=0)
    return Grid(grid.metric, grid.labels, grid.steps[keep], grid.values[:, keep])


def _votes(ctx: Context, values: np.ndarray) -> np.ndarray:
    """Per instance (column): the row the others waited for (shortest collective time), or −1."""
    n = values.shape[0]
    if n > ctx.th.as_int("communication.slow_rank.dixon_max_n"):
        return sigma_low(values, ctx.th["communication.slow_rank.sigma"])
    if n >= 3:
        return dixon_low(values, {int(k): v for k, v in ctx.th.prefixed("dixon995.n").items()})
    lo, hi = values.min(axis=0), values.max(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        material = (hi - lo) / values.mean(axis=0) > ctx.th["communication.slow_rank.spread"]
    return np.where(material, np.argmin(values, axis=0), -1)


class _Tally:
    """Votes per rank and step, and in how many instances each rank took part (ranks × steps)."""

    def __init__(self, ranks: np.ndarray, steps: np.ndarray):
        self.ranks, self.steps = ranks, steps
        self.pos = {int(r): i for i, r in enumerate(ranks)}
        self.votes = np.zeros((ranks.size, steps.size))
        self.seen = np.zeros((ranks.size, steps.size))
        self.smallest = np.full(ranks.size, np.iinfo(np.int64).max)

    def add(self, members: list[int], steps: np.ndarray, winner: np.ndarray) -> None:
        rows = np.array([self.pos[m] for m in members])
        cols = np.searchsorted(self.steps, steps)
        self.seen[np.ix_(rows, cols)] += 1
        hit = winner >= 0
        np.add.at(self.votes, (rows[winner[hit]], cols[hit]), 1)
        self.smallest[rows] = np.minimum(self.smallest[rows], len(members))

    @property
    def instances(self) -> int:
        return int(self.seen.max(axis=0).sum()) if self.seen.size else 0


def _tally(ctx: Context, lay: Layout, ranks: np.ndarray) -> _Tally | None:
    view = ctx.view
    ops = [op for op in view.entities("collective_ms") if not any(k in op for k in _P2P)] \
        if view.has("collective_ms") else []
    grids = [(op, complete(view.by_rank("collective_ms", op))) for op in ops]
    if not grids and view.has("comm_ms"):
        grids = [("", complete(view.by_rank("comm_ms")))]
    grids = [(op, g) for op, g in grids if g.steps.size and len(g.labels) >= 2]
    if not grids:
        return None
    t = _Tally(ranks, np.unique(np.concatenate([g.steps for _, g in grids])))
    for op, g in grids:
        for idx in member_groups(op, g.labels, lay):
            if idx.size >= 2:
                t.add([int(g.labels[i]) for i in idx], g.steps, _votes(ctx, g.values[idx]))
    return t


def _spread(ctx: Context, lay: Layout, ranks: np.ndarray) -> tuple[float, int | None, Grid | None, float, str, list]:
    """msprof-analyze advisor's rule within each group: (max − min) of the per-rank computing, free or
    communication time over the mean step time (the metric's own mean where no step time is recorded).

    Returns (spread, slow rank, the metric's grid, +1 when the slow rank has the most of it (computing, free) or
    −1 when it has the least (communication: the others wait for it), metric, the group's ranks) for the largest
    spread. A rank counts only when it is that extreme on ``communication.persist_frac`` of the steps: jitter on
    a shared host moves the extreme from rank to rank, a straggler keeps it."""
    view, th = ctx.view, ctx.th
    best: tuple[float, int | None, Grid | None, float, str, list] = (0.0, None, None, 1.0, "", [])
    compute = "compute_ms" if view.has("compute_ms") else "step_time_ms"
    step_mean = None
    if compute != "step_time_ms" and view.has("step_time_ms"):
        step = complete(view.by_rank("step_time_ms"))
        if step.steps.size:
            step_mean = float(np.mean(np.median(step.values, axis=1)))
    for metric, sign in ((compute, 1.0), ("free_ms", 1.0), ("comm_ms", -1.0)):
        if not view.has(metric):
            continue
        full = complete(view.by_rank(metric))
        if full.steps.size == 0:
            continue
        for members in lay.split(int(r) for r in full.labels):
            # with two members, which one waits for the other has benign causes (logging, rendezvous on rank 0):
            # only a rank that computes longer is taken as slow
            if len(members) < 2 or (len(members) == 2 and metric != compute):
                continue
            grid = full.select(np.isin(np.array(full.labels), members))
            per_rank = np.median(grid.values, axis=1)
            scale = step_mean if step_mean and metric != "step_time_ms" else abs(float(per_rank.mean()))
            spread = float((per_rank.max() - per_rank.min()) / max(scale, 1e-12))
            slow = int(np.argmax(per_rank)) if sign > 0 else int(np.argmin(per_rank))
            extreme = np.argmax(sign * grid.values, axis=0)
            if spread > best[0] and float(np.mean(extreme == slow)) >= th["communication.persist_frac"]:
                best = (spread, int(grid.labels[slow]), grid, sign, metric, members)
    return best


def slow_rank(ctx: Context, data: GridData, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    ranks = view.ranks()
    if ranks.size < 2:
        raise NotJudged("one rank recorded")
    lay = layout(ctx.meta, ranks.tolist())
    if lay.stage and all(len(m) < 2 for m in lay.stages.values()):
        raise NotJudged("every pipeline stage has one rank: ranks of different stages do not run the same work")
    t = _tally(ctx, lay, ranks)
    spread, slow_by_time, grid, sign, metric, spread_group = _spread(ctx, lay, ranks)
    by_vote, top = False, -1
    if t is not None and t.instances:
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.nan_to_num(t.votes.sum(axis=1) / t.seen.sum(axis=1))
        top = int(np.argmax(frac))
        pair = t.smallest[top] <= 2
        need = th["communication.slow_rank.vote_frac_two"] if pair else th["communication.slow_rank.vote_frac"]
        by_vote = frac[top] >= need
        if by_vote and pair:  # two members: no outlier test, the vote must hold over several steps
            took = t.seen[top] > 0
            won = t.votes[top][took] >= 0.5 * t.seen[top][took]
            by_vote = evidence.weight(ctx, int(won.sum()), int(won.size)) >= th["diagnose.evidence.likely"]
    top_rank = int(ranks[top]) if top >= 0 else None
    by_spread = slow_by_time is not None and spread > th["communication.slow_rank.spread"] and \
        (not by_vote or top_rank == slow_by_time)
    if not (by_vote or by_spread):
        return
    rank = top_rank if by_vote else slow_by_time
    assert rank is not None
    members = _members_of(lay, ranks, rank)
    if by_vote:
        assert t is not None  # a vote needs the tally
        i = t.pos[rank]
        took = t.seen[i] > 0
        steps = t.steps[took]
        indicator = t.votes[i][took] / t.seen[i][took]
        hits = indicator >= 0.5
        vote = float(t.votes[i].sum() / max(t.seen[i].sum(), 1))
    else:
        assert grid is not None
        j = list(grid.labels).index(rank)
        others = np.median(np.delete(grid.values, j, axis=0), axis=0)
        steps = grid.steps
        indicator = sign * (grid.values[j] - others) / np.maximum(np.abs(others), 1e-12)
        # a step shows the slow rank when it stands out from the others' median by the advisor's spread
        scale = ctx.view.by_rank("step_time_ms").like(grid)[j] if ctx.view.has("step_time_ms") else others
        with np.errstate(invalid="ignore", divide="ignore"):
            excess = np.nan_to_num(sign * (grid.values[j] - others) / np.abs(scale))
        hits = excess > th["communication.slow_rank.spread"]
        vote = float(t.votes[t.pos[rank]].sum() / max(t.seen[t.pos[rank]].sum(), 1)) if t is not None else 0.0
    start = change_point(np.nan_to_num(indicator), th["communication.onset_z"])
    persist = min(ctx.persist("communication.persist_steps", steps), steps.size)
    ratio, excess, slower = _compute_outlier(ctx, rank, members)
    outlier = ratio is not None and ratio >= th["communication.slow_rank.compute_ratio"]
    if not outlier and data.stage_explains(ctx, rank):
        return  # all of its stage is slow and it no slower than its peers: SlowPipelineStage's finding
    if outlier:
        hits = hits | np.isin(steps, slower)  # a step where it computed that much longer shows it too
    if not hits.any():
        return  # no single step where it stood out: the medians' spread alone is not a slow rank
    base = max(severity(max(spread, 1e-9), th["communication.slow_rank.spread"], 1.0),
               severity(max(vote, 1e-9), th["communication.slow_rank.vote_frac"], 1.0) if by_vote else 0.5)
    extra: dict[str, float | str | bool] = {
        "rank": rank, "ranks": float(len(members)), "group": ",".join(map(str, members)), "spread": spread,
        "vote_fraction": vote, "excess_ms": excess, "whole_window": bool(start == 0)}
    if ratio is not None:
        extra["compute_ratio"] = ratio
        extra["compute_outlier"] = bool(ratio >= th["communication.slow_rank.compute_ratio"])
    if lay.stage:
        extra["stage"] = float(lay.stage.get(rank, -1))
    extra.update(_grid_evidence(data))
    sev, ev = evidence.scaled(ctx, base, hits, instances=t.instances if t is not None else 0, extra=extra)
    out.add(make_finding("SlowRank", DIM, f"rank:{rank}", steps, start, steps.size - 1, sev, ev,
                         "communication.slow_rank.vote" if by_vote else f"communication.slow_rank.spread.{metric}",
                         start + persist - 1), (steps, indicator))


def _grid_evidence(data: GridData) -> dict[str, float | str]:
    """The what-if shares as evidence (``parallel_grid``), "not measured" where the run is balanced."""
    return data.shares.evidence() if data.shares is not None else {}


def _members_of(lay: Layout, ranks: np.ndarray, rank: int) -> list[int]:
    return next((g for g in lay.split(int(r) for r in ranks) if rank in g), [int(r) for r in ranks])


def _compute_outlier(ctx: Context, rank: int, members: list[int]) -> tuple[float | None, float, np.ndarray]:
    """(the rank's median compute / the median of the other members', its median excess in ms, the steps where
    it computed ``communication.slow_rank.compute_ratio`` times the others' median or more)."""
    view = ctx.view
    none = (None, 0.0, np.zeros(0, dtype=np.int64))
    if not view.has("compute_ms") or len(members) < 2:
        return none
    g = complete(view.by_rank("compute_ms"))
    g = g.select(np.isin(np.array(g.labels), members))
    if rank not in g.labels or len(g.labels) < 2 or g.steps.size == 0:
        return none
    j = list(g.labels).index(rank)
    others = np.median(np.delete(g.values, j, axis=0), axis=0)
    mine = g.values[j]
    ratio = float(np.median(mine) / max(float(np.median(others)), 1e-12))
    slower = g.steps[mine >= ctx.th["communication.slow_rank.compute_ratio"] * others]
    return ratio, float(np.median(mine - others)), slower


def slow_stage(ctx: Context, data: GridData, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    lay = data.layout
    stages = lay.stages
    if len(stages) < 2:
        raise NotJudged("no pipeline stages known (run.json layout, parallel sizes, or process groups with "
                        "point-to-point peers)")
    g = complete(view.by_rank("compute_ms"))
    if g.steps.size == 0:
        raise NotJudged("no step with compute_ms on every rank")
    labels = np.array(g.labels)
    names = sorted(s for s, members in stages.items() if np.isin(members, labels).any())
    # a stage is as fast as its fastest rank: one straggler does not make its stage slow
    per = np.array([g.values[np.isin(labels, stages[s])].min(axis=0) for s in names])
    if len(names) < 2:
        raise NotJudged("compute_ms recorded for one pipeline stage only")
    others = np.array([np.median(np.delete(per, k, axis=0), axis=0) for k in range(len(names))])
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = per / np.maximum(others, 1e-12)
    k = int(np.argmax(np.median(ratio, axis=1)))
    level = float(np.median(ratio[k]))
    limit = th["communication.stage.ratio"]
    hits = (ratio[k] >= limit) & (np.argmax(ratio, axis=0) == k)
    if level < limit or hits.mean() < th["communication.persist_frac"]:
        return
    sh = data.shares
    if sh is not None and math.isfinite(sh.stage_share) and (
            sh.stage != names[k] or sh.stage_share < th["communication.stage.share"]):
        return  # the stage computes longer, but fixing it would not take back the slowdown
    members = sorted(int(r) for r in stages[names[k]])
    extra: dict[str, float | str] = {
        "stage": float(names[k]), "ranks": ",".join(map(str, members)), "stage_ratio": level,
        "stages": float(len(names)), "layout": lay.source, **_grid_evidence(data)}
    m = _microbatches(ctx, members)
    if m:  # what re-balancing buys: a 1F1B step is (m + p − 1) slots of the slowest stage (Narayanan et al. 2021)
        extra.update({"microbatches": float(m), "bubble_fraction": bubble_fraction(len(names), m),
                      "rebalance_speedup": float(np.median(per.max(axis=0) / np.maximum(per.mean(axis=0), 1e-12)))})
    sev, ev = evidence.scaled(ctx, severity(level, limit, 3.0), hits, extra=extra)
    start = int(np.argmax(hits))
    out.add(make_finding("SlowPipelineStage", DIM, f"stage:{names[k]}", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.slow_stage", start), (g.steps, ratio[k]))


def _microbatches(ctx: Context, members: list[int]) -> int:
    """Micro-batches per step (``microbatch_count``, the median over the stage's ranks and steps; 0 if unknown)."""
    if not ctx.view.has("microbatch_count"):
        return 0
    g = ctx.view.by_rank("microbatch_count")
    v = g.values[np.isin(np.array(g.labels), members)]
    v = v[np.isfinite(v)]
    return int(np.median(v)) if v.size else 0


def replica_variation(ctx: Context, data: GridData, out: Emit) -> None:
    """Per-step compute that varies across the data-parallel replicas, every stage of a replica alike, with a
    different replica slowest from step to step and no worker whose fix would take the slowdown back: uneven data
    (sequence lengths, padding), which a micro-batch carries through every stage of its replica."""
    th = ctx.th
    g, sh = data.grid, data.shares
    if g is None or sh is None:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    if len(g.stages) < 2:
        raise NotJudged("one pipeline stage: a replica's data cannot be told from its rank (see ComputeImbalance)")
    if len(g.replicas) < 3:
        raise NotJudged(f"{len(g.replicas)} data-parallel replicas per stage; at least 3 are needed")
    if g.steps.size < th.as_int("communication.compute_imbalance.min_steps"):
        raise NotJudged(f"{g.steps.size} steps of compute_ms on every rank")
    if not math.isfinite(sh.replica_share) or not math.isfinite(sh.coherence):
        return  # balanced: nothing to take back
    per = g.replica_load()
    cv = per.std(axis=0) / np.maximum(per.mean(axis=0), 1e-12)
    limit = th["communication.compute_imbalance.cv"]
    level = float(np.median(cv))
    worker = sh.worker_share if math.isfinite(sh.worker_share) else 0.0
    if level < limit or sh.replica_share < th["communication.replica.share"] or \
            sh.coherence < th["communication.replica.coherence"] or \
            worker >= th["communication.slow_rank.worker_share"] or \
            sh.slowest_replica_share >= th["communication.persist_frac"]:
        return
    hits = cv >= limit
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), hits, extra={
        "replica_cv": level, "slowest_replica_share": sh.slowest_replica_share, "replicas": float(len(g.replicas)),
        "stages": float(len(g.stages)), **_grid_evidence(data)})
    start = int(np.argmax(hits))
    out.add(make_finding("ReplicaComputeVariation", DIM, "", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.replica_variation", start), (g.steps, cv))


def compute_imbalance(ctx: Context, data: object, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    g = complete(view.by_rank("compute_ms"))
    if len(g.labels) < 2:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    if g.steps.size < th.as_int("communication.compute_imbalance.min_steps"):
        raise NotJudged(f"{g.steps.size} steps of compute_ms on every rank, at least "
                        f"{th.as_int('communication.compute_imbalance.min_steps')} are needed")
    lay = layout(ctx.meta, [int(r) for r in g.labels])
    labels = np.array(g.labels)
    cvs, tops = [], []
    for members in lay.split(int(r) for r in g.labels):
        if len(members) < 2:
            continue
        v = g.values[np.isin(labels, members)]
        with np.errstate(invalid="ignore", divide="ignore"):
            cvs.append(v.std(axis=0) / np.maximum(v.mean(axis=0), 1e-12))
        slowest = np.argmax(v, axis=0)
        tops.append(np.bincount(slowest, minlength=len(members)).max() / slowest.size)
    if not cvs:
        raise NotJudged("no group of two or more ranks")
    k = int(np.argmax([np.median(c) for c in cvs]))
    cv, top_share = cvs[k], float(tops[k])
    limit = th["communication.compute_imbalance.cv"]
    level = float(np.median(cv))
    if level < limit or top_share >= th["communication.persist_frac"]:
        return  # balanced, or one rank is the slow one (SlowRank's finding)
    hits = cv >= limit
    sev, ev = evidence.scaled(ctx, severity(level, limit, 1.0), hits, extra={
        "compute_cv": level, "slowest_rank_share": top_share, "ranks": float(len(g.labels))})
    start = int(np.argmax(hits))
    out.add(make_finding("ComputeImbalance", DIM, "", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.compute_imbalance", start), (g.steps, cv))


def slow_compute(ctx: Context, data: GridData, out: Emit) -> None:
    """A rank whose own compute time is the outlier of its group (``communication.slow_rank.compute_ratio`` times
    the median of the others) on ``communication.persist_frac`` of the steps: the rank is slow itself, not late
    because it waited for its input or its host (those make a SlowRank without a SlowCompute)."""
    th, view = ctx.th, ctx.view
    g = complete(view.by_rank("compute_ms"))
    if len(g.labels) < 2 or g.steps.size == 0:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    lay = layout(ctx.meta, [int(r) for r in g.labels])
    labels = np.array(g.labels)
    limit = th["communication.slow_rank.compute_ratio"]
    best: tuple[float, int, np.ndarray, np.ndarray, list[int]] | None = None
    for members in lay.split(int(r) for r in g.labels):
        if len(members) < 2:
            continue
        v = g.values[np.isin(labels, members)]
        for j, rank in enumerate(members):
            others = np.median(np.delete(v, j, axis=0), axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = v[j] / np.maximum(others, 1e-12)
            level = float(np.median(ratio))
            if best is None or level > best[0]:
                best = (level, rank, ratio, ratio >= limit, members)
    if best is None:
        raise NotJudged("no group of two or more ranks")
    level, rank, ratio, hits, members = best
    if level < limit or hits.mean() < th["communication.persist_frac"]:
        return
    if len(members) == 2 and evidence.weight(ctx, int(hits.sum()), hits.size) < th["diagnose.evidence.likely"]:
        return  # one of two ranks on a step or two: not enough to tell which is the odd one
    start = change_point(np.nan_to_num(ratio), th["communication.onset_z"])
    sev, ev = evidence.scaled(ctx, severity(level, limit, 10.0), hits, extra={
        "rank": rank, "compute_ratio": level, "group": ",".join(map(str, members)), "ranks": float(len(members)),
        "whole_window": bool(start == 0), **_grid_evidence(data)})
    out.add(make_finding("SlowCompute", DIM, f"rank:{rank}", g.steps, start, g.steps.size - 1, sev, ev,
                         "communication.slow_compute", start), (g.steps, ratio))
