"""The seed journey, step by step: diagnose → suggest → tune by replay → contribute and reuse → prevent.

`cann-debug demo` runs these steps on the seed scenario (docs/demo.md) and ``bench/seed_journey.py`` measures
them over several seeds. Each step returns a plain dict (the ``--json`` object of the demo has one key per
step); nothing here decides a threshold — targets, budgets and rules come from the scenario's declared trial
and the knowledge base.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.infer import DiagnosisReport
from debugtune.engine.suggest import applicable_first, near_misses, similar_cases, stored_cases, suggest
from debugtune.engine.suggest.similarity import normalised_similarity, run_signature
from debugtune.engine.telemetry import read_telemetry
from debugtune.engine.tune import Objective, TuneSpec, auto_tune
from debugtune.engine.tune.baselines import (
    experiments_to_target,
    remedy_grid,
    symptom_grid,
    symptom_parameters,
)
from debugtune.engine.tune.run_trial import RunTrial, find_run_trial
from debugtune.kg.namespaces import local_name
from debugtune.kg.store import Store

Say = Callable[[str], None]

TUNING_BUDGET = "5%"
"""The story's budget: the experiments may cost 5% of the run's own training."""
MAX_EXPERIMENTS = 4
"""The story's cap: a handful of experiments (four), not seventeen."""
PATIENCE = 2
"""Stop after two experiments without improvement (the story's patience)."""
SANDBOX_STEPS = 120
"""Steps the package's sandbox trains without and with the remedy: at the scenario's balancing coefficient a
reset router needs about a hundred steps to bring MaxVio under the knowledge base's imbalance threshold."""
BASELINE_CAP = 40
"""The baselines' cap on experiments (a baseline that has not reached the target by then is reported as not)."""


def _quiet(_text: str) -> None:
    pass


# -- step 1: train and diagnose ------------------------------------------------------------------------------
def train_seed(run_dir: Path, *, seed: int, steps: int) -> float:
    """Train the seed scenario with the probe into ``run_dir`` (replacing it) and its replay checkpoint before
    step 0; returns the seconds taken."""
    import torch

    from debugtune.scenarios.moe import seed_scenario, train_moe

    torch.set_num_threads(1)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.perf_counter()
    train_moe(seed_scenario(seed=seed, steps=steps), run_dir, probe=True, run_id=run_dir.name)
    return time.perf_counter() - t0


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
    """The report, and the expert-utilisation figures over the imbalance the diagnosis found (whole run besides)."""
    imbalance = next((f for f in report.findings if f.symptom == "ExpertImbalance"), None)
    window = (imbalance.onset_step, imbalance.end_step) if imbalance is not None else None
    return {**report.as_dict(), "expert_utilisation": utilisation(run_dir, window),
            "expert_utilisation_run": utilisation(run_dir)}


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
def tune_step(store: Store, run_id: str, run_dir: Path, *, seed: int, baselines: bool = True,
              record: bool = True, on_trial: Callable[[Any], None] | None = None) -> dict[str, Any]:
    """``cann-tune auto RUN --top-suggestion`` with the run's own trial, the story's budget, cap and patience;
    the std before (the run itself over the replayed steps, which the baseline replay repeats bit for bit) and
    after; and, with ``baselines``, random search and the manual grids on the same checkpoint."""
    run_trial = find_run_trial(run_dir)
    if run_trial is None:
        raise ValueError(f"{run_dir} has no replay checkpoint: the seed scenario writes one before step 0")
    spec = TuneSpec(top_suggestion=True, budget=TUNING_BUDGET, max_experiments=MAX_EXPERIMENTS, patience=PATIENCE,
                    seed=seed, executor="inline", record=record)
    res = auto_tune(store, run_id, None, spec, on_trial=on_trial)
    first = res.result.objectives[0].name
    horizon = _horizon(run_trial)
    before = utilisation(run_dir, (run_trial.step, run_trial.step + horizon - 1))
    best = res.result.best
    out = {"remedy": res.remedy, "experiments": len(res.result.trials),
           "trials": [t.as_dict() for t in res.result.trials], "best": best.as_dict() if best else None,
           "stop_reason": res.result.stop_reason, "no_effect": res.no_effect, "target": run_trial.target,
           "objectives": [str(o) for o in res.result.objectives],
           "experiments_to_target": res.result.experiments_to_target(run_trial.target)
           if run_trial.target is not None else None,
           "expert_util_std_before": before["std_pp"],
           "expert_util_std_after": best.values.get(first) if best else None,
           "cost_card_hours": res.result.spent, "run_cost_card_hours": res.run_cost, "budget_share": res.budget_share,
           "budget_card_hours": res.budget, "history": res.history.as_dict(),
           "passed_over": [a.as_dict() for a in res.passed_over], "session": res.session}
    if baselines:
        out["baselines"] = baselines_for(store, run_id, run_trial, res.space.parameters, seed=seed)
    return out


