"""A whole tuning session for a run: remedy → search space → history → loop → experiments in the graph.

This is what ``cann-tune auto`` runs. The remedy is given or is the run's top suggestion; its tuning
parameters (from the graph) make the search space; the experiments of similar cases and runs make the
history; trials run through an executor; each finished trial is recorded in the run's graph at once.
A budget written ``5%`` is a fraction of the run's own training cost in card-hours: ``card_hours`` in
its ``run.json``, else the sum of ``step_time_ms`` over every rank and step of its telemetry.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from debugtune.engine.suggest import Applicability, applicability, remedy_details, run_signature, suggest
from debugtune.engine.telemetry import TelemetryError, read_run_json, read_telemetry
from debugtune.engine.tune.data import Objective, Task, TrialOutcome, TrialRequest, TuningResult
from debugtune.engine.tune.errors import TuneError
from debugtune.engine.tune.history import History, load_history
from debugtune.engine.tune.record import new_session_id, record_trial
from debugtune.engine.tune.run_trial import RUN_CHECKPOINT, find_run_trial
from debugtune.engine.tune.space import SearchSpace
from debugtune.engine.tune.targets import Targets
from debugtune.engine.tune.trials import RESERVED, CommandTrial, TrialFunction, make_executor
from debugtune.engine.tune.tuner import StopRule, Tuner
from debugtune.kg.assertions import runs
from debugtune.kg.knowledge import thresholds
from debugtune.kg.records import Suggestion
from debugtune.kg.store import Store


@dataclass(frozen=True)
class Budget:
    """A cost budget: a fraction of the run's training cost (``"5%"``) or card-hours (``"12.5"``)."""

    fraction: float | None = None
    card_hours: float | None = None

    @classmethod
    def parse(cls, text: str) -> Budget:
        raw = text.strip().lower()
        try:
            if raw.endswith("%"):
                value = float(raw[:-1]) / 100.0
                if not 0 < value <= 100:
                    raise ValueError
                return cls(fraction=value)
            value = float(raw.removesuffix("h"))
        except ValueError:
            raise TuneError(f"--budget {text!r}: expected a percentage of the run's cost (5%) "
                            "or card-hours (12.5)") from None
        if not (math.isfinite(value) and value > 0):
            raise TuneError(f"--budget {text!r}: must be positive")
        return cls(card_hours=value)

    def resolve(self, run_cost: float | None, run_id: str) -> float:
        if self.card_hours is not None:
            return self.card_hours
        if run_cost is None or run_cost <= 0:
            raise TuneError(f"a budget in % needs the training cost of run {run_id!r}: put \"card_hours\" in its "
                            "run.json, record step_time_ms telemetry, or give the budget in card-hours")
        if self.fraction is None:
            raise TuneError("a budget needs card-hours or a share of the run's cost")
        return float(self.fraction) * run_cost


def run_cost(run_dir: str | Path | None) -> float | None:
    """The run's training cost in card-hours (see module doc), or None when it cannot be told."""
    if run_dir is None or not Path(run_dir).is_dir():
        return None
    path = Path(run_dir)
    if (path / "run.json").exists():
        meta = read_run_json(path)
        value = meta.get("card_hours")
        if value is not None:
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise TuneError(f"{path / 'run.json'}: card_hours must be a positive number, got {value!r}")
            return float(value)
    try:
        tel = read_telemetry(path, metrics="step_time_ms", columns=["value"])
    except TelemetryError:
        return None
    total = float(tel.table.column("value").to_numpy().sum()) if len(tel) else 0.0
    return total / 3.6e6 if total > 0 else None


@dataclass(frozen=True)
class TuneSpec:
    """What ``cann-tune auto`` was asked (defaults as in the CLI)."""

    remedy: str | None = None
    top_suggestion: bool = False
    objectives: tuple[Objective, ...] = ()
    """Empty: what the run's own trial declares, else ``loss``."""
    multi_objective: bool | None = None
    """None: several objectives when the run's own trial declares several and none were given."""
    strategy: str = "bayesian"
    checkpoint: str | None = None
    max_experiments: int = 5
    budget: str | None = None
    parallel: int = 1
    seed: int = 0
    patience: int | None = None
    min_improvement: float = 0.01
    target: float | None = None
    timeout_s: float | None = None
    executor: str = "process"
    similarity: float | None = None
    run_dir: str | None = None
    record: bool = True
    settable: tuple[str, ...] | None = None
    """The tuning parameters the trial can set (None: unknown, any); a remedy needing others is not tuned."""
    transfer: bool = True
    """Use the history of similar cases and runs (False: a cold start, the benchmarks' baseline)."""
    remedies: tuple[str, ...] = ()
    """Several remedies tuned together (the union of their parameters): a joint tuning."""
    suggestions: tuple[int, ...] = ()
    """Ranks (1-based) among the run's suggestions the trial can apply, tuned together."""
    targets: Targets | None = None
    """Joint targets: the session minimises their violation and stops when every one is met."""


