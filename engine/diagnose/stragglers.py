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
from dataclasses import dataclass

import numpy as np

from debugtune.engine.diagnose import evidence
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.crossrank import MIN, peer_median
from debugtune.engine.diagnose.groups import Layout, layout
from debugtune.engine.diagnose.parallel_grid import bubble_fraction
from debugtune.engine.diagnose.rankscans import RankScan, RankScans, evidence_of
from debugtune.engine.diagnose.registry import Emit, NotJudged
from debugtune.engine.diagnose.stats import change_point

DIM = "communication"
_P2P = ("send", "recv", "barrier")


class _Tally:
    """Votes per rank over the collective instances, and the per-step row of any one rank."""

    def __init__(self, ranks: np.ndarray, steps: np.ndarray):
        self.ranks, self.steps = ranks, steps
        self.pos = {int(r): i for i, r in enumerate(ranks)}
        self.votes = np.zeros(ranks.size)
        self.seen = np.zeros(ranks.size)
        self.smallest = np.full(ranks.size, np.iinfo(np.int64).max)
        self._groups: list[tuple[frozenset[int], np.ndarray, np.ndarray]] = []

    def add(self, members: np.ndarray, steps: np.ndarray, winner: np.ndarray) -> None:
        """One group's instances at ``steps``: ``winner`` the rank each waited for (−1: none)."""
        rows = np.array([self.pos[int(m)] for m in members])
        self.seen[rows] += steps.size
        won = winner[winner >= 0]
        np.add.at(self.votes, np.array([self.pos[int(w)] for w in won], dtype=np.int64), 1)
        self.smallest[rows] = np.minimum(self.smallest[rows], len(members))
        self._groups.append((frozenset(int(m) for m in members), np.searchsorted(self.steps, steps), winner))

    def row(self, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """(votes, instances taken part in) of ``rank`` per step."""
        votes, seen = np.zeros(self.steps.size), np.zeros(self.steps.size)
        for members, cols, winner in self._groups:
            if rank in members:
                seen[cols] += 1
                np.add.at(votes, cols[winner == rank], 1)
        return votes, seen

    @property
    def instances(self) -> int:
        """Per step the most instances any one rank took part in, summed over the steps."""
        if not self._groups:
            return 0
        signature: dict[int, list[int]] = {}
        for k, (members, _, _) in enumerate(self._groups):
            for m in members:
                signature.setdefault(m, []).append(k)
        best = np.zeros(self.steps.size)
        for groups in {tuple(g) for g in signature.values()}:
            count = np.zeros(self.steps.size)
            for k in groups:
                count[self._groups[k][1]] += 1
            best = np.maximum(best, count)
        return int(best.sum())


def _tally(ctx: Context, data: RankScans, lay: Layout, ranks: np.ndarray) -> _Tally | None:
    view = ctx.view
    ops = [op for op in view.entities("collective_ms") if not any(k in op for k in _P2P)] \
        if view.has("collective_ms") else []
    scans = [data.votes("collective_ms", op, lay) for op in ops]
    if not ops and view.has("comm_ms"):
        scans = [data.votes("comm_ms", None, lay)]
    done = [s for s in scans if s is not None and s[0].steps.size and s[1]]
    if not done:
        return None
    t = _Tally(ranks, np.unique(np.concatenate([part.steps for part, _ in done])))
    for part, groups in done:
        for gi, members in enumerate(groups):
            t.add(members, part.steps, part.per_step[f"win{gi}"])
    return t


@dataclass(frozen=True)
class _Spread:
    """The advisor's spread within a group: its size, the slow rank, the metric's scan and group, the sign."""

    spread: float = 0.0
    rank: int | None = None
    scan: RankScan | None = None
    group: int = -1
    sign: float = 1.0
    metric: str = ""
    members: tuple[int, ...] = ()


def _spread(ctx: Context, data: RankScans, lay: Layout) -> _Spread:
    """msprof-analyze advisor's rule within each group: (max − min) of the per-rank computing, free or
    communication time over the mean step time (the metric's own mean where no step time is recorded); the slow
    rank has the most of it (computing, free) or the least (communication: the others wait for it). A rank counts
    only when it is that extreme on ``communication.persist_frac`` of the steps: jitter on a shared host moves the
    extreme from rank to rank, a straggler keeps it."""
    view, th = ctx.view, ctx.th
    best = _Spread()
    compute = "compute_ms" if view.has("compute_ms") else "step_time_ms"
    step_mean = None
    if compute != "step_time_ms" and data.step_time is not None and data.step_time.chunk_ids.size:
        step_mean = float(np.mean(np.median(data.step_time.per_chunk["med"], axis=0)))
    for metric, sign in ((compute, 1.0), ("free_ms", 1.0), ("comm_ms", -1.0)):
        scan = data.rank_scan(metric)
        if scan is None or scan.steps.size == 0:
            continue
        for members in lay.split(int(r) for r in scan.labels):
            # with two members, which one waits for the other has benign causes (logging, rendezvous on rank 0):
            # only a rank that computes longer is taken as slow
            if len(members) < 2 or (len(members) == 2 and metric != compute):
                continue
            gi = scan.groups.index(members)
            assert gi is not None
            per_rank = scan.levels(scan.groups.cols[gi])
            scale = step_mean if step_mean and metric != "step_time_ms" else abs(float(per_rank.mean()))
            spread = float((per_rank.max() - per_rank.min()) / max(scale, 1e-12))
            slow = int(np.argmax(per_rank)) if sign > 0 else int(np.argmin(per_rank))
            extreme = scan.part.per_step[f"argmax{gi}" if sign > 0 else f"argmin{gi}"]
            if spread > best.spread and float(np.mean(extreme == slow)) >= th["communication.persist_frac"]:
                best = _Spread(spread, int(scan.labels[scan.groups.cols[gi][slow]]), scan, gi, sign, metric,
                               tuple(members))
    return best


def slow_rank(ctx: Context, data: RankScans, out: Emit) -> None:
    th, view = ctx.th, ctx.view
    ranks = view.ranks()
    if ranks.size < 2:
        raise NotJudged("one rank recorded")
    lay = layout(ctx.meta, ranks.tolist())
    if lay.stage and all(len(m) < 2 for m in lay.stages.values()):
        raise NotJudged("every pipeline stage has one rank: ranks of different stages do not run the same work")
    t = _tally(ctx, data, lay, ranks)
    sp = _spread(ctx, data, lay)
    by_vote, top = False, -1
    if t is not None and t.instances:
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.nan_to_num(t.votes / t.seen)
        top = int(np.argmax(frac))
        pair = t.smallest[top] <= 2
        need = th["communication.slow_rank.vote_frac_two"] if pair else th["communication.slow_rank.vote_frac"]
        by_vote = frac[top] >= need
        if by_vote and pair:  # two members: no outlier test, the vote must hold over several steps
            votes, seen = t.row(int(ranks[top]))
            took = seen > 0
            won = votes[took] >= 0.5 * seen[took]
            by_vote = evidence.weight(ctx, int(won.sum()), int(won.size)) >= th["diagnose.evidence.likely"]
    top_rank = int(ranks[top]) if top >= 0 else None
    by_spread = sp.rank is not None and sp.spread > th["communication.slow_rank.spread"] and \
        (not by_vote or top_rank == sp.rank)
    if not (by_vote or by_spread):
        return
    rank = top_rank if by_vote else sp.rank
    assert rank is not None
    members = _members_of(lay, ranks, rank)
    if by_vote:
        assert t is not None  # a vote needs the tally
        votes, seen = t.row(rank)
        took = seen > 0
        steps = t.steps[took]
        indicator = votes[took] / seen[took]
        hits = indicator >= 0.5
        vote = float(t.votes[t.pos[rank]] / max(t.seen[t.pos[rank]], 1))
    else:
        assert sp.scan is not None
        steps = sp.scan.steps
        mine = data.series(sp.metric, rank, steps)
        others = peer_median(mine, sp.scan.os(sp.group), len(sp.members))
        indicator = sp.sign * (mine - others) / np.maximum(np.abs(others), 1e-12)
        # a step shows the slow rank when it stands out from the others' median by the advisor's spread
        scale = data.series("step_time_ms", rank, steps) if view.has("step_time_ms") else others
        with np.errstate(invalid="ignore", divide="ignore"):
            excess = np.nan_to_num(sp.sign * (mine - others) / np.abs(scale))
        hits = excess > th["communication.slow_rank.spread"]
        vote = float(t.votes[t.pos[rank]] / max(t.seen[t.pos[rank]], 1)) if t is not None else 0.0
    start = change_point(np.nan_to_num(indicator), th["communication.onset_z"])
    persist = min(ctx.persist("communication.persist_steps", steps), steps.size)
    ratio, excess, slower = _compute_outlier(ctx, data, rank, members)
    outlier = ratio is not None and ratio >= th["communication.slow_rank.compute_ratio"]
    if not outlier and data.stage_explains(rank):
        return  # all of its stage is slow and it no slower than its peers: SlowPipelineStage's finding
    if outlier:
        hits = hits | np.isin(steps, slower)  # a step where it computed that much longer shows it too
    if not hits.any():
        return  # no single step where it stood out: the medians' spread alone is not a slow rank
    base = max(severity(max(sp.spread, 1e-9), th["communication.slow_rank.spread"], 1.0),
               severity(max(vote, 1e-9), th["communication.slow_rank.vote_frac"], 1.0) if by_vote else 0.5)
    extra: dict[str, float | str | bool] = {
        "rank": rank, "ranks": float(len(members)), "group": ",".join(map(str, members)), "spread": sp.spread,
        "vote_fraction": vote, "excess_ms": excess, "whole_window": bool(start == 0)}
    if ratio is not None:
        extra["compute_ratio"] = ratio
        extra["compute_outlier"] = bool(ratio >= th["communication.slow_rank.compute_ratio"])
    if lay.stage:
        extra["stage"] = float(lay.stage.get(rank, -1))
    extra.update(evidence_of(data))
    sev, ev = evidence.scaled(ctx, base, hits, instances=t.instances if t is not None else 0, extra=extra)
    out.add(make_finding("SlowRank", DIM, f"rank:{rank}", steps, start, steps.size - 1, sev, ev,
                         "communication.slow_rank.vote" if by_vote else f"communication.slow_rank.spread.{sp.metric}",
                         start + persist - 1), (steps, indicator))


def _members_of(lay: Layout, ranks: np.ndarray, rank: int) -> list[int]:
    return next((g for g in lay.split(int(r) for r in ranks) if rank in g), [int(r) for r in ranks])


def _compute_outlier(ctx: Context, data: RankScans, rank: int,
                     members: list[int]) -> tuple[float | None, float, np.ndarray]:
    """(the rank's median compute / the median of the other members', its median excess in ms, the steps where
    it computed ``communication.slow_rank.compute_ratio`` times the others' median or more)."""
    none = (None, 0.0, np.zeros(0, dtype=np.int64))
    scan = data.rank_scan("compute_ms")
    if scan is None or len(members) < 2 or rank not in scan.groups.pos or scan.steps.size == 0:
        return none
    gi = scan.groups.index(members)
    if gi is None or scan.groups.cols[gi].size < 2:
        return none
    mine = data.series("compute_ms", rank, scan.steps)
    others = peer_median(mine, scan.os(gi), scan.groups.cols[gi].size)
    ratio = float(np.median(mine) / max(float(np.median(others)), 1e-12))
    slower = scan.steps[mine >= ctx.th["communication.slow_rank.compute_ratio"] * others]
    return ratio, float(np.median(mine - others)), slower


def slow_stage(ctx: Context, data: RankScans, out: Emit) -> None:
    th = ctx.th
    lay = data.layout
    stages = lay.stages
    if len(stages) < 2:
        raise NotJudged("no pipeline stages known (run.json layout, parallel sizes, or process groups with "
                        "point-to-point peers)")
    scan = data.rank_scan("compute_ms")
    if scan is None or scan.steps.size == 0:
        raise NotJudged("no step with compute_ms on every rank")
    names = sorted(s for s, members in stages.items() if np.isin(members, scan.labels).any())
    # a stage is as fast as its fastest rank: one straggler does not make its stage slow
    per = np.array([scan.os(_group(scan, stages[s]))[:, MIN] for s in names])
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
        "stages": float(len(names)), "layout": lay.source, **evidence_of(data)}
    m = _microbatches(ctx, members)
    if m:  # what re-balancing buys: a 1F1B step is (m + p − 1) slots of the slowest stage (Narayanan et al. 2021)
        extra.update({"microbatches": float(m), "bubble_fraction": bubble_fraction(len(names), m),
                      "rebalance_speedup": float(np.median(per.max(axis=0) / np.maximum(per.mean(axis=0), 1e-12)))})
    steps = scan.steps
    sev, ev = evidence.scaled(ctx, severity(level, limit, 3.0), hits, extra=extra)
    start = int(np.argmax(hits))
    out.add(make_finding("SlowPipelineStage", DIM, f"stage:{names[k]}", steps, start, steps.size - 1, sev, ev,
                         "communication.slow_stage", start), (steps, ratio[k]))


