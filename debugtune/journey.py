"""The seed journey, step by step: diagnose → suggest → tune by replay → contribute and reuse → prevent.

The scenario is the seed story's chain (`scenarios.moe_chain`): a gate whose gradient vanishes, utilisation that
drifts, routed tokens that cross cabinets; its fix is a joint tuning of several remedies to several targets.

`cann-debug demo` runs these steps on the seed scenario (docs/demo.md) and ``bench/seed_journey.py`` measures
them over several seeds. Each step returns a plain dict (the ``--json`` object of the demo has one key per
step); nothing here decides a threshold — targets, budgets and rules come from the scenario's declared trial
and the knowledge base.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.infer import DiagnosisReport
from debugtune.engine.suggest import applicable_first, near_misses, remedy_details, similar_cases, stored_cases, suggest
from debugtune.engine.suggest.similarity import normalised_similarity, run_signature
from debugtune.engine.telemetry import read_telemetry
from debugtune.engine.tune import TuneSpec, auto_tune
from debugtune.engine.tune.baselines import coordinate_search, tpe_search
from debugtune.engine.tune.run_trial import RunTrial, find_run_trial, record_replay_point
from debugtune.engine.tune.targets import Targets, diagnosis_targets
from debugtune.kg.namespaces import local_name
from debugtune.kg.store import Store

Say = Callable[[str], None]

TUNING_BUDGET = "5%"
"""The story's budget: the experiments may cost 5% of the run's own training."""
MAX_EXPERIMENTS = 12
"""A cap above what the budget allows: the budget is what stops a session that has history."""
FIRST_RUN_CAP = 30
"""The first run has no history that reports the story's figures: it is tuned until they are met, at most this many
experiments and no budget (what solving it the first time costs), so its case carries a solution."""
SANDBOX_STEPS = 120
"""Steps the package's sandbox trains without and with the remedy."""
BASELINE_CAP = 20
"""The baselines' cap on experiments (a baseline that has not reached the targets by then is reported as not)."""
CHAIN_REMEDIES = ("RouterInitRescale", "AddLocalityLoss", "RaiseLearningRate", "RaiseRouterTopK", "EnableAuxLoss")
"""The joint fix the story tunes, in the order the manual procedure walks it: a new gate (the root cause's top
suggestion), the locality loss (the remedy the knowledge base gives for the cross-cabinet finding), a higher
learning rate so the new gate relearns within the replay, top-k routing and the balancing coefficient. The run's
own ranking (``--suggestions 1,2,3``: RouterInitRescale, RouterRebalance, CapExpertCapacity) cannot touch the
cross-cabinet share: its union has no locality knob."""
CHAIN_SYMPTOMS = ("ExpertImbalance", "CrossCabinetTraffic")
"""The story's findings whose thresholds are the targets (with the loss margin), whatever a run's own diagnosis
reached over its whole training."""


def _quiet(_text: str) -> None:
    pass


# -- step 1: train and diagnose ------------------------------------------------------------------------------
def train_seed(run_dir: Path, *, seed: int, steps: int | None = None, **changes: Any) -> float:
    """Train the seed chain (`scenarios.moe_chain`) with the probe into ``run_dir`` (replacing it), a training
    checkpoint every 250 steps; returns the seconds taken."""
    import torch

    from debugtune.scenarios.moe_chain import seed_chain, train_chain

    torch.set_num_threads(1)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    train_chain(seed_chain(seed, **changes), run_dir, run_id=run_dir.name, steps=steps)
    return time.perf_counter() - t0


def cross_cabinet(run_dir: str | Path, steps: tuple[int, int] | None = None) -> dict[str, Any]:
    """The share of dispatched tokens that crossed cabinets, as the probe recorded it (median and max over steps
    ``[first, last]``, default all)."""
    tel = read_telemetry(run_dir, metrics="cross_cabinet_share")
    step, value = tel.table.column("step").to_numpy(), tel.table.column("value").to_numpy()
    keep = np.ones(len(step), dtype=bool) if steps is None else (step >= steps[0]) & (step <= steps[1])
    if not keep.any():
        return {"median": None, "max": None, "steps": []}
    return {"median": float(np.median(value[keep])), "max": float(np.max(value[keep])),
            "steps": [int(step[keep].min()), int(step[keep].max())]}