@dataclass(frozen=True)
class AutoResult:
    """The session: remedy, space, history used, the tuning result, budget and what was recorded."""

    run_id: str
    remedy: str
    session: str
    space: SearchSpace
    history: History
    result: TuningResult
    budget: float | None
    run_cost: float | None
    recorded: tuple[str, ...] = field(default_factory=tuple)
    passed_over: tuple[Applicability, ...] = ()
    """Suggestions ranked above the tuned remedy that the trial cannot apply."""
    remedies: tuple[str, ...] = ()
    """Every remedy a joint tuning tunes (``remedy`` is the first)."""
    targets: Targets | None = None

    @property
    def no_effect(self) -> str | None:
        """Why the session stopped early when the parameters had no effect on the run, else None."""
        if self.result.stop_reason != "no-effect":
            return None
        obj = self.result.objectives[0].name
        values = {t.values[obj] for t in self.result.trials if t.ok and obj in t.values}
        shown = ", ".join(f"{v:.6g}" for v in sorted(values))
        return (f"{', '.join(self.space.names)} had no effect on this run: {len(self.result.trials)} experiments "
                f"at different values all gave {obj} = {shown}")

    @property
    def budget_share(self) -> float | None:
        """The spend as a fraction of the run's training cost."""
        return self.result.spent / self.run_cost if self.run_cost else None

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "remedy": self.remedy, "session": self.session,
                "parameters": [p.__dict__ for p in self.space.parameters], "history": self.history.as_dict(),
                "prior_experiments": len(self.history.prior), "budget_card_hours": self.budget,
                "run_cost_card_hours": self.run_cost, "budget_share": self.budget_share,
                "recorded": list(self.recorded), "no_effect": self.no_effect,
                "passed_over": [a.as_dict() for a in self.passed_over],
                "remedies": list(self.remedies or (self.remedy,)),
                "targets": self.targets.as_dict() if self.targets else None, **self.result.as_dict()}


def choose_remedy(store: Store, run_id: str, remedy: str | None, top_suggestion: bool,
                  settable: tuple[str, ...] | None = None) -> tuple[Suggestion, tuple[Applicability, ...]]:
    """The remedy to tune and the suggestions passed over for it: the one named, or the run's best-ranked
    suggestion whose tuning parameters the trial can all set (``settable``; None: any)."""
    if bool(remedy) == bool(top_suggestion):
        raise TuneError("give exactly one of --remedy ID and --top-suggestion")
    if remedy:
        chosen = remedy_details(store, remedy)
        judged = applicability(chosen, settable)
        if not judged.applicable:
            raise TuneError(f"remedy {chosen.remedy} cannot be tuned on run {run_id!r}: {judged.reason}")
        return chosen, ()
    ranked = suggest(store, run_id)
    passed: list[Applicability] = []
    for s in ranked:
        a = applicability(s, settable)
        if a.applicable:
            return remedy_details(store, s.remedy), tuple(passed)
        passed.append(a)
    if not ranked:
        raise TuneError(f"no suggested remedy for run {run_id!r} (diagnose the run first?)")
    why = "; ".join(f"{a.suggestion.remedy}: {a.reason}" for a in passed)
    raise TuneError(f"no suggested remedy for run {run_id!r} can be tuned with this trial ({why})")