def _horizon(run_trial: RunTrial) -> int:
    from debugtune.engine.tune.replay import Checkpoint

    return int(Checkpoint.load(run_trial.checkpoint).extra.get("horizon_steps", 1))


def baselines_for(store: Store, run_id: str, run_trial: RunTrial, parameters: Any, *, seed: int,
                  arms: tuple[str, ...] = ("random", "manual", "manual_without_diagnosis")) -> dict[str, Any]:
    """Experiments to the target on the same checkpoint: random search over the tuned remedy, the remedy's
    one-parameter-at-a-time grid, and the grid of a person who sees the symptoms but not the cause."""
    if run_trial.target is None:
        raise ValueError(f"the baselines count experiments to a target; the trial of {run_id} states none "
                         "(run.json trial.target)")
    target = run_trial.target
    objective = Objective.parse(run_trial.objectives[0])
    trial = run_trial.load()

    def call(params: Mapping[str, Any]) -> dict[str, float]:
        return dict(trial.fn(dict(params), checkpoint=run_trial.checkpoint))

    out: dict[str, Any] = {}
    if "random" in arms:
        spec = TuneSpec(top_suggestion=True, strategy="random", max_experiments=BASELINE_CAP, seed=seed,
                        executor="inline", record=False, objectives=(objective,), target=target,
                        settable=run_trial.parameters, checkpoint=run_trial.checkpoint)
        res = auto_tune(store, run_id, trial, spec)
        out["random"] = {"experiments": res.result.experiments_to_target(target),
                         "tried": len(res.result.trials), "cost_card_hours": res.result.spent}
    if "manual" in arms:
        out["manual"] = experiments_to_target(call, remedy_grid(parameters)[:BASELINE_CAP], objective,
                                              target).as_dict()
    if "manual_without_diagnosis" in arms:
        grid = symptom_grid(symptom_parameters(store, run_id, run_trial.parameters), seed)
        out["manual_without_diagnosis"] = experiments_to_target(call, grid[:BASELINE_CAP], objective,
                                                                target).as_dict()
    return out


# -- step 4: contribute, import into a fresh store, reuse on another seed -----------------------------------
def contribute_step(store: Store, run_id: str, run_dir: Path, out: Path, tuning: Mapping[str, Any]) -> dict[str, Any]:
    """Package the run as a case with its sandbox (fault and the best experiment's remedy), scrubbed and
    SHACL-checked; the sandbox runs here once so the package states a claim that held."""
    from debugtune.engine.contribute import ContributeError, ContributeOptions, contribute
    from debugtune.scenarios.moe import MoEConfig, remedy_config, seed_scenario

    cfg, healthy = seed_scenario(), MoEConfig()
    fault = {f.name: getattr(cfg, f.name) for f in fields(MoEConfig)
             if f.name not in ("seed", "steps", "data_seed") and getattr(cfg, f.name) != getattr(healthy, f.name)}
    best = tuning["best"]["params"] if tuning.get("best") else {}
    sandbox = {"fault": fault, "remedy": remedy_config(cfg, best), "steps": SANDBOX_STEPS, "seed": 0}
    objective = tuning["objectives"][0] if tuning.get("objectives") else None
    options = ContributeOptions(
        attribution="debugtune demo", title="seed scenario: router biased at initialisation",
        description="A one-block MoE LM whose router starts with a +16 logit bias towards expert 0; tuned by "
                    "replay from a checkpoint taken before step 0.", objective=objective, sandbox=sandbox)
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


def reuse_step(package: Path, run_dir: Path, *, seed: int, steps: int, first_experiments: int,
               say: Say = _quiet) -> dict[str, Any]:
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
        say("tuning it from the imported case")
        tuning = tune_step(fresh, report.run, run_dir, seed=seed, baselines=False, record=False)
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
    from debugtune.scenarios.moe import seed_scenario

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
    cfg = seed_scenario(seed=seed)
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
    """Build the next run's model (the seed's biased configuration, or the healthy one) and attach the probe with
    ``preflight=True``: a biased router stops it before step 1."""
    from debugtune.api import attach
    from debugtune.engine.prevent.preflight import PreflightError
    from debugtune.scenarios.moe import MoEConfig, build_moe, seed_scenario

    job = build_moe(seed_scenario(seed=seed) if biased else replace(MoEConfig(), seed=seed))
    try:
        probe = attach(job.model, job.optimizer, run_dir, preflight=True, store=store, hardware=False)
    except PreflightError as err:
        return {"stopped": True, "before_step": job.step + 1, "findings": [f.as_dict() for f in err.result.findings],
                "judged": {k: list(v) for k, v in err.result.judged.items()}}
    probe.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"stopped": False, "findings": []}
