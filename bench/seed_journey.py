"""The seed journey measured against the story (issue 15): experiments to the target and the prevention figure.

    python -m bench.seed_journey [--seeds 5] [--first-seed 100] [--json PATH]

For each seed the seed scenario (a one-block MoE LM whose router starts with a +16 bias on expert 0) is trained
with the probe (300 steps) and diagnosed; then, on the same replay checkpoint (taken before step 0) and the same
trial (`scenarios.moe.replay_trial`: 8 replayed steps, std of the experts' shares of routed tokens), the number
of experiments until that std is at most the story's 15 percentage points, for:

* **transfer (shipped KB)** — `cann-tune auto RUN --top-suggestion` in a store holding the knowledge base as
  shipped: its experiment histories count when a case is similar enough to the run (threshold 0.85);
* **transfer (KB + package)** — the same after importing the case package the demo journey makes from seed 0
  (what "the next team imports"): its experiments are the history;
* **cold BO** — the same tuner without history (`TuneSpec(transfer=False)`);
* **random** — random search over the same remedy's space;
* **manual (remedy grid)** — the remedy's parameters one at a time over their documented ranges (five values,
  low end first), the issue's definition of the grid a person would try;
* **manual (default outward)** — the same values in the other order a person defends: the documented default
  first (for the seed it is also the run's own ``gate_init_std``), then outward from it;
* **manual (symptoms only)** — what a person who sees the symptoms but not the cause tries: every parameter of
  the remedies for the causes of the run's symptoms that the trial sets, one at a time, in a seeded random order.

Each seed's line also gives the first objective over the whole of the top remedy's grid: when every value
of the documented range reaches the target the remedy is a one-shot fix (any grid finds it at once), and the
tuner cannot be fewer experiments than the remedy grid.

A secondary table asks the question where the continuous knobs matter: the experiments until the replay is no
longer an imbalance by the knowledge base's own ExpertImbalance limit (MaxVio of the tokens per expert at most
``moe.imbalance.maxvio``), for `RouterInitRescale` (init_std) and `RouterRebalance` (init_std and the balancing
coefficient), the same arms; the story's 15 points stay the headline.

Costs are the trials' own (replayed steps' time, card-hours) as a share of the run's training cost (its
``step_time_ms``). Arms are capped at 40 experiments ("not reached" beyond). Then the prevention check:
10 fresh seeds of the biased configuration — stopped before launch (`cann-debug lint` of its launch config
exits 1 with the rule learned from seed 0's run) or at attach (`attach(preflight=True)` raises) — and 10 dense
configurations and models (flagged when the learned rule fires on the config or the preflight on the model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from debugtune import journey
from debugtune.api import diagnose
from debugtune.engine.suggest import remedy_details
from debugtune.engine.tune import TuneSpec, auto_tune, find_run_trial
from debugtune.engine.tune.baselines import experiments_to_target, remedy_grid, symptom_grid, symptom_parameters
from debugtune.engine.tune.data import Objective
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge, thresholds
from debugtune.kg.packages import import_package
from debugtune.kg.store import Store

CAP = journey.BASELINE_CAP
ARMS = ("transfer (shipped KB)", "transfer (KB + package)", "cold BO", "random", "manual (remedy grid)",
        "manual (default outward)", "manual (symptoms only)")


def _store(package: Path | None = None) -> Store:
    st = open_store(None)
    load_knowledge(st)
    if package is not None:
        import_package(st, package)
    return st


def _tuner_arm(st: Store, run: str, target: float, *, seed: int, strategy: str = "bayesian",
               transfer: bool = True, remedy: str | None = None, objective: Objective | None = None) -> dict[str, Any]:
    spec = TuneSpec(top_suggestion=remedy is None, remedy=remedy, strategy=strategy, max_experiments=CAP, seed=seed,
                    executor="inline", record=False, transfer=transfer, target=target,
                    objectives=(objective,) if objective else ())
    res = auto_tune(st, run, None, spec)
    n = res.result.experiments_to_target(target)
    cost = sum(t.cost for t in res.result.trials[:n]) if n else res.result.spent
    return {"experiments": n, "cost": cost, "remedy": res.remedy,
            "history": len(res.history.tasks) if transfer and strategy == "bayesian" else 0,
            "run_cost": res.run_cost}


def one_seed(seed: int, work: Path, package: Path, steps: int) -> dict[str, Any]:
    run_dir = work / f"seed-{seed}"
    journey.train_seed(run_dir, seed=seed, steps=steps)
    out: dict[str, Any] = {"seed": seed}
    stores = {"shipped": _store(), "package": _store(package)}
    try:
        for st in stores.values():
            report = diagnose(run_dir, store=st, save=False)
        out["root_cause"] = report.hypotheses[0].cause if report.hypotheses else None
        run = report.run
        trial = find_run_trial(run_dir)
        st = stores["shipped"]
        arms = {"transfer (shipped KB)": _tuner_arm(st, run, trial.target, seed=seed),
                "transfer (KB + package)": _tuner_arm(stores["package"], run, trial.target, seed=seed),
                "cold BO": _tuner_arm(st, run, trial.target, seed=seed, transfer=False),
                "random": _tuner_arm(st, run, trial.target, seed=seed, strategy="random")}
        remedy = arms["cold BO"]["remedy"]
        fn = trial.load().fn

        def call(p):
            return fn(dict(p), checkpoint=trial.checkpoint)

        objective = Objective.parse(trial.objectives[0])
        params = remedy_details(st, remedy).parameters
        for name, grid in (("manual (remedy grid)", remedy_grid(params)),
                           ("manual (default outward)", remedy_grid(params, order="outward")),
                           ("manual (symptoms only)", symptom_grid(symptom_parameters(st, run, trial.parameters),
                                                                   seed))):
            g = experiments_to_target(call, grid[:CAP], objective, trial.target)
            arms[name] = {"experiments": g.experiments, "cost": g.cost}
        whole = [call(p)[objective.name] for p in remedy_grid(params)]
        out["remedy_grid_values"] = {"objective": objective.name, "min": min(whole), "max": max(whole),
                                     "all_reach_target": all(objective.better(v, trial.target) for v in whole)}
        run_cost = arms["cold BO"]["run_cost"]
        for a in arms.values():
            a["share"] = a["cost"] / run_cost if run_cost else None
        out["arms"], out["remedy"], out["run_cost_card_hours"] = arms, remedy, run_cost
        out["kb_target"] = kb_target_arms(st, run, call, seed=seed, run_cost=run_cost)
    finally:
        for st in stores.values():
            st.close()
    return out


KNOB_REMEDIES = ("RouterInitRescale", "RouterRebalance")
"""The GateInitBias remedies the seed's trial can apply whose parameters are continuous (init_std; init_std and
the balancing coefficient)."""
KNOB_ARMS = ("transfer (shipped KB)", "cold BO", "random", "manual (remedy grid)", "manual (default outward)")


def kb_target_arms(st: Store, run: str, call: Any, *, seed: int, run_cost: float) -> dict[str, Any]:
    """Experiments until the replay is no longer an imbalance by the knowledge base's own threshold (MaxVio of
    the tokens per expert at most ``moe.imbalance.maxvio``, the ExpertImbalance detector's limit), where the
    continuous knobs matter: a secondary figure beside the story's 15 points, not in its place."""
    limit = thresholds(st)["moe.imbalance.maxvio"]
    objective = Objective("max_vio")
    out: dict[str, Any] = {"objective": "max_vio", "target": limit}
    for remedy in KNOB_REMEDIES:
        params = remedy_details(st, remedy).parameters
        arms = {"transfer (shipped KB)": _tuner_arm(st, run, limit, seed=seed, remedy=remedy, objective=objective),
                "cold BO": _tuner_arm(st, run, limit, seed=seed, transfer=False, remedy=remedy,
                                      objective=objective),
                "random": _tuner_arm(st, run, limit, seed=seed, strategy="random", remedy=remedy,
                                     objective=objective)}
        for name, order in (("manual (remedy grid)", "low"), ("manual (default outward)", "outward")):
            g = experiments_to_target(call, remedy_grid(params, order=order)[:CAP], objective, limit)
            arms[name] = {"experiments": g.experiments, "cost": g.cost}
        for a in arms.values():
            a["share"] = a["cost"] / run_cost if run_cost else None
        out[remedy] = arms
    return out