def choose_remedies(store: Store, run_id: str, spec: TuneSpec,
                    settable: tuple[str, ...] | None) -> tuple[list[Suggestion], tuple[Applicability, ...]]:
    """The remedies a session tunes: the one of `choose_remedy`, the ``remedies`` named, or the ``suggestions``
    ranks among the run's suggestions the trial can apply (passed over: the better-ranked ones it cannot)."""
    if sum(map(bool, (spec.remedy, spec.top_suggestion, spec.suggestions, spec.remedies))) > 1:
        raise TuneError("give exactly one of --remedy ID, --top-suggestion, --suggestions 1,2,3 and --remedies A,B")
    if spec.remedies:
        return [choose_remedy(store, run_id, r, False, settable)[0] for r in spec.remedies], ()
    if not spec.suggestions:
        chosen, passed = choose_remedy(store, run_id, spec.remedy, spec.top_suggestion, settable)
        return [chosen], passed
    judged = [applicability(s, settable) for s in suggest(store, run_id)]
    usable = [a.suggestion for a in judged if a.applicable]
    wrong = [r for r in spec.suggestions if not 1 <= r <= len(usable)]
    if wrong:
        raise TuneError(f"--suggestions {','.join(map(str, spec.suggestions))}: run {run_id!r} has "
                        f"{len(usable)} suggestion(s) this trial can apply (cann-debug query \"suggest for run "
                        f"{run_id}\")")
    last = usable[max(spec.suggestions) - 1].remedy
    skipped: list[Applicability] = []
    for a in judged:
        if a.suggestion.remedy == last:
            break
        if not a.applicable:
            skipped.append(a)
    return [remedy_details(store, usable[r - 1].remedy) for r in spec.suggestions], tuple(skipped)


def joint_parameters(chosen: list[Suggestion]) -> list[Any]:
    """The union of the remedies' tuning parameters, each name once (the first remedy's definition)."""
    seen: dict[str, Any] = {}
    for s in chosen:
        for p in s.parameters:
            seen.setdefault(p.name, p)
    return list(seen.values())


def joint_history(history: History, space: SearchSpace, targets: Targets | None) -> History:
    """The history as a joint tuning reads it: each experiment's configuration completed with the documented
    defaults of the parameters it did not set (a paper's sweep varies one knob, the rest at its setting), and with
    joint targets its values given their (partial) violation; rows outside the space are left out."""
    defaults = {p.name: p.default for p in space.parameters}

    def rows(pairs):
        out = []
        for params, values in pairs:
            config = {**defaults, **{k: v for k, v in params.items() if k in defaults}}
            vals = targets.with_violation(values, partial=True) if targets else dict(values)
            if space.contains(config) and (targets is None or targets.objective.name in vals):
                out.append((config, vals))
        return out

    tasks = []
    for t in history.tasks:
        kept = rows(zip(t.configs, t.values, strict=True))
        if kept:
            tasks.append(Task(t.name, tuple(c for c, _ in kept), tuple(v for _, v in kept), t.similarity, t.source))
    return History(tuple(tasks), tuple(rows(history.prior)), history.skipped)


def run_directory(store: Store, run_id: str, given: str | None) -> str | None:
    """The run's directory: ``given``, else the one stored for it (``dt:runDir``), else None."""
    if given:
        return given
    for r in runs(store):
        if r["run"] == run_id:
            return r.get("dir")
    return None


def with_run_trial(store: Store, run_id: str, trial: TrialFunction | None,
                   spec: TuneSpec) -> tuple[TrialFunction, TuneSpec]:
    """The trial and the spec to run. A given ``trial`` keeps the spec (objectives default to ``loss``);
    without one, the trial the run's replay checkpoint declares (`run_trial`; an error when it has none)
    fills what the spec leaves open: objectives (several at once when it declares several and none were
    given), the target, the checkpoint and the parameters the trial can set."""
    if spec.targets is not None:
        spec = replace(spec, objectives=(spec.targets.objective, *(Objective(m) for m in spec.targets.metrics)),
                       multi_objective=False, target=0.0)
    if trial is not None:
        return trial, replace(spec, objectives=spec.objectives or (Objective("loss"),),
                              multi_objective=bool(spec.multi_objective))
    run_dir = run_directory(store, run_id, spec.run_dir)
    declared = find_run_trial(run_dir)
    if declared is None:
        where = f" ({Path(run_dir) / RUN_CHECKPOINT} does not exist)" if run_dir else " (no run directory known)"
        raise TuneError(f"run {run_id!r} has no trial of its own{where}: give --trial CMD or --trial-fn "
                        "module:function, or save a replay checkpoint with debugtune.checkpoint (docs/tune.md)")
    objectives = spec.objectives or tuple(Objective.parse(o) for o in declared.objectives)
    multi = spec.multi_objective if spec.multi_objective is not None else (not spec.objectives and len(objectives) > 1)
    target = spec.target if spec.target is not None or spec.objectives else declared.target
    return declared.load(), replace(spec, objectives=objectives, multi_objective=multi, target=target,
                                    checkpoint=spec.checkpoint or declared.checkpoint,
                                    settable=spec.settable if spec.settable is not None else declared.parameters)


