"""The MoE gate-initialisation scenario with real tiny MoE trainings as trials (bench (a) of tuning).

The faulty run: the tiny MoE LM of ``debugtune.scenarios.moe`` with the GateInitBias fault of the fault
catalogue (router bias +8 on expert 0). A checkpoint is taken at step 5, before the imbalance is
diagnosed; every trial replays ``segment`` steps from it (``tune.replay``) with the trial's parameters
and measures the expert-utilisation CV over the last ``window`` steps and the mean loss of the last 10.
The search space is the graph's: ``init_std`` of kb:RouterInitRescale and ``aux_loss_coeff`` of
kb:EnableAuxLoss (Switch re-scales the router and relies on the balancing loss together). The
objective is ``cv + 10 * max(0, loss / baseline_loss - 1)``, the baseline being the faulty run
replayed unchanged; the target ``cv <= 0.15`` with loss no worse than the baseline is objective <= 0.15.

Related tasks (other seeds, a wider model, another expert count) were tuned before: each is a
cold-start session of ``history_n`` trials whose experiments are stored in the graph as a run with the
GateInitBias signature, and the transfer arm reads them back with ``tune.load_history``. Their trial
results are cached in a JSON file (deterministic replays: the same configuration gives the same value).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from debugtune.engine.suggest import remedy_details
from debugtune.engine.tune import SearchSpace, Task, load_history
from debugtune.engine.tune.replay import Checkpoint, replay
from debugtune.kg import open_store
from debugtune.kg.assertions import add_experiments, replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import Experiment, Finding
from debugtune.scenarios.moe import MoEConfig, apply_overrides, build_moe, expert_balance, train_step

REMEDY = "RouterInitRescale"
TO_MOE = {"init_std": "gate_init_std", "aux_loss_coeff": "aux_loss_coeff"}
FAULT = {"gate_bias": 8.0, "gate_bias_experts": 1}
TARGET_CV = 0.15
RELATED = {"seed1": {"seed": 1, "data_seed": 1}, "seed2": {"seed": 2, "data_seed": 2},
           "wider": {"seed": 3, "data_seed": 3, "d_model": 48, "d_ff": 64},
           "experts6": {"seed": 4, "data_seed": 4, "num_experts": 6}}
CACHE = Path(os.environ.get("DEBUGTUNE_BENCH_CACHE", Path.home() / ".cache" / "debugtune")) / "tuning-moe.json"


def signature() -> list[Finding]:
    """What diagnose reports for this fault (the knowledge base's Switch-InitScale case signature)."""
    return [Finding("f1", "ExpertImbalance", "gradient", "blocks.0.moe/expert:0", 5, 80, 0.7),
            Finding("f2", "RouterGradVanishing", "gradient", "blocks.0.moe.router", 5, 80, 0.5),
            Finding("f3", "LossOscillation", "convergence", "", 10, 80, 0.4)]


def search_space(store) -> SearchSpace:
    return SearchSpace([*remedy_details(store, REMEDY).parameters, *remedy_details(store, "EnableAuxLoss").parameters])


class MoETask:
    """One faulty MoE training, its checkpoint, its baseline, and trials replayed from the checkpoint."""

    def __init__(self, name: str, overrides: dict[str, Any], *, segment: int, window: int, workdir: Path):
        torch.set_num_threads(1)
        self.name, self.segment, self.window = name, segment, window
        self.cfg = replace(MoEConfig(**FAULT), **overrides)
        job = build_moe(self.cfg)
        for _ in range(5):
            train_step(job)
        self.checkpoint = Checkpoint.save(workdir / f"{name}.pt", job.model, job.optimizer, job.scheduler,
                                          job.sampler, step=job.step)
        self.cache: dict[str, dict[str, float]] = {}
        base = self.measure({})
        self.baseline_loss, self.baseline_cv = base["loss"], base["cv"]

    def measure(self, overrides: dict[str, Any]) -> dict[str, float]:
        res = replay(self.checkpoint, overrides, self.segment, train_step, job=build_moe(self.cfg),
                     apply_overrides=apply_overrides)
        tokens = np.array([r["tokens_per_expert"] for r in res.records[-self.window:]])
        return {"cv": expert_balance(tokens)["cv"], "loss": float(np.mean(res.losses[-10:]))}

    def metrics(self, params: dict[str, Any]) -> dict[str, float]:
        key = json.dumps(params, sort_keys=True)
        if key not in self.cache:
            m = self.measure({TO_MOE[k]: float(v) for k, v in params.items()})
            m["objective"] = m["cv"] + 10.0 * max(0.0, m["loss"] / self.baseline_loss - 1.0)
            self.cache[key] = m
        return self.cache[key]

    def __call__(self, params: dict[str, Any]) -> float:
        return self.metrics(params)["objective"]


def _load_cache() -> dict[str, Any]:
    try:
        return json.loads(CACHE.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def related_history(space: SearchSpace, *, segment: int, window: int, history_n: int, workdir: Path,
                    log=print) -> dict[str, list[tuple[dict[str, Any], dict[str, float]]]]:
    """Each related task's earlier tuning session (cold-start BO, seeded), cached on disk."""
    from bench.tuning_arms import run_tuner

    cache = _load_cache()
    key = f"segment={segment},window={window},n={history_n},space={sorted(space.names)}"
    if key in cache:
        return {k: [tuple(x) for x in v] for k, v in cache[key].items()}
    out = {}
    for i, (name, overrides) in enumerate(RELATED.items()):
        log(f"  tuning related task {name} ({history_n} trials, cached afterwards)")
        task = MoETask(name, overrides, segment=segment, window=window, workdir=workdir)
        run_tuner(space, task, name="objective", seed=200 + i, cap=history_n, target=-1.0)
        out[name] = [(json.loads(k), v) for k, v in task.cache.items()]
    cache[key] = out
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = CACHE.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache))
    tmp.replace(CACHE)
    return out


def setup(*, segment: int, window: int, history_n: int, log=print):
    """The store with the related runs' experiments, the space, and a factory of target tasks."""
    workdir = Path(tempfile.mkdtemp(prefix="tuning-moe-"))
    store = open_store(None)
    load_knowledge(store)
    space = search_space(store)
    history = related_history(space, segment=segment, window=window, history_n=history_n, workdir=workdir, log=log)
    for name, rows in history.items():
        run = f"moe-related-{name}"
        replace_diagnosis(store, run, {"label": f"GateInitBias, {name}"}, signature())
        add_experiments(store, run, [Experiment(f"{run}-{i}", REMEDY, params, values, 0.0, 200)
                                     for i, (params, values) in enumerate(rows)])

    def target(repeat: int) -> tuple[MoETask, list[Task]]:
        run = f"moe-target-{repeat}"
        replace_diagnosis(store, run, {"label": "GateInitBias target"}, signature())
        tasks = load_history(store, run, REMEDY, ["objective"]).tasks
        task = MoETask(run, {"seed": 100 + repeat, "data_seed": 100 + repeat}, segment=segment, window=window,
                       workdir=workdir)
        return task, list(tasks)

    return space, target