def prevention(learned_from: Path, work: Path, seeds: range) -> dict[str, Any]:
    """Stopped biased configurations and flagged dense ones, with the rule learned from ``learned_from``'s run."""
    from debugtune.api import attach
    from debugtune.engine.prevent import Linter
    from debugtune.engine.prevent.learn import LearnError, learn_from_run
    from debugtune.engine.prevent.preflight import PreflightError, preflight
    from debugtune.scenarios.moe import build_moe, seed_scenario

    st = _store()
    try:
        report = diagnose(learned_from, store=st, save=False)
        try:
            rule = learn_from_run(st, report.run).rule_id
        except LearnError as err:
            rule, why = None, str(err)
        linter = Linter.from_store(st)
        biased, dense = [], []
        for i, seed in enumerate(seeds):
            cfg = seed_scenario(seed=seed)
            path = work / f"launch-moe-{seed}.json"
            path.write_text(journey.launch_config(cfg, moe=True), encoding="utf-8")
            lint = linter.lint_path(str(path))
            job = build_moe(cfg)
            try:
                attach(job.model, job.optimizer, work / f"attach-{seed}", preflight=True, store=st,
                       hardware=False).close()
                at_attach = False
            except PreflightError:
                at_attach = True
            biased.append({"seed": seed, "lint_exit": 1 if lint.errors else 0, "stopped_at_attach": at_attach,
                           "learned_rule_fired": bool(rule and rule in lint.rule_ids())})
            dcfg = replace(cfg, d_model=32 + 16 * (i % 3), d_ff=48 + 16 * (i % 4), n_layers=1 + i % 3,
                           lr=[3e-3, 1e-3, 3e-4][i % 3], batch_size=[16, 32][i % 2])
            dpath = work / f"launch-dense-{seed}.json"
            dpath.write_text(journey.launch_config(dcfg, moe=False), encoding="utf-8")
            dlint = linter.lint_path(str(dpath))
            torch.manual_seed(seed)
            width = dcfg.d_model
            model = torch.nn.Sequential(torch.nn.Linear(width, dcfg.d_ff), torch.nn.GELU(),
                                        torch.nn.Linear(dcfg.d_ff, width))
            dense.append({"seed": seed, "lint_exit": 1 if dlint.errors else 0,
                          "learned_rule_fired": bool(rule and rule in dlint.rule_ids()),
                          "flagged_at_attach": not preflight(model, st).ok})
    finally:
        st.close()
    stopped = sum(b["lint_exit"] == 1 or b["stopped_at_attach"] for b in biased)
    flagged = sum(d["learned_rule_fired"] or d["flagged_at_attach"] for d in dense)
    return {"rule": rule, "rule_error": None if rule else why, "biased": biased, "dense": dense,
            "stopped": stopped, "stopped_before_launch": sum(b["lint_exit"] == 1 for b in biased),
            "stopped_at_attach": sum(b["stopped_at_attach"] for b in biased), "dense_flagged": flagged,
            "dense_lint_errors": sum(d["lint_exit"] for d in dense)}


