"""The parallel grid of a run — workers placed by data-parallel replica × pipeline stage — and how much of the
run's slowdown each kind of fix would take back: what separates a slow stage from a slow rank from uneven data.

ByteDance's straggler study (Lin et al., OSDI'25, arXiv 2505.05713) measures this by what-if simulation: the
slowdown S = T / T_ideal of a step against the same step with every operation at its typical duration, and the
share of S − 1 that fixing only the slowest workers takes back (M_W) or only the last stage (M_S). Here the step
is modelled by its bottleneck (a synchronous step waits for its slowest worker; a 1F1B pipeline runs at the pace
of its slowest stage, (m + p − 1) slots of it — Narayanan et al., SC'21, arXiv 2104.04473), T = mean over steps of
the largest worker compute, T_ideal = mean over steps of the median worker; and the shares, each in [0, 1] or
NaN where the run is balanced (nothing to take back):

- ``worker_share`` (M_W): the top ``communication.grid.top_frac`` of workers (at least one) set to the median of
  their stage's other workers on every step;
- ``stage_share`` (M_S): one stage's workers scaled, step by step, to the level of the other stages (a stage's
  level is its lower-median worker, so one straggler does not make its stage slow);
- ``replica_share``: every worker set to the median of its stage on every step (all variation across the
  replicas of a stage gone, persistent or not); what it takes back beyond ``worker_share`` is variation that no
  single worker keeps — uneven data;
- ``coherence``: how alike the stages of one replica vary from step to step (the mean correlation, over pairs
  of stages, of each replica's per-step deviation from its stage's median): a micro-batch's sequence length is
  the same on every stage of its replica, a garbage-collection pause or a slow device is not.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.groups import Layout

BUBBLE_SOURCE = "https://arxiv.org/abs/2104.04473"
"""Narayanan et al. 2021 (Megatron-LM, SC'21) §2.2: the 1F1B pipeline bubble is (p − 1) / (m + p − 1) of a step."""


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The idle share of a balanced 1F1B pipeline step: (p − 1) / (m + p − 1); NaN when m is unknown."""
    if stages < 1 or microbatches < 1:
        return math.nan
    return (stages - 1) / (microbatches + stages - 1)


@dataclass(frozen=True)
class WorkerGrid:
    """Per-worker compute (workers × steps) with each worker's stage and replica (its place in the stage)."""

    ranks: np.ndarray
    stage: np.ndarray
    replica: np.ndarray
    steps: np.ndarray
    values: np.ndarray

    @property
    def stages(self) -> list[int]:
        return sorted(set(self.stage.tolist()))

    @property
    def replicas(self) -> list[int]:
        return sorted(set(self.replica.tolist()))

    def replica_load(self) -> np.ndarray:
        """Per replica and step, its workers' mean compute relative to their stage's median (replicas × steps)."""
        rel = np.empty_like(self.values)
        for s in self.stages:
            idx = self.stage == s
            rel[idx] = self.values[idx] / np.maximum(np.median(self.values[idx], axis=0), 1e-12)
        return np.array([rel[self.replica == r].mean(axis=0) for r in self.replicas])

    def heat(self) -> tuple[list[int], list[int], np.ndarray]:
        """(replicas, stages, median compute per replica × stage; NaN where no worker) — the report's heat map."""
        reps, sts = self.replicas, self.stages
        out = np.full((len(reps), len(sts)), np.nan)
        med = np.median(self.values, axis=1)
        for i, r in enumerate(reps):
            for j, s in enumerate(sts):
                mine = (self.replica == r) & (self.stage == s)
                if mine.any():
                    out[i, j] = float(np.mean(med[mine]))
        return reps, sts, out


def worker_grid(compute: Grid, lay: Layout, meta: Mapping[str, Any]) -> WorkerGrid:
    """The workers of ``compute`` (complete steps only) on the grid. The replica is run.json ``layout.dp`` where an
    importer recorded it, else the worker's position among its stage's ranks (Megatron's order tp-cp-ep-dp-pp puts
    the data-parallel coordinate next inside the stage)."""
    ranks = np.array([int(r) for r in compute.labels])
    stage = np.array([int(lay.stage.get(int(r), 0)) for r in ranks])
    given = (meta.get("layout") or {}).get("dp") if isinstance(meta.get("layout"), dict) else None
    if isinstance(given, dict) and all(str(r) in given for r in ranks.tolist()):
        replica = np.array([int(given[str(r)]) for r in ranks.tolist()])
    else:
        replica = np.zeros(len(ranks), dtype=np.int64)
        for s in set(stage.tolist()):
            idx = np.flatnonzero(stage == s)
            replica[idx[np.argsort(ranks[idx])]] = np.arange(idx.size)
    return WorkerGrid(ranks, stage, replica, compute.steps, compute.values)


def _pace(values: np.ndarray) -> float:
    """The modelled step time: the slowest worker, averaged over the steps."""
    return float(np.mean(np.max(values, axis=0)))


def _peer_median(g: WorkerGrid) -> np.ndarray:
    """Per worker and step, the median of the other workers of its stage (its own value where it is alone)."""
    out = g.values.copy()
    for s in g.stages:
        idx = np.flatnonzero(g.stage == s)
        if idx.size < 2:
            continue
        for k, i in enumerate(idx):
            out[i] = np.median(g.values[np.delete(idx, k)], axis=0)
    return out


def _stage_level(g: WorkerGrid, s: int) -> np.ndarray:
    v = np.sort(g.values[g.stage == s], axis=0)
    return v[(v.shape[0] - 1) // 2]


@dataclass(frozen=True)
class Shares:
    """What-if shares of the slowdown (module docstring); NaN = not measured (a balanced run)."""

    slowdown: float
    worker_share: float
    workers: tuple[int, ...]
    stage_share: float
    stage: int | None
    replica_share: float
    coherence: float
    slowest_replica_share: float

    def evidence(self) -> dict[str, float | str]:
        out: dict[str, float | str] = {"slowdown": self.slowdown}
        for key in ("worker_share", "stage_share", "replica_share", "coherence"):
            value = getattr(self, key)
            out[key] = value if math.isfinite(value) else "not measured"
        return out


def _share(gain: float, total: float) -> float:
    return float(min(max(gain / total, 0.0), 1.0)) if total > 0 else math.nan


def shares(g: WorkerGrid, top_frac: float) -> Shares:
    """The what-if shares of ``g`` (``top_frac``: the share of workers fixed together for ``worker_share``)."""
    pace, ideal = _pace(g.values), float(np.mean(np.median(g.values, axis=0)))
    total = pace - ideal if ideal > 0 and (pace - ideal) / ideal > 1e-6 else 0.0
    peers = _peer_median(g)
    n = len(g.ranks)
    gains = []
    for i in range(n):
        fixed = g.values.copy()
        fixed[i] = peers[i]
        gains.append(pace - _pace(fixed))
    k = max(1, math.ceil(n * top_frac))
    top = np.argsort(gains)[::-1][:k]
    fixed = g.values.copy()
    fixed[top] = peers[top]
    worker = _share(pace - _pace(fixed), total)
    best_stage, stage_gain = None, 0.0
    stages = g.stages
    if len(stages) > 1:
        levels = {s: _stage_level(g, s) for s in stages}
        for s in stages:
            others = np.median(np.array([levels[o] for o in stages if o != s]), axis=0)
            fixed = g.values.copy()
            with np.errstate(invalid="ignore", divide="ignore"):
                fixed[g.stage == s] *= np.where(levels[s] > 0, others / levels[s], 1.0)
            gain = pace - _pace(fixed)
            if gain > stage_gain:
                best_stage, stage_gain = s, gain
    med = np.empty_like(g.values)
    for s in stages:
        idx = g.stage == s
        med[idx] = np.median(g.values[idx], axis=0)
    replica = _share(pace - _pace(med), total)
    return Shares(pace / ideal if ideal > 0 else math.nan, worker,
                  tuple(int(g.ranks[i]) for i in top) if math.isfinite(worker) else (),
                  _share(stage_gain, total), best_stage, replica, _coherence(g, med), _slowest_replica(g))


def _coherence(g: WorkerGrid, med: np.ndarray) -> float:
    """Mean over pairs of stages of the correlation of the replicas' per-step deviations (NaN with one stage)."""
    stages = g.stages
    if len(stages) < 2:
        return math.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = (g.values - med) / np.where(med > 0, med, np.nan)
    by = {s: {int(r): dev[i] for i, r in enumerate(g.replica) if g.stage[i] == s} for s in stages}
    corr = []
    for a in range(len(stages)):
        for b in range(a + 1, len(stages)):
            common = sorted(set(by[stages[a]]) & set(by[stages[b]]))
            if len(common) < 2:
                continue
            x = np.concatenate([by[stages[a]][r] for r in common])
            y = np.concatenate([by[stages[b]][r] for r in common])
            ok = np.isfinite(x) & np.isfinite(y)
            if ok.sum() > 2 and np.std(x[ok]) > 0 and np.std(y[ok]) > 0:
                corr.append(float(np.corrcoef(x[ok], y[ok])[0, 1]))
    return float(np.mean(corr)) if corr else math.nan


def _slowest_replica(g: WorkerGrid) -> float:
    """The largest share of the steps on which one replica is the slowest (its workers' mean relative compute)."""
    reps = g.replicas
    if len(reps) < 2:
        return math.nan
    slowest = np.argmax(g.replica_load(), axis=0)
    return float(np.bincount(slowest, minlength=len(reps)).max() / slowest.size)
