"""The scans the communication family shares: one pass over the step windows of each per-rank metric, the rest
from per-step and per-chunk results.

A detector that compares ranks reads, for each group of ranks it compares (a pipeline stage, a communicator), the
order statistics of every step (``crossrank``), the vote of every collective instance, the per-step what-if
quantities of the parallel grid (``parallel_grid``), and, for each rank, its median per chunk of
``diagnose.scan.chunk_steps`` steps. A level of a rank over the run (its median compute time, its median ratio to
its peers) is the median of its chunk medians: the plain median while a run fits in one chunk, and a statistic
that a growing run updates chunk by chunk (``--follow``). A series of one rank (the straggler's, once named) is
read again on its own. Kernels are module functions of plain parameters: they run in Ray tasks too.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from debugtune.engine.diagnose.base import Context
from debugtune.engine.diagnose.crossrank import dixon_low, order_stats, peer_median, sigma_low
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.groups import Layout, layout, member_groups
from debugtune.engine.diagnose.parallel_grid import Model, Shares, model, placement, shares_from, step_quantities
from debugtune.engine.diagnose.scan import Block, Partial, ScanJob

# -- kernels (one window → per-step and per-chunk results) ---------------------------------------------------


@dataclass(frozen=True)
class RankParams:
    """Groups of columns to compare within (each once), the groups whose peer ratio is kept per chunk, and the
    parallel grid's model (compute only)."""

    groups: tuple[np.ndarray, ...]
    ratio_groups: tuple[int, ...] = ()
    model: Model | None = None

    def __repr__(self) -> str:  # the scan cache key: the groups' contents, not their ids
        return f"RankParams({[g.tolist() for g in self.groups]}, {self.ratio_groups}, {self.model is not None})"


