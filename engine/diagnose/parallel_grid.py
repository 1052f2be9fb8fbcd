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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from debugtune.engine.diagnose.crossrank import MAX, MIN, lower_median, median, order_stats, peer_median, top_values
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


def placement(ranks: np.ndarray, lay: Layout, meta: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(stage, replica) of each worker. The replica is run.json ``layout.dp`` where an importer recorded it, else
    the worker's position among its stage's ranks (Megatron's order tp-cp-ep-dp-pp puts the data-parallel
    coordinate next inside the stage)."""
    stage = np.array([int(lay.stage.get(int(r), 0)) for r in ranks], dtype=np.int64)
    given = (meta.get("layout") or {}).get("dp") if isinstance(meta.get("layout"), dict) else None
    if isinstance(given, dict) and all(str(r) in given for r in ranks.tolist()):
        return stage, np.array([int(given[str(r)]) for r in ranks.tolist()], dtype=np.int64)
    replica = np.zeros(len(ranks), dtype=np.int64)
    for s in set(stage.tolist()):
        idx = np.flatnonzero(stage == s)
        replica[idx[np.argsort(ranks[idx])]] = np.arange(idx.size)
    return stage, replica


def worker_grid(compute: Grid, lay: Layout, meta: Mapping[str, Any]) -> WorkerGrid:
    """The workers of ``compute`` (complete steps only) on the grid (see :func:`placement`)."""
    ranks = np.array([int(r) for r in compute.labels])
    stage, replica = placement(ranks, lay, meta)
    return WorkerGrid(ranks, stage, replica, compute.steps, compute.values)


@dataclass(frozen=True)
class Model:
    """Where the workers sit, as column indices of a step window: the columns of each stage (stage order), of each
    replica, the aligned columns of the replicas two stages share (for ``coherence``), and how many of the largest
    values per step the worker share needs (``top``: the workers it fixes, plus one)."""

    stage_ids: tuple[int, ...]
    stage_cols: tuple[np.ndarray, ...]
    replica_order: np.ndarray
    replica_starts: np.ndarray
    pairs: tuple[tuple[np.ndarray, np.ndarray], ...]
    top: int

    @property
    def fixed(self) -> int:
        return self.top - 1


def model(stage: np.ndarray, replica: np.ndarray, top_frac: float) -> Model:
    """The :class:`Model` of workers placed at ``stage`` and ``replica`` (one entry per column)."""
    ids = sorted(set(stage.tolist()))
    cols = tuple(np.flatnonzero(stage == s) for s in ids)
    order = np.lexsort((np.arange(replica.size), replica))
    starts = np.flatnonzero(np.r_[True, np.diff(replica[order]) != 0])
    by = [{int(replica[c]): int(c) for c in cs} for cs in cols]
    pairs = []
    if len(ids) > 1:
        for a in range(len(ids)):
            for b in range(a + 1, len(ids)):
                common = sorted(set(by[a]) & set(by[b]))
                if len(common) >= 2:
                    pairs.append((np.array([by[a][r] for r in common]), np.array([by[b][r] for r in common])))
    k = max(1, math.ceil(stage.size * top_frac))
    return Model(tuple(ids), cols, order, starts, tuple(pairs), min(k + 1, max(stage.size, 1)))


def step_quantities(v: np.ndarray, m: Model, known: Mapping[tuple[int, ...], np.ndarray] | None = None
                    ) -> dict[str, np.ndarray]:
    """Per step of a window ``v`` (steps × workers, complete) what the what-if shares need: the slowest worker
    (``m1``, ``arg``), the slowest step once it is fixed to its stage's others (``alt``), the median worker, the
    ``top`` largest values and their columns, each stage's order statistics (``st_os``), the replicas' spread and
    slowest replica (two stages or more) and the sums the coherence of the stages' deviations is made of.
    ``known``: order statistics already computed, by the columns they are of."""
    known = known or {}

    def stats(cols: np.ndarray) -> np.ndarray:
        got = known.get(tuple(cols.tolist()))
        return got if got is not None else order_stats(np.ascontiguousarray(v[:, cols]))

    rows = np.arange(v.shape[0])
    arg = np.argmax(v, axis=1)
    m1 = v[rows, arg]
    topv, topi = top_values(v, m.top)
    st_os = np.stack([stats(c) for c in m.stage_cols], axis=1)
    whole = known.get(tuple(range(v.shape[1])))
    of = np.empty(v.shape[1], dtype=np.int64)
    for k, c in enumerate(m.stage_cols):
        of[c] = k
    stage_of_arg = of[arg]
    peer = np.empty(v.shape[0])
    for k, c in enumerate(m.stage_cols):
        here = stage_of_arg == k
        if here.any():
            peer[here] = peer_median(m1[here], st_os[here, k], c.size)
    second = topv[:, 1] if topv.shape[1] > 1 else np.full(v.shape[0], -np.inf)
    out = {"m1": m1, "arg": arg, "alt": np.maximum(second, peer),
           "median": np.median(v, axis=1) if whole is None else median(whole, v.shape[1]),
           "topv": topv, "topi": topi, "st_os": st_os}
    if len(m.stage_cols) > 1:
        med = np.stack([median(st_os[:, k], c.size) for k, c in enumerate(m.stage_cols)], axis=1)[:, of]
        load = np.add.reduceat((v / np.maximum(med, 1e-12))[:, m.replica_order], m.replica_starts, axis=1) / \
            np.diff(np.r_[m.replica_starts, v.shape[1]])
        out["rep_cv"] = load.std(axis=1) / np.maximum(load.mean(axis=1), 1e-12)
        out["rep_slowest"] = np.argmax(load, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            dev = (v - med) / np.where(med > 0, med, np.nan)
        sums = []
        for a, b in m.pairs:
            x, y = dev[:, a], dev[:, b]
            ok = np.isfinite(x) & np.isfinite(y)
            x, y = np.where(ok, x, 0.0), np.where(ok, y, 0.0)
            sums.append(np.stack([ok.sum(axis=1), x.sum(axis=1), y.sum(axis=1), (x * x).sum(axis=1),
                                  (y * y).sum(axis=1), (x * y).sum(axis=1)], axis=1))
        out["coh"] = np.stack(sums, axis=1) if sums else np.zeros((v.shape[0], 0, 6))
    return out


def _pace(slowest: np.ndarray) -> float:
    """The modelled step time: the slowest worker, averaged over the steps."""
    return float(np.mean(slowest))


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


def shares_from(q: Mapping[str, np.ndarray], m: Model, ranks: np.ndarray,
                columns: Callable[[np.ndarray], np.ndarray]) -> Shares:
    """The what-if shares from the per-step quantities of every window (:func:`step_quantities`, merged in step
    order). ``columns(cols)`` gives the values of those workers on the same steps (steps × len(cols)): only the
    workers the worker share fixes are read again."""
    m1, arg, alt = q["m1"], q["arg"], q["alt"]
    pace, ideal = _pace(m1), float(np.mean(q["median"]))
    total = pace - ideal if ideal > 0 and (pace - ideal) / ideal > 1e-6 else 0.0
    gains = np.zeros(ranks.size)
    for i in np.unique(arg):  # any other worker, fixed, leaves every step's slowest worker where it is
        gains[i] = pace - _pace(np.where(arg == i, alt, m1))
    top = np.argsort(gains)[::-1][:m.fixed]
    st_os = q["st_os"]
    of = np.empty(ranks.size, dtype=np.int64)
    for k, c in enumerate(m.stage_cols):
        of[c] = k
    fixed = np.where(np.isin(q["topi"], top), -np.inf, q["topv"]).max(axis=1)  # the slowest worker left as it is
    values = columns(top)
    for j, i in enumerate(top):
        fixed = np.maximum(fixed, peer_median(values[:, j], st_os[:, of[i]], m.stage_cols[of[i]].size))
    worker = _share(pace - _pace(fixed), total)
    st_max, st_min = st_os[:, :, MAX], st_os[:, :, MIN]
    best_stage, stage_gain = None, 0.0
    if len(m.stage_ids) > 1:
        levels = np.stack([lower_median(st_os[:, k], c.size) for k, c in enumerate(m.stage_cols)], axis=1)
        for k, s in enumerate(m.stage_ids):
            rest = [o for o in range(len(m.stage_ids)) if o != k]
            others = np.median(levels[:, rest], axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                f = np.where(levels[:, k] > 0, others / levels[:, k], 1.0)
                scaled = np.where(f >= 0, st_max[:, k] * f, st_min[:, k] * f)
            gain = pace - _pace(np.maximum(st_max[:, rest].max(axis=1), scaled))
            if gain > stage_gain:
                best_stage, stage_gain = s, gain
    med = np.stack([median(st_os[:, k], c.size) for k, c in enumerate(m.stage_cols)], axis=1)
    replica = _share(pace - _pace(med.max(axis=1)), total)
    return Shares(pace / ideal if ideal > 0 else math.nan, worker,
                  tuple(int(ranks[i]) for i in top) if math.isfinite(worker) else (),
                  _share(stage_gain, total), best_stage, replica, coherence(q), slowest_replica(q, m))


def coherence(q: Mapping[str, np.ndarray]) -> float:
    """Mean over pairs of stages of the correlation of the replicas' per-step deviations from their stage's median
    (NaN with one stage), from the per-step sums of :func:`step_quantities`."""
    if "coh" not in q:
        return math.nan
    corr = []
    for n, sx, sy, sxx, syy, sxy in q["coh"].sum(axis=0):
        if n <= 2:
            continue
        mx, my = sx / n, sy / n
        vx, vy = sxx / n - mx * mx, syy / n - my * my
        if vx > 1e-12 * max(sxx / n, 1e-300) and vy > 1e-12 * max(syy / n, 1e-300):
            corr.append(float((sxy / n - mx * my) / math.sqrt(vx * vy)))
    return float(np.mean(corr)) if corr else math.nan


def slowest_replica(q: Mapping[str, np.ndarray], m: Model) -> float:
    """The largest share of the steps on which one replica is the slowest (its workers' mean relative compute)."""
    if m.replica_starts.size < 2 or "rep_slowest" not in q:
        return math.nan
    slowest = q["rep_slowest"]
    return float(np.bincount(slowest, minlength=m.replica_starts.size).max() / slowest.size)


def shares(g: WorkerGrid, top_frac: float) -> Shares:
    """The what-if shares of an in-memory grid (``top_frac``: the share of workers fixed together for
    ``worker_share``)."""
    m = model(g.stage, g.replica, top_frac)
    v = np.ascontiguousarray(g.values.T)
    return shares_from(step_quantities(v, m), m, g.ranks, lambda cols: v[:, cols])
