"""The tuning loop: initial design, Emukit BO with the RGPE model, batches, several objectives, stopping.

Ask/tell: :meth:`Tuner.ask` proposes the next batch, :meth:`Tuner.tell` takes the finished trials;
:meth:`Tuner.run` drives both with an ``evaluate(requests) -> outcomes`` function (see ``trials.py``).

* Initial design. With history: first the historical configuration where the history's ensemble mean
  is lowest (RGPE's mean before the target has a point), then the best configuration of each historical
  task, most similar task first (as many as the batch holds); then one BO batch with the history's ensemble;
  then the ``n_init`` random points a cold start of the same seed runs (their own random stream); then BO. Cold
  start: those ``n_init`` random points, then BO. A session that continues the target's own experiments with
  history: BO at once.
* A history that misleads costs the batches it led and no more (safe transfer): at each BO step after those
  batches RGPE weighs the history on the target's own observations; once it gives every historical task weight 0
  (each ranks the target's observations worse than the target's own GP does, or no better than chance), the
  history is dropped for good and the session proposes what the cold start of the same seed proposes — a cold
  `Tuner` fed the target's experiments less the history-led ones, with its own random stream — so it runs the cold
  start's experiments, the history-led batches later.
* BO step: an Emukit ``BayesianOptimizationLoop`` over the space, whose model is :class:`RGPEModel`
  (historical tasks + the target's observations), expected improvement over the target's best, and
  local penalisation (Emukit's ``LocalPenalizationPointCalculator``) for a batch of ``parallel`` points.
  A proposal that repeats a configuration the target already has is replaced by the best new one under EI.
* Several objectives: ParEGO; new scalarisation weights each iteration, history scalarised alike.
* Failed trials stay recorded as failed; the model sees them at the worst value observed, so it does
  not propose them again.
* Stopping: a target value (checked first: a session that reached it says so), max experiments, "no
  effect" (every experiment returned the same first-objective value: the trial ignores the parameters),
  a cost budget (the next batch is not started when its expected cost would exceed what is left), or
  patience with a minimum relative improvement.
* Seeded: one ``numpy.random.Generator`` drives the design, RGPE's weight draws, ParEGO's weights and
  (via :func:`seeded_global`) GPy's restarts and Emukit's anchor sampling, so a seed replays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from emukit.bayesian_optimization.acquisitions import ExpectedImprovement
from emukit.bayesian_optimization.loops import BayesianOptimizationLoop
from emukit.core.optimization import GradientAcquisitionOptimizer, RandomSearchAcquisitionOptimizer

from debugtune.engine.tune.data import Objective, Task, Trial, TrialOutcome, TrialRequest, TuningResult, finite
from debugtune.engine.tune.errors import TuneError
from debugtune.engine.tune.pareto import ParEGO, hypervolume, pareto_mask, reference_point
from debugtune.engine.tune.rgpe import RGPEModel, TaskGPs, history_mean, seeded_global
from debugtune.engine.tune.space import SearchSpace

STRATEGIES = ("bayesian", "random")
HISTORY_BATCHES = 2
"""With history, the batches the history leads (its initial design, then one BO step with the history's ensemble)
before the cold start's random points run: a history that misleads costs those and no more, since the session
then holds the cold start's points, one batch later."""
REPLACEMENT_CANDIDATES = 2000
MIN_DISTANCE = 0.02
"""Replacing a repeated proposal: random candidates drawn, and their least distance (encoded space, where
every numeric range is [0, 1]) from the configurations already taken."""


@dataclass(frozen=True)
class StopRule:
    """When a session stops. ``budget`` in card-hours; ``target`` in the first objective's units."""

    max_experiments: int = 5
    budget: float | None = None
    patience: int | None = None
    min_improvement: float = 0.01
    target: float | None = None
    no_effect_trials: int | None = None
    no_effect_tolerance: float = 0.0

    def __post_init__(self) -> None:
        if self.max_experiments < 1:
            raise TuneError(f"max experiments must be at least 1, got {self.max_experiments}")
        if self.budget is not None and not self.budget > 0:
            raise TuneError(f"the cost budget must be positive, got {self.budget}")
        if self.patience is not None and self.patience < 1:
            raise TuneError(f"patience must be at least 1 experiment, got {self.patience}")
        if self.min_improvement < 0:
            raise TuneError(f"the minimum relative improvement must be >= 0, got {self.min_improvement}")
        if self.no_effect_trials is not None and self.no_effect_trials < 2:
            raise TuneError(f"judging 'no effect' needs at least 2 experiments, got {self.no_effect_trials}")


class Tuner:
    """One tuning session over ``space`` (see the module doc)."""

    def __init__(self, space: SearchSpace, objectives: Sequence[Objective], *, history: Sequence[Task] = (),
                 prior: Sequence[tuple[dict[str, Any], dict[str, float]]] = (), seed: int = 0, parallel: int = 1,
                 multi_objective: bool = False, strategy: str = "bayesian", n_init: int | None = None,
                 stop: StopRule | None = None, restarts: int = 1):
        if not objectives:
            raise TuneError("no objective to optimise")
        if multi_objective and len(objectives) < 2:
            raise TuneError("--multi-objective needs at least two objectives")
        if strategy not in STRATEGIES:
            raise TuneError(f"strategy {strategy!r} is not one of {STRATEGIES}")
        if parallel < 1:
            raise TuneError(f"parallel must be at least 1, got {parallel}")
        self.space, self.seed, self.parallel, self.strategy = space, seed, parallel, strategy
        self.objectives = tuple(objectives)
        self.optimised = self.objectives if multi_objective else self.objectives[:1]
        self.stop = stop or StopRule()
        self.rng = np.random.default_rng(seed)
        self.n_init = n_init if n_init is not None else int(np.clip(space.dim + 1, 2, 4))
        self._design = space.sample(self.n_init, np.random.default_rng([seed, 1]))
        """The initial random points, drawn from their own stream: a cold start and a transfer session of one
        seed run the same ones (common random numbers)."""
        self.restarts = restarts
        self.parego = ParEGO(len(self.optimised), self.rng) if multi_objective else None
        self.history = [t for t in (self._encode_task(t) for t in history) if t is not None]
        self.prior_X, self.prior_F = self._encode_rows(prior)
        self.trials: list[Trial] = []
        self._model: RGPEModel | None = None
        self._task_gps = TaskGPs()
        self._weights: dict[str, float] = {}
        self._batch = 0
        self._origin = "bo"
        self._best_trace: list[float] = []
        self._cold: Tuner | None = None
        """The cold start this session falls back to once RGPE drops the history (module doc); None without a
        history-led design."""
        if self.history and not len(self.prior_X) and strategy == "bayesian":
            self._cold = Tuner(space, objectives, seed=seed, parallel=parallel, multi_objective=multi_objective,
                               n_init=self.n_init, stop=stop, restarts=restarts)
        self.history_dropped = False
        """RGPE gave every historical task weight 0 after the history-led batches: the cold start's proposals
        from then on."""

    # -- data ------------------------------------------------------------------------------------------
    def _signed(self, values: dict[str, float]) -> np.ndarray | None:
        row = [values.get(o.name) for o in self.optimised]
        if not all(finite(v) for v in row):
            return None
        return np.array([o.sign * float(v) for o, v in zip(self.optimised, row, strict=True) if v is not None])

    def _encode_rows(self, rows: Sequence[tuple[dict[str, Any], dict[str, float]]]) -> tuple[np.ndarray, np.ndarray]:
        X, F = [], []
        for params, values in rows:
            f = self._signed(values)
            if f is not None and self.space.contains(params):
                X.append(self.space.encode(params))
                F.append(f)
        return (np.array(X).reshape(len(X), self.space.dim), np.array(F).reshape(len(F), len(self.optimised)))

    def _encode_task(self, task: Task) -> tuple[Task, np.ndarray, np.ndarray] | None:
        X, F = self._encode_rows(list(zip(task.configs, task.values, strict=True)))
        return (task, X, F) if len(X) >= 1 else None

    def target_data(self) -> tuple[np.ndarray, np.ndarray]:
        """The target's points and signed objective rows: prior experiments, then ok trials, then failed ones
        imputed with the worst value seen (so the model steers away from them)."""
        X, F = [self.prior_X], [self.prior_F]
        failed = []
        for t in self.trials:
            f = self._signed(t.values) if t.ok else None
            if f is None:
                failed.append(self.space.encode(t.params))
            else:
                X.append(self.space.encode(t.params)[None])
                F.append(f[None])
        Xa, Fa = np.concatenate(X), np.concatenate(F)
        if failed and len(Fa):
            Xa = np.concatenate([Xa, np.array(failed)])
            Fa = np.concatenate([Fa, np.repeat(Fa.max(axis=0, keepdims=True), len(failed), axis=0)])
        return Xa, Fa

    def _scalar(self, F: np.ndarray) -> np.ndarray:
        return self.parego(F) if self.parego is not None else F[:, :1]

    # -- ask -------------------------------------------------------------------------------------------
    def ask(self, n: int | None = None) -> list[dict[str, Any]]:
        """The next batch of configurations (``n`` defaults to the parallel width)."""
        n = n or self.parallel
        X, _ = self.target_data()
        self._weights = {}
        if self.strategy == "random":
            points, origin = self.space.sample(n, self.rng), "random"
        elif self.history and not self.trials and not len(self.prior_X):
            points, origin = self._historical_design(n), "history"
        elif (left := self._random_design_left()) > 0:
            start = self.n_init - left
            points, origin = self._design[start:start + min(n, left)], "random"
        elif len(X) == 0:  # every experiment so far failed: nothing to fit a model to
            points, origin = self.space.sample(n, self.rng), "random"
        elif not self.history_dropped:
            points, origin = self._bo_points(n), "bo"
        if self.history_dropped:
            assert self._cold is not None
            self._origin = "cold"
            configs = self._cold.ask(n)
            self._weights = dict(self._cold._weights)
            return configs
        self._origin = origin
        return [self.space.decode(x) for x in points]

    def _judge_history(self) -> None:
        """Drop the history for good when RGPE, judging it on the target's observations after the batches it led,
        gives every historical task weight 0 (module doc)."""
        if self._cold is None or self.history_dropped or self._batch < HISTORY_BATCHES or not self._weights:
            return
        if any(w > 0 for k, w in self._weights.items() if k != "target"):
            return
        self.history_dropped = True

    def _random_design_left(self) -> int:
        """The initial random points still to run now: a cold start's ``n_init`` (less the target's own earlier
        experiments); with history the same points after `HISTORY_BATCHES` batches, so that a misleading history,
        which crowds the target's first points into its own corner, costs those batches and cannot hold the GP
        there (a session continuing the target's own experiments: none)."""
        done = sum(t.origin == "random" for t in self.trials)
        if not self.history:
            return self.n_init - len(self.prior_X) - done
        if len(self.prior_X) or self._batch < HISTORY_BATCHES:
            return 0
        return self.n_init - done

    def _historical_design(self, n: int) -> np.ndarray:
        order = sorted(range(len(self.history)), key=lambda i: -self.history[i][0].similarity)
        picks: list[np.ndarray] = []
        warm = self._warm_start()
        if warm is not None:
            picks.append(warm)
        scored = []
        for i in order:
            _task, Xh, Fh = self.history[i]
            s = self._scalar(Fh)[:, 0] if len(Fh) > 1 else np.zeros(1)
            scored.append(Xh[np.argsort(s, kind="stable")])
        rank = 0
        while len(picks) < n and any(rank < len(c) for c in scored):
            for cands in scored:
                if rank < len(cands) and len(picks) < n:
                    x = self.space.round(cands[rank])[0]
                    if not any(np.array_equal(x, p) for p in picks):
                        picks.append(x)
            rank += 1
        while len(picks) < n:
            picks.append(self.space.sample(1, self.rng)[0])
        return np.array(picks)

    def _warm_start(self) -> np.ndarray | None:
        """The historical configuration where the history's ensemble mean is lowest (RGPE's mean before the
        target has a point: the uniform average of the tasks' standardised GP means), or None without any
        task of two or more experiments."""
        tasks = [(Xh, self._scalar(Fh)) for _t, Xh, Fh in self.history if len(Xh) >= 2]
        if not tasks:
            return None
        gps = [self._task_gps.get(Xh, yh, self.rng, self.restarts) for Xh, yh in tasks]
        candidates = np.unique(self.space.round(np.concatenate([Xh for Xh, _y in tasks])), axis=0)
        return candidates[int(np.argmin(history_mean(gps, candidates)))]

    def _bo_points(self, n: int) -> np.ndarray:
        if self.parego is not None:
            self.parego.resample()
        X, F = self.target_data()
        Y = self._scalar(F)
        tasks = [(Xh, self._scalar(Fh)) for _t, Xh, Fh in self.history]
        names = [t.name for t, _x, _f in self.history]
        if self._model is None:
            self._model = RGPEModel(X, Y, tasks, rng=self.rng, restarts=self.restarts, task_names=names,
                                    task_gps=self._task_gps)
        else:
            self._model.set_base_tasks(tasks, names)
            self._model.set_data(X, Y)
        model = self._model
        with seeded_global(self.rng):
            model.optimize()
            self._weights = dict(zip([*model.task_names, "target"], map(float, model.weights), strict=True))
            self._judge_history()
            if self.history_dropped:
                return np.zeros((0, self.space.dim))
            if self.space.is_finite:
                optimizer = RandomSearchAcquisitionOptimizer(self.space.emukit, num_eval_points=2000)
            else:
                optimizer = GradientAcquisitionOptimizer(self.space.emukit, num_samples=500, num_anchor=2)
            acquisition = ExpectedImprovement(model)
            loop = BayesianOptimizationLoop(self.space.emukit, model, acquisition, batch_size=n,
                                            acquisition_optimizer=optimizer)
            with np.errstate(all="ignore"):
                points = self._distinct(self.space.round(loop.get_next_points(None)), X, acquisition)
        return points

    def _distinct(self, points: np.ndarray, X: np.ndarray, acquisition: ExpectedImprovement) -> np.ndarray:
        """Each proposal that repeats a configuration the target already has (or an earlier one of the batch)
        is replaced by the best of random candidates under ``acquisition`` that are at least ``MIN_DISTANCE``
        away from all of them. (RGPE's mean at an observed point is the ensemble's, not the observation, so EI
        can stay positive there; a repeated deterministic trial would teach nothing.)"""
        taken = [*X]
        out = []
        for x in points:
            if any(np.allclose(x, t, atol=1e-9) for t in taken):
                cands = self.space.sample(REPLACEMENT_CANDIDATES, self.rng)
                gap = np.min(np.linalg.norm(cands[:, None, :] - np.array(taken)[None], axis=2), axis=1)
                far = cands[gap >= MIN_DISTANCE]
                if len(far):
                    x = far[int(np.argmax(acquisition.evaluate(far)[:, 0]))]
            out.append(x)
            taken.append(x)
        return np.array(out).reshape(len(points), self.space.dim)

    # -- tell ------------------------------------------------------------------------------------------
    def tell(self, requests: Sequence[TrialRequest], outcomes: Sequence[TrialOutcome]) -> list[Trial]:
        """Record a finished batch (same order as the requests)."""
        out = []
        for req, res in zip(requests, outcomes, strict=True):
            status, error = res.status, res.error
            if status == "ok":
                missing = [o.name for o in self.objectives if not finite(res.values.get(o.name))]
                if missing:
                    status = "failed"
                    error = f"trial returned no finite value for objective(s) {', '.join(missing)}"
            t = Trial(index=req.index, params=dict(req.params), values=dict(res.values), cost=float(res.cost),
                      status=status, seed=req.seed, origin=self._origin, batch=self._batch, error=error,
                      seconds=res.seconds, weights=dict(self._weights))
            self.trials.append(t)
            out.append(t)
        if self._cold is not None and self._batch >= HISTORY_BATCHES:  # the cold start sees what it would have run
            if not self.history_dropped:
                self._cold._origin = "random" if self._origin == "random" else "bo"
            self._cold.tell(requests, outcomes)
        self._batch += 1
        self._best_trace.extend([self._progress()] * len(out))
        return out

    # -- progress and stopping ------------------------------------------------------------------------
    @property
    def spent(self) -> float:
        return float(sum(t.cost for t in self.trials))

    def _ok_rows(self) -> tuple[list[Trial], np.ndarray]:
        rows = [(t, self._signed(t.values)) for t in self.trials if t.ok]
        rows = [(t, f) for t, f in rows if f is not None]
        return [t for t, _ in rows], np.array([f for _, f in rows]).reshape(len(rows), len(self.optimised))

    def _progress(self) -> float:
        """A quality figure that grows with progress: -best (one objective) or the front's hypervolume."""
        trials, F = self._ok_rows()
        if not trials:
            return -np.inf
        if self.parego is None:
            return float(-F[:, 0].min())
        return hypervolume(F[pareto_mask(F)], reference_point(F))

    def should_stop(self) -> str | None:
        """Why the session must stop now, or None."""
        rule, n = self.stop, len(self.trials)
        best = self.best()
        if rule.target is not None and best is not None:
            obj = self.objectives[0]
            if obj.better(best.values[obj.name], rule.target):
                return "target"
        if n >= rule.max_experiments:
            return "max-experiments"
        if rule.no_effect_trials is not None and self.no_effect() is not None:
            return "no-effect"
        if rule.budget is not None and self.trials:
            mean_cost = self.spent / n
            if self.spent >= rule.budget or self.spent + mean_cost * min(self.parallel, rule.max_experiments - n) \
                    > rule.budget * (1 + 1e-9):
                return "budget"
        if rule.patience is not None and n > rule.patience:
            if self._stalled(rule.patience, rule.min_improvement):
                return "patience"
        return None

    def no_effect(self) -> tuple[str, float, int] | None:
        """(objective, value, experiments) when at least ``no_effect_trials`` successful experiments, among which
        every parameter took at least two values, all returned the same first-objective value (within
        ``no_effect_tolerance``, relative): the trial does not respond to these parameters. None otherwise."""
        need = self.stop.no_effect_trials
        obj = self.objectives[0]
        ok = [t for t in self.trials if t.ok and finite(t.values.get(obj.name))]
        # every parameter must have moved: three points that share one parameter's value (a joint space's topk at
        # its maximum) may sit on that value's plateau, which says nothing about the others
        if need is None or len(ok) < need or not self.space.all_moved([t.params for t in ok]):
            return None
        values = np.array([t.values[obj.name] for t in ok], dtype=float)
        scale = max(float(np.max(np.abs(values))), 1e-300)
        if float(np.ptp(values)) > self.stop.no_effect_tolerance * scale:
            return None
        return obj.name, float(values[0]), len(ok)

    def _stalled(self, patience: int, min_improvement: float) -> bool:
        trials, F = self._ok_rows()
        if not trials:
            return True
        if self.parego is None:
            before = self._best_trace[-patience - 1]
            now = self._best_trace[-1]
            return not now - before > min_improvement * max(abs(before), 1e-12)
        ref = reference_point(F)
        recent = {t.index for t in self.trials[-patience:]}
        old = np.array([i for i, t in enumerate(trials) if t.index not in recent], dtype=int)
        hv_now = hypervolume(F[pareto_mask(F)], ref)
        hv_old = hypervolume(F[old][pareto_mask(F[old])], ref) if len(old) else 0.0
        return not hv_now - hv_old > min_improvement * max(hv_old, 1e-12)

    def best(self) -> Trial | None:
        """The best trial on the first objective (multi-objective: the Pareto point best on it)."""
        trials, F = self._ok_rows()
        if not trials:
            return None
        if self.parego is not None:
            front = np.flatnonzero(pareto_mask(F))
            return trials[int(front[np.argmin(F[front, 0])])]
        return trials[int(np.argmin(F[:, 0]))]

    def result(self, stop_reason: str) -> TuningResult:
        trials, F = self._ok_rows()
        if self.parego is not None and trials:
            mask = pareto_mask(F)
            pareto = tuple(t for t, m in zip(trials, mask, strict=True) if m)
            hv = hypervolume(F[mask], reference_point(F))
        else:
            pareto, hv = (), None
        return TuningResult(trials=tuple(self.trials), objectives=self.objectives, best=self.best(), pareto=pareto,
                            hypervolume=hv, spent=self.spent, budget=self.stop.budget, stop_reason=stop_reason)

    # -- driver ----------------------------------------------------------------------------------------
    def run(self, evaluate: Callable[[list[TrialRequest]], list[TrialOutcome]], *,
            checkpoint: str | None = None, on_trial: Callable[[Trial], None] | None = None) -> TuningResult:
        """Ask, evaluate and tell until a stop rule fires."""
        while (reason := self.should_stop()) is None:
            room = self.stop.max_experiments - len(self.trials)
            configs = self.ask(min(self.parallel, room))
            start = len(self.trials)
            requests = [TrialRequest(index=start + i, params=c, seed=self.seed, checkpoint=checkpoint)
                        for i, c in enumerate(configs)]
            for t in self.tell(requests, evaluate(requests)):
                if on_trial is not None:
                    on_trial(t)
        return self.result(reason)