def _chunk_medians(block: Block, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids, meds = [], []
    for cid, rows in block.chunks():
        ids.append(cid)
        meds.append(np.median(values[rows[0]:rows[-1] + 1], axis=0))
    return np.array(ids, dtype=np.int64), np.array(meds)


def rank_kernel(block: Block, p: RankParams) -> Partial:
    """Per group and step: order statistics (``os<g>``), slowest and fastest member (``argmax<g>``,
    ``argmin<g>``), coefficient of variation (``cv<g>``); per rank and chunk: the median (``med``) and, for the
    ratio groups, the median ratio to the member's peers (``ratio``); the parallel grid's quantities."""
    v = block.values
    out: dict[str, np.ndarray] = {}
    ratio = np.ones_like(v) if p.ratio_groups else None
    whole = np.arange(v.shape[1])
    known = {}
    for gi, cols in enumerate(p.groups):
        g = v if np.array_equal(cols, whole) else np.ascontiguousarray(v[:, cols])
        os = known[tuple(cols.tolist())] = order_stats(g)
        out[f"os{gi}"], out[f"argmax{gi}"], out[f"argmin{gi}"] = os, np.argmax(g, axis=1), np.argmin(g, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"cv{gi}"] = g.std(axis=1) / np.maximum(g.mean(axis=1), 1e-12)
        if ratio is not None and gi in p.ratio_groups:
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio[:, cols] = g / np.maximum(peer_median(g, os, cols.size), 1e-12)
    if p.model is not None:
        out.update(step_quantities(v, p.model, known))
    ids, med = _chunk_medians(block, v)
    per_chunk = {"med": med}
    if ratio is not None:
        per_chunk["ratio"] = _chunk_medians(block, ratio)[1]
    return Partial(block.steps, out, ids, per_chunk)


@dataclass(frozen=True)
class VoteParams:
    """The groups of a collective (columns, two members or more) and the outlier tests' settings."""

    groups: tuple[np.ndarray, ...]
    dixon_max_n: int
    sigma: float
    spread: float
    critical: tuple[tuple[int, float], ...]

    def __repr__(self) -> str:
        return f"VoteParams({[g.tolist() for g in self.groups]}, {self.dixon_max_n}, {self.sigma}, {self.spread})"


def votes(values: np.ndarray, p: VoteParams) -> np.ndarray:
    """Per instance (row, instances × members): the member the others waited for (shortest collective time), or
    −1: Dixon's test up to ``dixon_max_n`` members, 3σ above; with two, the faster when the gap is material."""
    n = values.shape[1]
    if n > p.dixon_max_n:
        return sigma_low(values, p.sigma)
    if n >= 3:
        return dixon_low(values, dict(p.critical))
    lo, hi = values.min(axis=1), values.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        material = (hi - lo) / values.mean(axis=1) > p.spread
    return np.where(material, np.argmin(values, axis=1), -1)


def vote_kernel(block: Block, p: VoteParams) -> Partial:
    """Per group and instance (step): the rank the others waited for (``win<g>``, −1 for none)."""
    out = {}
    for gi, cols in enumerate(p.groups):
        w = votes(np.ascontiguousarray(block.values[:, cols]), p)
        out[f"win{gi}"] = np.where(w >= 0, block.labels[cols][np.maximum(w, 0)], -1)
    return Partial(block.steps, out)


def step_time_kernel(block: Block, p: object) -> Partial:
    """Per step: the slowest rank's step time (``tmax``, NaN-aware); per rank and chunk: the median over the steps
    every rank recorded (``med``)."""
    v = block.values
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no rank measured stays NaN
        tmax = np.nanmax(v, axis=1)
    full = np.isfinite(v).all(axis=1)
    sub = Block(block.steps[full], block.labels, v[full], {}, block.chunk_steps)
    ids, med = _chunk_medians(sub, sub.values)
    return Partial(block.steps, {"tmax": tmax}, ids, {"med": med})


def chunked_median(per_chunk: np.ndarray) -> np.ndarray:
    """Per column, the median of its chunk medians (the plain median when the run fits in one chunk)."""
    return np.median(per_chunk, axis=0)


# -- the family's shared data --------------------------------------------------------------------------------


class _Groups:
    """Column groups of one scan, each once: ``index(members)`` finds a group by its ranks."""

    def __init__(self, labels: np.ndarray):
        self.labels = labels
        self.pos = {int(r): i for i, r in enumerate(labels)}
        self.cols: list[np.ndarray] = []
        self._key: dict[tuple[int, ...], int] = {}

    def add(self, members: list[int] | np.ndarray) -> int:
        cols = np.array(sorted(self.pos[int(r)] for r in members if int(r) in self.pos), dtype=np.int64)
        key = tuple(cols.tolist())
        if key not in self._key:
            self._key[key] = len(self.cols)
            self.cols.append(cols)
        return self._key[key]

    def index(self, members: list[int] | np.ndarray) -> int | None:
        key = tuple(sorted(self.pos[int(r)] for r in members if int(r) in self.pos))
        return self._key.get(key)


@dataclass
class RankScan:
    """One metric's scan: its ranks (``labels``), the complete steps, the merged results and the groups."""

    metric: str
    labels: np.ndarray
    part: Partial
    groups: _Groups

    @property
    def steps(self) -> np.ndarray:
        return self.part.steps

    def os(self, gi: int) -> np.ndarray:
        return self.part.per_step[f"os{gi}"]

    def levels(self, cols: np.ndarray, key: str = "med") -> np.ndarray:
        """Per rank of ``cols``: the median of its chunk medians of ``key``."""
        return chunked_median(self.part.per_chunk[key][:, cols])


class RankScans:
    """What the communication detectors share on one run: the layout, the scans (each run at most once), the
    parallel grid's placement and what-if shares (None where compute_ms is not measurable)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.layout = layout(ctx.meta, ctx.view.ranks().tolist())
        self._scans: dict[Any, Any] = {}

    def _run(self, job: ScanJob) -> Partial:
        key = job.key()
        if key not in self._scans:
            self._scans[key] = self.ctx.scan(job)
        part: Partial = self._scans[key]
        return part

    def series(self, metric: str, rank: int, steps: np.ndarray, entity: str | None = None) -> np.ndarray:
        """One rank's values of ``metric`` at ``steps`` (NaN where it has none): read on its own."""
        frame = Grid(metric, (rank,), steps, np.empty((1, steps.size)))
        return self.ctx.view.by_rank(metric, entity, ranks=[rank]).like(frame)[0]

    # -- compute_ms and the other per-rank times -----------------------------------------------------------
    def rank_scan(self, metric: str) -> RankScan | None:
        """The complete-step scan of ``metric`` with every group a detector compares within (None when fewer
        than two ranks recorded it)."""
        if ("rank", metric) in self._scans:
            cached: RankScan | None = self._scans[("rank", metric)]
            return cached
        view = self.ctx.view
        scan = None
        if view.has(metric):
            labels = view.rank_labels(metric)
            if labels.size >= 2:
                scan = self._rank_scan(metric, labels)
        self._scans[("rank", metric)] = scan
        return scan

    def _rank_scan(self, metric: str, labels: np.ndarray) -> RankScan:
        ranks = labels.tolist()
        groups = _Groups(labels)
        for members in self.layout.split(ranks):
            groups.add(members)
        own = layout(self.ctx.meta, ranks)  # the layout of the ranks that recorded it (slow_compute, imbalance)
        ratio = tuple(groups.add(members) for members in own.split(ranks))
        for members in self.layout.stages.values():
            if np.isin(members, labels).any():
                groups.add(members)
        grid_model = None
        if metric == "compute_ms":
            stage, replica = placement(labels, self.layout, self.ctx.meta)
            grid_model = model(stage, replica, self.ctx.th["communication.grid.top_frac"])
        params = RankParams(tuple(groups.cols), ratio if metric == "compute_ms" else (), grid_model)
        return RankScan(metric, labels, self._run(ScanJob(metric, rank_kernel, params)), groups)

    @cached_property
    def placed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(ranks, stage, replica) of the workers with compute_ms on complete steps, or None."""
        scan = self.rank_scan("compute_ms")
        if scan is None or scan.steps.size == 0:
            return None
        stage, replica = placement(scan.labels, self.layout, self.ctx.meta)
        return scan.labels, stage, replica

    @cached_property
    def shares(self) -> Shares | None:
        scan = self.rank_scan("compute_ms")
        if scan is None or scan.steps.size == 0:
            return None
        stage, replica = placement(scan.labels, self.layout, self.ctx.meta)
        m = model(stage, replica, self.ctx.th["communication.grid.top_frac"])
        steps = scan.steps

        def columns(cols: np.ndarray) -> np.ndarray:
            ranks = scan.labels[cols]
            frame = Grid("compute_ms", tuple(ranks.tolist()), steps, np.empty((ranks.size, steps.size)))
            return np.ascontiguousarray(self.ctx.view.by_rank("compute_ms", ranks=ranks).like(frame).T)

        return shares_from(scan.part.per_step, m, scan.labels, columns)

    def stage_explains(self, rank: int) -> bool:
        """Whether ``rank``'s stage, not the rank, holds the slowdown: the rank lies in the stage whose fix takes
        back ``communication.stage.share`` of it while fixing the slowest workers takes back less than
        ``communication.slow_rank.worker_share``."""
        sh, th = self.shares, self.ctx.th
        if sh is None or sh.stage is None or self.layout.stage.get(rank) != sh.stage:
            return False
        return sh.stage_share >= th["communication.stage.share"] and not \
            sh.worker_share >= th["communication.slow_rank.worker_share"]

    # -- collectives -------------------------------------------------------------------------------------
    def votes(self, metric: str, op: str | None, lay: Layout) -> tuple[Partial, list[np.ndarray]] | None:
        """The vote of every complete instance of ``metric`` (``op`` its entity) per group of two members or more:
        (merged results with ``win<g>``, each group's ranks); None when fewer than two ranks recorded it."""
        labels = self.ctx.view.rank_labels(metric, op)
        if labels.size < 2:
            return None
        groups = [g for g in member_groups(op or "", tuple(labels.tolist()), lay) if g.size >= 2]
        th = self.ctx.th
        params = VoteParams(tuple(groups), th.as_int("communication.slow_rank.dixon_max_n"),
                            th["communication.slow_rank.sigma"], th["communication.slow_rank.spread"],
                            tuple((int(k), v) for k, v in th.prefixed("dixon995.n").items()))
        part = self._run(ScanJob(metric, vote_kernel, params, entity=op))
        return part, [labels[g] for g in groups]

    @cached_property
    def step_time(self) -> Partial | None:
        """Per step the slowest rank's step time; per rank and chunk its median over complete steps."""
        if not self.ctx.view.has("step_time_ms"):
            return None
        return self._run(ScanJob("step_time_ms", step_time_kernel, None, complete=False))


def rank_scans(ctx: Context) -> RankScans:
    return RankScans(ctx)


def evidence_of(data: RankScans) -> Mapping[str, float | str]:
    """The what-if shares as evidence (``parallel_grid``), "not measured" where the run is balanced."""
    return data.shares.evidence() if data.shares is not None else {}
