"""The MoE gate-initialisation scenario with real tiny MoE trainings as trials (bench (a) of tuning).

The faulty run: the tiny MoE LM of ``debugtune.scenarios.moe`` with the GateInitBias fault of the fault
catalogue (router bias +8 on expert 0). A checkpoint is taken at step 5, before the imbalance is
diagnosed; every trial replays ``segment`` steps from it (``tune.replay``) with the trial's parameters
and measures the expert-utilisation CV of the tokens per expert summed over the last ``window`` steps,
and the mean loss of the last 10 steps. The remedy is the knowledge base's kb:RouterRebalance
(cases/remedies-tuning.ttl): re-initialise the router (``init_std``, zero bias) and set the balancing
loss (``aux_loss_coeff``), both log scale. The objective is ``cv + 10 * max(0, loss / baseline_loss - 1)``,
the baseline being the faulty run replayed unchanged; the target ``cv <= 0.15`` with loss no worse than
the baseline is objective <= 0.15.

Why 300 steps, CV over the last 150: in this model even a healthy run needs ~150 steps at aux 0.1 to
bring the CV near 0.1 (at the default 1e-2 it stays at 0.4-0.7), so a short replay measures the
transient. Measured on targets 100 and 101 over a grid of init_std x aux_loss_coeff: at aux 0.1 the CV
over steps 45-85 of the replay was 0.11-0.22, straddling the target; over steps 155-305 it is
0.05-0.14, and at aux 0.046 0.09-0.21. The CV falls monotonically with aux; init_std matters little.

Every tuning session goes through the product's own path, ``engine.tune.auto_tune`` with
``--remedy RouterRebalance`` and the trial as a Python callable (inline executor):

* related tasks (other seeds, a wider model, another expert count) were tuned first, one session of
  ``history_n`` experiments each, in order, each transferring from the ones before it as the graph
  grows; their experiments are recorded in the graph (``record=True``) under runs with the GateInitBias
  signature, and the transfer arm reads them back through ``tune.load_history``;
* targets are other seeds of the base model (``100 + repeat``; the related tasks use seeds 1-4);
* ``transfer`` tunes the target in that graph, ``cold`` and ``random`` in a graph holding only the
  knowledge base and the target run (no history), without recording.

Trial results are cached in a JSON file keyed by task and configuration (replays are deterministic: the
same configuration gives the same value), so the related sessions cost training time once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from debugtune.engine.suggest import remedy_details
from debugtune.engine.tune import CallableTrial, Objective, SearchSpace, TuneSpec, auto_tune
from debugtune.engine.tune.replay import Checkpoint, replay
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import Finding
from debugtune.kg.store import Store
from debugtune.scenarios.moe import MoEConfig, apply_overrides, build_moe, expert_balance, train_step

REMEDY = "RouterRebalance"
OBJECTIVE = "objective"
TO_MOE = {"init_std": "gate_init_std", "aux_loss_coeff": "aux_loss_coeff"}
FAULT = {"gate_bias": 8.0, "gate_bias_experts": 1}
TARGET_CV = 0.15
SEGMENT, WINDOW = 300, 150
RELATED = {"seed1": {"seed": 1, "data_seed": 1}, "seed2": {"seed": 2, "data_seed": 2},
           "wider": {"seed": 3, "data_seed": 3, "d_model": 48, "d_ff": 64},
           "experts6": {"seed": 4, "data_seed": 4, "num_experts": 6}}
TARGET_SEED = 100
CACHE = Path(os.environ.get("DEBUGTUNE_BENCH_CACHE", Path.home() / ".cache" / "debugtune")) / "tuning-moe.json"


def signature() -> list[Finding]:
    """What diagnose reports for this fault (the knowledge base's Switch-InitScale case signature)."""
    return [Finding("f1", "ExpertImbalance", "gradient", "blocks.0.moe/expert:0", 5, 80, 0.7),
            Finding("f2", "RouterGradVanishing", "gradient", "blocks.0.moe.router", 5, 80, 0.5),
            Finding("f3", "LossOscillation", "convergence", "", 10, 80, 0.4)]


class MoETask:
    """One faulty MoE training, its checkpoint, its baseline, and trials replayed from the checkpoint.

    Calling it with a configuration returns the trial's metrics (``objective``, ``cv``, ``loss``);
    ``cache`` maps a configuration's JSON to its metrics and is filled as trials run."""

    def __init__(self, name: str, overrides: dict[str, Any], *, workdir: Path, segment: int = SEGMENT,
                 window: int = WINDOW, cache: dict[str, dict[str, float]] | None = None):
        torch.set_num_threads(1)
        self.name, self.segment, self.window = name, segment, window
        self.cfg = replace(MoEConfig(**FAULT), **overrides)
        job = build_moe(self.cfg)
        for _ in range(5):
            train_step(job)
        self.checkpoint = Checkpoint.save(workdir / f"{name}.pt", job.model, job.optimizer, job.scheduler,
                                          job.sampler, step=job.step)
        self.cache = cache if cache is not None else {}
        self.trained = 0
        base = self.cache.get("baseline") or self.measure({})
        self.cache["baseline"] = base
        self.baseline_loss, self.baseline_cv = base["loss"], base["cv"]

    def measure(self, overrides: dict[str, Any]) -> dict[str, float]:
        res = replay(self.checkpoint, overrides, self.segment, train_step, job=build_moe(self.cfg),
                     apply_overrides=apply_overrides)
        tokens = np.array([r["tokens_per_expert"] for r in res.records[-self.window:]])
        return {"cv": expert_balance(tokens)["cv"], "loss": float(np.mean(res.losses[-10:]))}

    def __call__(self, params: dict[str, Any]) -> dict[str, float]:
        key = json.dumps({k: float(v) for k, v in params.items()}, sort_keys=True)
        if key not in self.cache:
            m = self.measure({TO_MOE[k]: float(v) for k, v in params.items()})
            self.trained += 1
            m[OBJECTIVE] = m["cv"] + 10.0 * max(0.0, m["loss"] / self.baseline_loss - 1.0)
            self.cache[key] = m
        return {k: v for k, v in self.cache[key].items()}


def _load_cache() -> dict[str, Any]:
    try:
        return json.loads(CACHE.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _save_cache(cache: dict[str, Any]) -> None:
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = CACHE.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache))
    tmp.replace(CACHE)