def _group(scan: RankScan, members: list[int]) -> int:
    gi = scan.groups.index(members)
    assert gi is not None, "every group a detector compares within is scanned"
    return gi


def _microbatches(ctx: Context, members: list[int]) -> int:
    """Micro-batches per step (``microbatch_count``, the median over the stage's ranks and steps; 0 if unknown)."""
    if not ctx.view.has("microbatch_count"):
        return 0
    g = ctx.view.by_rank("microbatch_count", ranks=members)
    v = g.values[np.isfinite(g.values)]
    return int(np.median(v)) if v.size else 0


def replica_variation(ctx: Context, data: RankScans, out: Emit) -> None:
    """Per-step compute that varies across the data-parallel replicas, every stage of a replica alike, with a
    different replica slowest from step to step and no worker whose fix would take the slowdown back: uneven data
    (sequence lengths, padding), which a micro-batch carries through every stage of its replica."""
    th = ctx.th
    placed, sh, scan = data.placed, data.shares, data.rank_scan("compute_ms")
    if placed is None or sh is None or scan is None:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    _, stage, replica = placed
    stages, replicas = sorted(set(stage.tolist())), sorted(set(replica.tolist()))
    if len(stages) < 2:
        raise NotJudged("one pipeline stage: a replica's data cannot be told from its rank (see ComputeImbalance)")
    if len(replicas) < 3:
        raise NotJudged(f"{len(replicas)} data-parallel replicas per stage; at least 3 are needed")
    steps = scan.steps
    if steps.size < th.as_int("communication.compute_imbalance.min_steps"):
        raise NotJudged(f"{steps.size} steps of compute_ms on every rank")
    if not math.isfinite(sh.replica_share) or not math.isfinite(sh.coherence):
        return  # balanced: nothing to take back
    cv = scan.part.per_step["rep_cv"]
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
        "replica_cv": level, "slowest_replica_share": sh.slowest_replica_share, "replicas": float(len(replicas)),
        "stages": float(len(stages)), **evidence_of(data)})
    start = int(np.argmax(hits))
    out.add(make_finding("ReplicaComputeVariation", DIM, "", steps, start, steps.size - 1, sev, ev,
                         "communication.replica_variation", start), (steps, cv))