def auto_tune(store: Store, run_id: str, trial: TrialFunction | None, spec: TuneSpec, *,
              on_start: Callable[[Tuner, History], None] | None = None,
              on_trial: Callable[[Any], None] | None = None) -> AutoResult:
    """Run one tuning session for ``run_id`` with ``trial`` (a CommandTrial or CallableTrial; None: the run's
    own trial, see `with_run_trial`)."""
    run_signature(store, run_id)  # an unknown run raises here, naming the closest ones
    trial, spec = with_run_trial(store, run_id, trial, spec)
    settable = spec.settable
    if settable is None and isinstance(trial, CommandTrial) and spec.top_suggestion:
        settable = tuple(f for f in trial.fields() if f not in RESERVED)  # the template's fields are what it sets
    remedies, passed = choose_remedies(store, run_id, spec, settable)
    chosen = remedies[0]
    space = SearchSpace(joint_parameters(remedies))
    if isinstance(trial, CommandTrial):
        trial.check(space.names, checkpoint=spec.checkpoint is not None)
    replay_ref = None
    if spec.checkpoint is not None:
        from debugtune.engine.tune.replay import Checkpoint  # needs torch

        replay_ref = str(Checkpoint.load(spec.checkpoint).path)
    cost = run_cost(run_directory(store, run_id, spec.run_dir))
    budget = Budget.parse(spec.budget).resolve(cost, run_id) if spec.budget else None
    names = [o.name for o in spec.objectives]
    targets = spec.targets
    history = load_history(store, run_id, [r.remedy for r in remedies], targets.metrics if targets else names,
                           threshold=spec.similarity, any_objective=targets is not None)
    if len(remedies) > 1 or targets is not None:
        history = joint_history(history, space, targets)
    transfer = spec.strategy == "bayesian" and spec.transfer
    tuner = Tuner(space, spec.objectives, history=history.tasks if transfer else (),
                  prior=history.prior, seed=spec.seed, parallel=spec.parallel,
                  multi_objective=bool(spec.multi_objective), strategy=spec.strategy,
                  stop=StopRule(max_experiments=spec.max_experiments, budget=budget, patience=spec.patience,
                                min_improvement=spec.min_improvement, target=spec.target,
                                **_no_effect_rule(store)))
    session = new_session_id()
    recorded: list[str] = []

    def finished(t):
        if spec.record:
            recorded.append(record_trial(store, run_id, chosen.remedy, session, t, replay_ref).id)
        if on_trial is not None:
            on_trial(t)

    if on_start is not None:
        on_start(tuner, history)
    executor = make_executor(trial, spec.executor, parallel=spec.parallel, timeout_s=spec.timeout_s)

    def evaluate(requests: list[TrialRequest]) -> list[TrialOutcome]:
        outcomes = executor(requests)
        if targets is None:
            return outcomes
        return [replace(o, values=targets.with_violation(o.values)) for o in outcomes]

    try:
        result = tuner.run(evaluate, checkpoint=replay_ref, on_trial=finished)
    finally:
        executor.close()
    return AutoResult(run_id, chosen.remedy, session, space, history, result, budget, cost, tuple(recorded), passed,
                      tuple(r.remedy for r in remedies), targets)


def _no_effect_rule(store: Store) -> dict[str, Any]:
    """The knowledge base's 'no effect' stop (``tune.no_effect.*``, cases/thresholds/tune.ttl); off without it."""
    th = thresholds(store)
    if "tune.no_effect.trials" not in th:
        return {}
    values = th.require("tune.no_effect.trials", "tune.no_effect.relative_tolerance")
    return {"no_effect_trials": int(values["tune.no_effect.trials"]),
            "no_effect_tolerance": values["tune.no_effect.relative_tolerance"]}