def utilisation(run_dir: str | Path, steps: tuple[int, int] | None = None) -> dict[str, Any]:
    """Per-expert share of the routed tokens the probe recorded (steps ``[first, last]`` inclusive, default all),
    their standard deviation in percentage points, max and min (`scenarios.moe.expert_utilisation`)."""
    from debugtune.scenarios.moe import expert_utilisation

    tel = read_telemetry(run_dir, metrics="expert_tokens")
    tb = tel.table
    step = tb.column("step").to_numpy()
    entity = np.asarray(tb.column("entity").to_pylist())
    value = tb.column("value").to_numpy()
    keep = np.ones(len(step), dtype=bool) if steps is None else (step >= steps[0]) & (step <= steps[1])
    experts = sorted({e for e in entity[keep]}, key=lambda e: int(e.rsplit(":", 1)[-1]))
    totals = np.array([value[keep & (entity == e)].sum() for e in experts])
    out = expert_utilisation(totals)
    out.update(steps=[int(step[keep].min()), int(step[keep].max())] if keep.any() else [], experts=len(experts))
    return out


def diagnosis_step(report: DiagnosisReport, run_dir: Path) -> dict[str, Any]:
    """The report, the expert-utilisation figures over the imbalance the diagnosis found (whole run besides) and
    the cross-cabinet share over the cross-cabinet finding (whole run besides)."""

    def window(symptom: str) -> tuple[int, int] | None:
        f = next((f for f in report.findings if f.symptom == symptom), None)
        return (f.onset_step, f.end_step) if f is not None else None

    return {**report.as_dict(), "expert_utilisation": utilisation(run_dir, window("ExpertImbalance")),
            "expert_utilisation_run": utilisation(run_dir),
            "cross_cabinet": cross_cabinet(run_dir, window("CrossCabinetTraffic")),
            "cross_cabinet_run": cross_cabinet(run_dir)}


# -- step 2: suggestions the run's trial can apply ----------------------------------------------------------
def suggestions_step(store: Store, run_id: str, run_trial: RunTrial | None, top: int = 3) -> dict[str, Any]:
    """The top ``top`` applicable suggestions with effect, risk, cost, change and the cases they rest on, and
    the better-ranked ones the trial cannot apply (shown as such, never first)."""
    ranked = suggest(store, run_id)
    judged = applicable_first(ranked, run_trial.parameters if run_trial else None)
    signature = run_signature(store, run_id)
    cases = {c.case: c for c in stored_cases(store)}
    rank = {s.remedy: i + 1 for i, s in enumerate(ranked)}
    out: list[dict[str, Any]] = []
    for a in judged:
        s = a.suggestion
        if a.applicable and sum(x["applicable"] for x in out) >= top:
            continue
        rests = [{"case": local_name(c), "label": cases[c].label, "outcome": cases[c].outcome,
                  "similarity": round(normalised_similarity(signature, cases[c].signature), 3)}
                 for c in s.cases if c in cases]
        out.append({"rank": rank[s.remedy], "remedy": s.remedy, "label": s.label, "score": round(s.score, 4),
                    "applicable": a.applicable, "not_applicable_because": a.reason or None,
                    "effectiveness": s.effectiveness, "risk": s.risk, "cost_card_hours": s.cost,
                    "success_rate": round(s.success_rate, 3), "addresses": list(s.addresses),
                    "parameters": [p.name for p in s.parameters],
                    "operation": [{"key": c.key, "from": c.from_value, "to": c.to_value} for c in s.config_changes],
                    "cases": rests})
    return {"suggestions": out, "settable": list(run_trial.parameters) if run_trial else None}


# -- step 3: tune by replay ------------------------------------------------------------------------------------
def replay_point(run_dir: Path) -> RunTrial:
    """``cann-tune checkpoint RUN --step 250``: the run's training checkpoint the story replays from."""
    from debugtune.scenarios.moe_chain import REPLAY_STEP

    return record_replay_point(run_dir, REPLAY_STEP)


def chain_targets(store: Store) -> Targets:
    """The story's joint targets: the knowledge base's bounds for `CHAIN_SYMPTOMS` and the loss margin."""
    return diagnosis_targets(store, CHAIN_SYMPTOMS)


