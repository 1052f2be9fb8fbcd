"""The seed story measured: a gate whose gradient vanishes, a joint fix that needs a search, the tuners side by side.

    python -m bench.seed_journey [--seeds 10] [--first-seed 100] [--cap 30] [--json PATH]

The scenario is `debugtune.scenarios.moe_chain` (eight experts on four cabinets, a locality loss, a gate initialised
with std 10). Every run is trained with the probe (3,000 steps, a training checkpoint every 250), diagnosed, and
given its replay point with ``cann-tune checkpoint RUN --step 250`` (`journey.replay_point`). Its targets are the
knowledge base's bounds for the story's findings (`journey.chain_targets`: utilisation std, cross-cabinet share,
loss against the healthy reference), the same for every run; its trial replays 32 steps from that point (about
1% of the training each).

History: related runs (seeds 1 and 2, and a wider model, seed 3) are trained and diagnosed into the graph and solved
there by random search, what an engineer without a tuner does, until their targets are met (at most ``--history``
experiments, all recorded): what earlier, solved incidents left behind. The targets are other seeds and sizes
(``--first-seed`` on, every third one with the wider feed-forward).

For each target, the same trial and the same joint space (the remedies of ``REMEDIES``) under every arm:

* **transfer BO** — `auto_tune` with the graph's history (RGPE over the related runs' experiments, which count
  when their findings are similar to the target's);
* **cold BO**, **random search**, **Optuna TPE** (the ``bench`` extra) and the **manual** procedure (one knob at a
  time over its documented values, keeping the best, in the order the knowledge base ranks the remedies), all from
  `journey.chain_arms`;
* **transfer, misleading history** — transfer whose related experiments are mirrored (each parameter reflected
  in its range, so the history's optimum lies where the target's is not).

Experiments to reach every target (the violation of `Targets` at most 0), capped at ``--cap`` ("not reached" counts
as cap + 1 in the median and 90th percentile). Then the **needs-a-search check**: every remedy of the joint space
alone over its whole documented grid on every target run; any single experiment that meets every target fails the
bench (the scenario would be a one-shot fix, as issue 15's was).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from debugtune.api import diagnose  # noqa: E402
from debugtune.engine.suggest import remedy_details  # noqa: E402
from debugtune.engine.tune import TuneSpec, auto_tune  # noqa: E402
from debugtune.engine.tune.baselines import needs_search  # noqa: E402
from debugtune.engine.tune.run_trial import RunTrial  # noqa: E402
from debugtune.engine.tune.space import SearchSpace  # noqa: E402
from debugtune.engine.tune.targets import Targets  # noqa: E402
from debugtune.journey import CHAIN_REMEDIES, CHAIN_SYMPTOMS, chain_arms, chain_targets, replay_point  # noqa: E402
from debugtune.kg import open_store  # noqa: E402
from debugtune.kg.knowledge import load_knowledge  # noqa: E402
from debugtune.kg.store import Store  # noqa: E402
from debugtune.scenarios.moe_chain import seed_chain, train_chain  # noqa: E402

REMEDIES = CHAIN_REMEDIES
WIDE = {"d_ff": 64}
"""A second model size: related run seed 3 and every third target use it."""
ARMS = ("transfer BO", "cold BO", "Optuna TPE", "random", "manual (KB order)")
MISLEADING = "transfer, misleading history"


def _fresh_store() -> Store:
    st = open_store(None)
    load_knowledge(st)
    return st


def prepare(store: Store, work: Path, seed: int, changes: Mapping[str, Any],
            steps: int | None = None) -> tuple[str, RunTrial, Targets, list[str]]:
    """Train a chain run, diagnose it into ``store``, record its replay point: its trial, the story's targets
    (`diagnosis_targets` of the chain's symptoms) and the chain's symptoms its own diagnosis found."""
    run_dir = work / f"chain-{seed}"
    train_chain(seed_chain(seed, **changes), run_dir, run_id=run_dir.name, steps=steps)
    report = diagnose(run_dir, store=store, save=False)
    trial = replay_point(run_dir)
    found = sorted({f.symptom for f in report.findings} & set(CHAIN_SYMPTOMS))
    return report.run, trial, chain_targets(store), found


def _spec(trial: RunTrial, targets: Targets, *, seed: int, cap: int, transfer: bool = True,
          strategy: str = "bayesian", record: bool = False) -> TuneSpec:
    return TuneSpec(remedies=REMEDIES, targets=targets, strategy=strategy, transfer=transfer, max_experiments=cap,
                    seed=seed, executor="inline", record=record, checkpoint=trial.checkpoint,
                    settable=trial.parameters)


def tuner_arm(store: Store, run: str, trial: RunTrial, targets: Targets, **kw: Any) -> dict[str, Any]:
    res = auto_tune(store, run, None, _spec(trial, targets, **kw))
    n = res.result.experiments_to_target(0.0)
    return {"experiments": n, "cost": sum(t.cost for t in res.result.trials[:n]) if n else res.result.spent,
            "run_cost": res.run_cost, "history": len(res.history.tasks)}


def mirrored_store(source: Store, related: Sequence[tuple[str, Path]], space: SearchSpace) -> Store:
    """A fresh store holding the related runs (diagnosed again) with their experiments mirrored: every numeric
    parameter reflected in its range (on the log for a log scale), so the same landscape has its optimum moved,
    a history that misleads."""
    from debugtune.kg.assertions import add_experiments
    from debugtune.kg.records import Experiment

    st = _fresh_store()
    for run, run_dir in related:
        diagnose(run_dir, store=st, save=False)
        rows = source.select(f"""SELECT ?e ?params WHERE {{ ?e a dt:Experiment ; dt:inRun ?r ;
            dt:parametersJson ?params . ?r dt:runId "{run}" }}""").dicts()
        exps = []
        for i, r in enumerate(rows):
            values = {str(m["name"]): float(m["value"]) for m in source.select(
                f"SELECT ?name ?value WHERE {{ <{r['e']}> dt:objective ?o . ?o dt:metricName ?name ; dt:value ?value }}"
            ).dicts()}
            exps.append(Experiment(id=f"mirror-{run}-{i:03d}", remedy=REMEDIES[0],
                                   parameters=_mirror(space, json.loads(r["params"])), objectives=values, cost=0.0,
                                   seed=0, status="ok"))
        add_experiments(st, run, exps)
    return st


def _mirror(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(params)
    for p in space.parameters:
        if p.name not in params or p.kind == "categorical" or p.low is None or p.high is None:
            continue
        lo, hi, v = float(p.low), float(p.high), float(params[p.name])
        if p.scale == "log" and lo > 0 and v > 0:
            m = math.exp(math.log(lo) + math.log(hi) - math.log(v))
        else:
            m = lo + hi - v
        out[p.name] = int(round(m)) if p.kind == "integer" else m
    return out


def _p(values: list[int | None], q: float, cap: int) -> float:
    got = sorted(cap + 1 if v is None else v for v in values)
    return float(np.percentile(got, q, method="higher")) if got else float("nan")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--cap", type=int, default=30)
    ap.add_argument("--history", type=int, default=60,
                    help="the most experiments random search runs on each related run (it stops at the targets)")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default the scenario's 3,000)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="seed-journey-"))
    store = _fresh_store()
    related = []
    for seed, changes in ((1, {}), (2, {}), (3, WIDE)):
        run, trial, targets, _found = prepare(store, work, seed, changes, args.steps)
        res = auto_tune(store, run, None, _spec(trial, targets, seed=seed, cap=args.history, strategy="random",
                                                record=True))
        related.append((run, work / run))
        print(f"history: {run} ({'wide' if changes else 'base'}) searched at random, {len(res.result.trials)} "
              f"experiments recorded, targets reached at {res.result.experiments_to_target(0.0) or '-'}", flush=True)
    rows = []
    for i, seed in enumerate(range(args.first_seed, args.first_seed + args.seeds)):
        changes = WIDE if i % 3 == 2 else {}
        run, trial, targets, found = prepare(store, work, seed, changes, args.steps)
        fn = trial.load().fn

        def call(p: Mapping[str, Any], fn: Any = fn, trial: RunTrial = trial) -> dict[str, float]:
            return dict(fn(dict(p), checkpoint=trial.checkpoint))

        params = {r: remedy_details(store, r).parameters for r in REMEDIES}
        space = SearchSpace([p for ps in params.values() for p in ps])
        before = call({})
        arms = {"transfer BO": tuner_arm(store, run, trial, targets, seed=seed, cap=args.cap)}
        arms.update({a: {"experiments": v["experiments"], "cost": v["cost_card_hours"]} for a, v in
                     chain_arms(store, run, trial, targets, seed=seed, cap=args.cap).items()})
        mirror = mirrored_store(store, related, space)
        try:
            diagnose(work / f"chain-{seed}", store=mirror, save=False)
            arms[MISLEADING] = tuner_arm(mirror, run, trial, targets, seed=seed, cap=args.cap)
        finally:
            mirror.close()
        checked, one_shot = needs_search(call, params, targets.met)
        run_cost = arms["transfer BO"]["run_cost"]
        for a in arms.values():
            a["share"] = a["cost"] / run_cost if run_cost else None
        row = {"seed": seed, "size": "wide" if changes else "base", "targets": str(targets), "diagnosed": found,
               "before": {k: before.get(k) for k in targets.metrics}, "arms": arms,
               "needs_search": {"experiments": checked, "one_shot": [o.__dict__ for o in one_shot]},
               "history_tasks": arms["transfer BO"]["history"]}
        rows.append(row)
        named = ", ".join(found) or "none of the chain"
        print(f"target seed {seed} ({row['size']}; diagnosed {named}): before " + ", ".join(
            f"{k} {v:.3g}" for k, v in row["before"].items() if v is not None) + " | " + ", ".join(
            f"{k} {v['experiments'] or '-'}" for k, v in arms.items()) +
            f" | single remedies: {checked} experiments, {len(one_shot)} reach every target", flush=True)
    cap = args.cap
    table = {}
    for a in (a for a in (*ARMS, MISLEADING) if all(a in r["arms"] for r in rows)):  # TPE: the bench extra
        got = [r["arms"][a]["experiments"] for r in rows]
        shares = [r["arms"][a]["share"] for r in rows if r["arms"][a]["experiments"] and r["arms"][a]["share"]]
        table[a] = {"median": _p(got, 50, cap), "p90": _p(got, 90, cap),
                    "within_5": sum(1 for g in got if g is not None and g <= 5) / len(got),
                    "cost_share_median": statistics.median(shares) if shares else None,
                    "reached": sum(g is not None for g in got)}
    print(f"\nexperiments to reach every target over {len(rows)} target runs (cap {cap}; not reached = {cap + 1}):")
    print(f"{'arm':32s} {'median':>7s} {'p90':>5s} {'<=5':>6s} {'reached':>8s} {'cost share':>11s}")
    for a, t in table.items():
        share = "-" if t["cost_share_median"] is None else f"{t['cost_share_median']:.1%}"
        print(f"{a:32s} {t['median']:>7g} {t['p90']:>5g} {t['within_5']:>6.0%} {t['reached']:>5d}/{len(rows):<2d} "
              f"{share:>11s}")
    tr = table["transfer BO"]["median"]
    ratios = {a: table[a]["median"] / tr for a in ("manual (KB order)", "cold BO", "Optuna TPE") if tr and a in table}
    print("transfer BO against: " + ", ".join(f"{a} {r:.2g}x" for a, r in ratios.items()))
    worse = [r["seed"] for r in rows if (r["arms"][MISLEADING]["experiments"] or cap + 1)
             > (r["arms"]["cold BO"]["experiments"] or cap + 1) + 2]
    print(f"misleading history: transfer worse than cold BO + 2 on {len(worse)} of {len(rows)} runs"
          + (f" (seeds {', '.join(map(str, worse))})" if worse else ""))
    one_shots = sum(len(r["needs_search"]["one_shot"]) for r in rows)
    checked = sum(r["needs_search"]["experiments"] for r in rows)
    verdict = "PASS" if one_shots == 0 else "FAIL"
    print(f"needs a search: {checked} single-remedy experiments over each remedy's documented grid, {one_shots} "
          f"reach every target alone: {verdict}")
    result = {"rows": rows, "table": table, "ratios": ratios, "misleading_worse_than_cold_plus_2": worse,
              "needs_search": {"experiments": checked, "one_shot": one_shots, "verdict": verdict},
              "seconds": round(time.perf_counter() - t0, 1)}
    print(f"({result['seconds']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
    store.close()
    if verdict == "FAIL":
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