def _median(values: list[int | None]) -> float | None:
    """Median experiments, a 'not reached' counted as the cap + 1 (so it ranks last); None when none reached."""
    got = [CAP + 1 if v is None else v for v in values]
    return statistics.median(got) if any(v is not None for v in values) else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="seed-journey-"))
    # the package the next team imports: the demo journey on seed 0 (diagnose, tune, contribute with sandbox)
    origin = work / "seed-scenario"
    journey.train_seed(origin, seed=0, steps=args.steps)
    st = _store()
    try:
        report = diagnose(origin, store=st, save=False)
        tuning = journey.tune_step(st, report.run, origin, seed=0, baselines=False)
        package = Path(journey.contribute_step(st, report.run, origin, work / "seed-case.zip", tuning)["path"])
    finally:
        st.close()
    print(f"package from seed 0: {package.name} ({tuning['experiments']} experiment(s) of {tuning['remedy']})")
    rows = []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        row = one_seed(seed, work, package, args.steps)
        rows.append(row)
        g = row["remedy_grid_values"]
        print(f"seed {seed}: root cause {row['root_cause']}, remedy {row['remedy']} ({g['objective']} "
              f"{g['min']:.1f}-{g['max']:.1f} over its grid"
              f"{': every value reaches the target' if g['all_reach_target'] else ''}): " + ", ".join(
                  f"{k} {v['experiments'] if v['experiments'] is not None else '-'}" for k, v in row["arms"].items()),
              flush=True)
    medians = {a: _median([r["arms"][a]["experiments"] for r in rows]) for a in ARMS}
    shares = {a: statistics.median([r["arms"][a]["share"] for r in rows if r["arms"][a]["share"] is not None])
              for a in ARMS}
    print(f"\nexperiments to expert-utilisation std <= 15 pp over {len(rows)} seeds (median; cost share of the run's "
          "training at the target):")
    print(f"{'arm':28s} {'median':>7s} {'cost share':>11s}")
    for a in ARMS:
        m = medians[a]
        print(f"{a:28s} {('-' if m is None else f'{m:g}'):>7s} {shares[a]:>10.1%}")
    one_shot = sum(r["remedy_grid_values"]["all_reach_target"] for r in rows)
    print(f"the top remedy reaches the target at every value of its documented range on {one_shot} of {len(rows)} "
          "seeds" + (" (a one-shot fix: no tuner can beat the remedy grid there)" if one_shot else ""))
    best = medians["transfer (KB + package)"]
    for manual in ("manual (remedy grid)", "manual (default outward)", "manual (symptoms only)"):
        if best and medians[manual]:
            print(f"{manual} / transfer (KB + package): {medians[manual] / best:.2g}x")
    kb = rows[0]["kb_target"]
    print(f"\nsecondary, where the continuous knobs matter: experiments until {kb['objective']} <= {kb['target']:g} "
          "(the knowledge base's moe.imbalance.maxvio: no longer an ExpertImbalance), median over the seeds:")
    print(f"{'arm':28s} " + " ".join(f"{r:>18s}" for r in KNOB_REMEDIES))
    knob_medians = {r: {a: _median([row["kb_target"][r][a]["experiments"] for row in rows]) for a in KNOB_ARMS}
                    for r in KNOB_REMEDIES}
    for a in KNOB_ARMS:
        print(f"{a:28s} " + " ".join(f"{('-' if knob_medians[r][a] is None else f'{knob_medians[r][a]:g}'):>18s}"
                                     for r in KNOB_REMEDIES))
    prev = prevention(origin, work, range(args.first_seed + 1000, args.first_seed + 1010))
    print(f"\nprevention: rule {prev['rule'] or 'none (' + str(prev['rule_error']) + ')'}")
    print(f"biased configurations stopped: {prev['stopped']}/10 (before launch by lint "
          f"{prev['stopped_before_launch']}, at attach {prev['stopped_at_attach']}); dense configurations flagged: "
          f"{prev['dense_flagged']}/10 "
          f"(lint errors on them: {prev['dense_lint_errors']})")
    result = {"seeds": rows, "medians": medians, "cost_shares": shares, "prevention": prev, "one_shot_seeds": one_shot,
              "kb_target_medians": knob_medians,
              "seconds": round(time.perf_counter() - t0, 1)}
    print(f"({result['seconds']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