def tune_step(store: Store, run_id: str, run_dir: Path, *, seed: int, baselines: bool = True,
              record: bool = True, transfer: bool = True, cap: int = BASELINE_CAP, first: bool = False,
              on_trial: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``cann-tune auto RUN --remedies <CHAIN_REMEDIES> --target-set diagnosis --budget 5%`` with the run's own
    trial from its replay point (``first``: no budget, at most `FIRST_RUN_CAP` experiments): the experiments, the
    three figures before (the run resumed unchanged) and after, their cost as a share of the run's; with
    ``baselines``, the other arms on the same checkpoint (`chain_arms`)."""
    from debugtune.engine.tune.targets import VIOLATION

    run_trial = find_run_trial(run_dir) or replay_point(run_dir)
    targets = chain_targets(store)
    spec = TuneSpec(remedies=CHAIN_REMEDIES, targets=targets, budget=None if first else TUNING_BUDGET,
                    max_experiments=FIRST_RUN_CAP if first else MAX_EXPERIMENTS, seed=seed, executor="inline",
                    record=record, transfer=transfer)
    res = auto_tune(store, run_id, None, spec, on_trial=on_trial)
    before = targets.with_violation(_call(run_trial)({}))
    best = res.result.best
    n = res.result.experiments_to_target(0.0)
    out = {"remedy": res.remedy, "remedies": list(res.remedies), "experiments": len(res.result.trials),
           "trials": [t.as_dict() for t in res.result.trials], "best": best.as_dict() if best else None,
           "stop_reason": res.result.stop_reason, "targets": targets.as_dict(), "target_text": str(targets),
           "objectives": [str(o) for o in res.result.objectives], "experiments_to_target": n,
           "replay_step": run_trial.step, "before": {k: before.get(k) for k in (*targets.metrics, VIOLATION)},
           "after": {k: best.values.get(k) for k in (*targets.metrics, VIOLATION)} if best else None,
           "cost_card_hours": res.result.spent, "run_cost_card_hours": res.run_cost, "budget_share": res.budget_share,
           "budget_card_hours": res.budget, "budget": None if first else TUNING_BUDGET,
           "history": res.history.as_dict(), "session": res.session}
    if baselines:
        out["baselines"] = chain_arms(store, run_id, run_trial, targets, seed=seed, cap=cap)
    return out


def _call(run_trial: RunTrial) -> Callable[[Mapping[str, Any]], dict[str, float]]:
    fn = run_trial.load().fn
    return lambda params: dict(fn(dict(params), checkpoint=run_trial.checkpoint))


ARMS = ("cold BO", "random", "Optuna TPE", "manual (KB order)")


def chain_arms(store: Store, run_id: str, run_trial: RunTrial, targets: Targets, *, seed: int, cap: int,
               arms: tuple[str, ...] = ARMS) -> dict[str, Any]:
    """Experiments to every target on the same checkpoint and joint space: the tuner without history (cold BO),
    random search, Optuna's TPE (when installed) and the manual procedure, one knob at a time in the knowledge
    base's order keeping the best (`coordinate_search`); each with the cost it spent until then."""
    call = _call(run_trial)
    out: dict[str, Any] = {}
    spec = TuneSpec(remedies=CHAIN_REMEDIES, targets=targets, max_experiments=cap, seed=seed, executor="inline",
                    record=False, checkpoint=run_trial.checkpoint, settable=run_trial.parameters)
    space = None
    for arm, kw in (("cold BO", {"transfer": False}), ("random", {"strategy": "random"})):
        if arm in arms:
            res = auto_tune(store, run_id, None, replace(spec, **kw))
            space, n = res.space, res.result.experiments_to_target(0.0)
            out[arm] = {"experiments": n, "tried": len(res.result.trials),
                        "cost_card_hours": sum(t.cost for t in res.result.trials[:n]) if n else res.result.spent}
    parameters = [p for r in CHAIN_REMEDIES for p in remedy_details(store, r).parameters]
    spent = [0.0]

    def violation(params: Mapping[str, Any]) -> float:
        values = call(params)
        spent[0] += values.get("cost", 0.0)
        vio = targets.violation(values)
        return math.inf if vio is None else vio

    if "Optuna TPE" in arms and _has_optuna():
        from debugtune.engine.tune.space import SearchSpace

        n = tpe_search(space or SearchSpace(parameters), violation, seed=seed, cap=cap, target=0.0)
        out["Optuna TPE"] = {"experiments": n, "cost_card_hours": spent[0]}
    if "manual (KB order)" in arms:
        g = coordinate_search(lambda p: targets.with_violation(call(p)), parameters, targets.objective, 0.0, cap=cap)
        out["manual (KB order)"] = {"experiments": g.experiments, "tried": len(g.tried), "cost_card_hours": g.cost}
    return out


def _has_optuna() -> bool:
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


# -- step 4: contribute, import into a fresh store, reuse on another seed -----------------------------------
def contribute_step(store: Store, run_id: str, run_dir: Path, out: Path, tuning: Mapping[str, Any]) -> dict[str, Any]:
    """Package the run as a case with its sandbox (fault and the best experiment's remedy), scrubbed and
    SHACL-checked; the sandbox runs here once so the package states a claim that held."""
    from debugtune.engine.contribute import ContributeError, ContributeOptions, contribute
    from debugtune.scenarios.moe import MoEConfig, remedy_config
    from debugtune.scenarios.moe_chain import seed_chain

    cfg, healthy = seed_chain(), MoEConfig()
    fault = {f.name: getattr(cfg, f.name) for f in fields(MoEConfig)
             if f.name not in ("seed", "steps", "data_seed") and getattr(cfg, f.name) != getattr(healthy, f.name)}
    best = tuning["best"]["params"] if tuning.get("best") else {}
    sandbox = {"fault": fault, "remedy": remedy_config(cfg, best), "steps": SANDBOX_STEPS, "seed": 0}
    objective = tuning["objectives"][0] if tuning.get("objectives") else None
    options = ContributeOptions(
        attribution="debugtune demo", title="seed chain: a saturated gate over experts on four cabinets",
        description="A one-block MoE LM (8 experts on 4 cabinets, a locality loss) whose gate is initialised with "
                    "std 10: its gradient vanishes, utilisation drifts and routed tokens cross cabinets; tuned "
                    "jointly by replay from its training checkpoint at step 250.", objective=objective,
        sandbox=sandbox)
    notes = []
    try:
        res = contribute(store, run_id, out, run_dir=run_dir, options=options)
    except ContributeError as err:
        if "does not support the case's claim" not in str(err):
            raise
        notes.append(f"packaged without a sandbox: {err}")
        res = contribute(store, run_id, out, run_dir=run_dir, options=replace(options, sandbox=None))
    return {"path": str(res.path), "id": res.case, "content_hash": res.content_hash, "cause": res.cause,
            "remedy": res.remedy, "sandbox": res.sandbox.as_dict() if res.sandbox else None, "notes": notes}


def reuse_step(package: Path, run_dir: Path, *, seed: int, steps: int | None, first_experiments: int,
               baselines: bool = True, say: Say = _quiet) -> dict[str, Any]:
    """A fresh store imports the package; the next run of the scenario (another seed) is diagnosed there, finds
    the case among its similar cases and starts its tuning from it."""
    from debugtune.api import diagnose
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge
    from debugtune.kg.packages import import_package

    fresh = open_store(None)
    try:
        load_knowledge(fresh)
        imported = import_package(fresh, package)
        say(f"training the next run (seed {seed})")
        train_seed(run_dir, seed=seed, steps=steps)
        say("diagnosing it in the fresh store")
        report = diagnose(run_dir, store=fresh)
        similar = similar_cases(fresh, report.run)
        near = near_misses(fresh, report.run) if not similar else []
        say("recording its replay point and tuning it from the imported case"
            + (" (then the other arms on the same checkpoint)" if baselines else ""))
        replay_point(run_dir)
        tuning = tune_step(fresh, report.run, run_dir, seed=seed, baselines=baselines, record=False)
    finally:
        fresh.close()
    found = [c for c in similar if c.case in imported.cases]
    return {"store": "a fresh in-memory store with the knowledge base", "imported": imported.as_dict(),
            "run": report.run, "root_cause": report.hypotheses[0].cause if report.hypotheses else None,
            "similar_cases": [{"case": c.case, "label": c.label, "score": round(c.score, 4), "cause": c.cause,
                               "remedy": c.remedy, "imported": c.case in imported.cases} for c in similar],
            "found_package_case": bool(found),
            "near_misses": [{"case": local_name(c.case), "score": round(c.score, 4), "cause": c.cause} for c in near],
            "history": tuning["history"], "experiments_first": first_experiments,
            "experiments_second": tuning["experiments"], "tuning": tuning}


# -- step 5: prevention ------------------------------------------------------------------------------------
def launch_config(cfg: Any, *, moe: bool) -> str:
    """The scenario's launch configuration in our YAML (Megatron keys), or its dense twin (no experts)."""
    settings: dict[str, Any] = {
        "num_layers": cfg.n_layers, "hidden_size": cfg.d_model, "ffn_hidden_size": cfg.d_ff,
        "num_attention_heads": cfg.n_heads, "seq_length": cfg.seq_len, "max_position_embeddings": cfg.seq_len,
        "micro_batch_size": cfg.batch_size, "global_batch_size": cfg.batch_size, "lr": cfg.lr,
        "train_iters": cfg.steps, "seed": cfg.seed}
    if moe:
        settings.update({"num_experts": cfg.num_experts, "moe_router_topk": cfg.top_k,
                         "moe_aux_loss_coeff": cfg.aux_loss_coeff, "moe_expert_capacity_factor": cfg.capacity_factor,
                         "moe_router_pre_softmax": True, "moe_router_enable_expert_bias": False})
    return json.dumps({"framework": "megatron", "launch": {"world_size": 1}, "settings": settings}, indent=2) + "\n"


def prevention_step(store: Store, run_id: str, workdir: Path, *, seed: int) -> dict[str, Any]:
    """``lint --learn``: the run's confirmed cause becomes a rule (with its scope); the seed's launch config and a
    dense one are linted with it; and the next biased model is checked at attach (``preflight=True``)."""
    from debugtune.engine.prevent import Linter
    from debugtune.engine.prevent.learn import LearnError, learn_from_run
    from debugtune.scenarios.moe_chain import seed_chain

    out: dict[str, Any] = {}
    try:
        rule = learn_from_run(store, run_id)
        out["rule"] = rule.rule_id
        out["rule_message"] = rule.message
        out["rule_severity"] = rule.severity
    except LearnError as err:
        rule = None
        out["rule"] = None
        out["rule_error"] = str(err)
    linter = Linter.from_store(store)
    cfg = seed_chain(seed=seed)
    for kind, moe in (("moe", True), ("dense", False)):
        path = workdir / f"launch-{kind}.json"
        path.write_text(launch_config(cfg, moe=moe), encoding="utf-8")
        res = linter.lint_path(str(path))
        out[f"lint_{kind}_exit"] = 1 if res.errors else 0
        out[f"lint_{kind}"] = {"path": str(path), "errors": len(res.errors), "warnings": len(res.warnings),
                               "learned_rule_fired": bool(rule and rule.rule_id in res.rule_ids()),
                               "violations": [f"{v.rule_id} ({v.severity}): {v.message}" for v in res.violations]}
    out["attach_check"] = attach_check(store, workdir / "next-run", seed=seed)
    return out


def attach_check(store: Store, run_dir: Path, *, seed: int, biased: bool = True) -> dict[str, Any]:
    """Build the next run's model (the seed's faulty configuration, or the healthy one) and attach the probe with
    ``preflight=True``: a saturated gate stops it before step 1."""
    from debugtune.api import attach
    from debugtune.engine.prevent.preflight import PreflightError
    from debugtune.scenarios.moe import build_moe
    from debugtune.scenarios.moe_chain import healthy_chain, seed_chain

    job = build_moe(seed_chain(seed=seed) if biased else healthy_chain(seed=seed))
    try:
        probe = attach(job.model, job.optimizer, run_dir, preflight=True, store=store, hardware=False)
    except PreflightError as err:
        return {"stopped": True, "before_step": job.step + 1, "findings": [f.as_dict() for f in err.result.findings],
                "judged": {k: list(v) for k, v in err.result.judged.items()}}
    probe.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"stopped": False, "findings": []}