def compute_imbalance(ctx: Context, data: RankScans, out: Emit) -> None:
    th = ctx.th
    scan = data.rank_scan("compute_ms")
    if scan is None:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    steps = scan.steps
    if steps.size < th.as_int("communication.compute_imbalance.min_steps"):
        raise NotJudged(f"{steps.size} steps of compute_ms on every rank, at least "
                        f"{th.as_int('communication.compute_imbalance.min_steps')} are needed")
    lay = layout(ctx.meta, scan.labels.tolist())
    cvs, tops = [], []
    for members in lay.split(int(r) for r in scan.labels):
        if len(members) < 2:
            continue
        gi = _group(scan, members)
        cvs.append(scan.part.per_step[f"cv{gi}"])
        slowest = scan.part.per_step[f"argmax{gi}"]
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
        "compute_cv": level, "slowest_rank_share": top_share, "ranks": float(len(scan.labels))})
    start = int(np.argmax(hits))
    out.add(make_finding("ComputeImbalance", DIM, "", steps, start, steps.size - 1, sev, ev,
                         "communication.compute_imbalance", start), (steps, cv))


def slow_compute(ctx: Context, data: RankScans, out: Emit) -> None:
    """A rank whose own compute time is the outlier of its group (``communication.slow_rank.compute_ratio`` times
    the median of the others) on ``communication.persist_frac`` of the steps: the rank is slow itself, not late
    because it waited for its input or its host (those make a SlowRank without a SlowCompute)."""
    th = ctx.th
    scan = data.rank_scan("compute_ms")
    if scan is None or scan.steps.size == 0:
        raise NotJudged("fewer than two ranks with compute_ms on the same steps")
    lay = layout(ctx.meta, scan.labels.tolist())
    limit = th["communication.slow_rank.compute_ratio"]
    best: tuple[float, int, int, list[int]] | None = None
    for members in lay.split(int(r) for r in scan.labels):
        if len(members) < 2:
            continue
        gi = _group(scan, members)
        levels = scan.levels(scan.groups.cols[gi], "ratio")
        for j, rank in enumerate(members):
            if best is None or float(levels[j]) > best[0]:
                best = (float(levels[j]), rank, gi, members)
    if best is None:
        raise NotJudged("no group of two or more ranks")
    level, rank, gi, members = best
    mine = data.series("compute_ms", rank, scan.steps)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = mine / np.maximum(peer_median(mine, scan.os(gi), len(members)), 1e-12)
    hits = ratio >= limit
    if level < limit or hits.mean() < th["communication.persist_frac"]:
        return
    if len(members) == 2 and evidence.weight(ctx, int(hits.sum()), hits.size) < th["diagnose.evidence.likely"]:
        return  # one of two ranks on a step or two: not enough to tell which is the odd one
    start = change_point(np.nan_to_num(ratio), th["communication.onset_z"])
    steps = scan.steps
    sev, ev = evidence.scaled(ctx, severity(level, limit, 10.0), hits, extra={
        "rank": rank, "compute_ratio": level, "group": ",".join(map(str, members)), "ranks": float(len(members)),
        "whole_window": bool(start == 0), **evidence_of(data)})
    out.add(make_finding("SlowCompute", DIM, f"rank:{rank}", steps, start, steps.size - 1, sev, ev,
                         "communication.slow_compute", start), (steps, ratio))