CACHE_VERSION = 2
"""Bumped when a trial's result changes for the same configuration (2: replays no longer alias the checkpoint)."""


def _task_key(name: str, overrides: dict[str, Any]) -> str:
    parts = [f"v{CACHE_VERSION}", name, json.dumps(overrides, sort_keys=True), json.dumps(FAULT, sort_keys=True),
             f"segment={SEGMENT},window={WINDOW}"]
    return ":".join(parts)


def tune(store: Store, task: MoETask, *, strategy: str = "bayesian", cap: int, seed: int, record: bool,
         target: float | None = None):
    """One ``cann-tune auto RUN --remedy RouterRebalance --trial-fn ...`` session on ``task`` (its run)."""
    spec = TuneSpec(remedy=REMEDY, objectives=(Objective(OBJECTIVE),), strategy=strategy, max_experiments=cap,
                    seed=seed, target=target, executor="inline", record=record)
    return auto_tune(store, task.name, CallableTrial(task), spec)


def _graph() -> Store:
    store = open_store(None)
    load_knowledge(store)
    return store


@dataclass
class MoEBench:
    """The graph with the related runs' experiments, a graph without history, and the workdir."""

    store: Store
    bare: Store
    workdir: Path
    space: SearchSpace

    def target(self, repeat: int) -> MoETask:
        """The target task of a repeat, registered as a diagnosed run in both graphs."""
        name = f"moe-target-{repeat}"
        for g in (self.store, self.bare):
            replace_diagnosis(g, name, {"label": "GateInitBias target"}, signature())
        seed = TARGET_SEED + repeat
        return MoETask(name, {"seed": seed, "data_seed": seed}, workdir=self.workdir)

    def run_arm(self, arm: str, task: MoETask, *, seed: int, cap: int) -> int | None:
        """Experiments to the target for ``arm`` (transfer, cold, random) through ``auto_tune``."""
        graph = self.store if arm == "transfer" else self.bare
        res = tune(graph, task, strategy="random" if arm == "random" else "bayesian", cap=cap, seed=seed,
                   record=False, target=TARGET_CV)
        return res.result.experiments_to_target(TARGET_CV)


def setup(*, history_n: int, log: Callable[[str], None] = print) -> MoEBench:
    """Tune the related tasks in order into the graph (trials cached) and return the bench."""
    workdir = Path(tempfile.mkdtemp(prefix="tuning-moe-"))
    store, bare = _graph(), _graph()
    cache = _load_cache()
    for i, (name, overrides) in enumerate(RELATED.items()):
        run = f"moe-related-{name}"
        replace_diagnosis(store, run, {"label": f"GateInitBias, {name}"}, signature())
        task = MoETask(run, overrides, workdir=workdir, cache=cache.setdefault(_task_key(name, overrides), {}))
        res = tune(store, task, cap=history_n, seed=200 + i, record=True)
        _save_cache(cache)
        best = res.result.best
        log(f"  related task {name} ({overrides}): {len(res.result.trials)} experiments in the graph "
            f"({task.trained} trained, the rest cached), history {len(res.history.tasks)} tasks; best "
            f"{best.values[OBJECTIVE]:.3f} (cv {best.values['cv']:.3f}) at "
            f"{ {k: round(v, 4) for k, v in best.params.items()} }")
    return MoEBench(store, bare, workdir, SearchSpace(remedy_details(store, REMEDY).parameters))
