"""The scenario programs by name, each with its healthy base configuration, behind one ``run`` call.

``run(program, overrides, seed=..., run_dir=..., probe=...)`` trains the program with the fields in
``overrides`` changed and returns an :class:`Outcome`: the program's own per-step series and summary
figures (what the fault benchmark's manifestation criteria read), never anything from the probe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.scenarios import classify, distributed, moe


@dataclass(frozen=True)
class Program:
    name: str
    kind: str
    base: Any
    description: str


PROGRAMS: dict[str, Program] = {p.name: p for p in (
    Program("digits_mlp", "classifier", classify.ClassifierConfig(dataset="digits", width=64, lr=0.02),
            "MLP 64-64-64 (ReLU) on sklearn digits, SGD momentum 0.9"),
    Program("digits_cnn", "classifier", classify.ClassifierConfig(dataset="digits", arch="cnn", width=32, lr=0.01),
            "2-conv CNN + dense on the 8x8 digits images, SGD momentum 0.9"),
    Program("blobs_mlp", "classifier", classify.ClassifierConfig(dataset="blobs", width=32, lr=0.05),
            "MLP 32-32-32 on AutoTrainer's blobs (make_blobs, 3 centres)"),
    Program("circles_mlp", "classifier", classify.ClassifierConfig(dataset="circles", width=32, lr=0.05),
            "MLP 32-32-32 on AutoTrainer's circles (make_circles)"),
    Program("moe_lm", "moe", moe.MoEConfig(),
            "1-block MoE transformer LM, 8 experts top-1, capacity 1.25, aux loss 1e-2, Adam"),
    Program("ddp_mlp", "ddp", distributed.DDPConfig(),
            "digits MLP data-parallel over 2 gloo processes, one all-reduce per step"),
)}


@dataclass(frozen=True)
class Outcome:
    """A program's own measurements: per-step series (1-D, or [rank, step] for timings) and figures."""

    program: str
    series: dict[str, np.ndarray]
    summary: dict[str, float]

    @property
    def steps(self) -> int:
        return int(len(self.series["loss"]))


def config_fields(program: str) -> set[str]:
    return {f.name for f in fields(PROGRAMS[program].base)}


def make_config(program: str, overrides: Mapping[str, Any], seed: int) -> Any:
    """The base config of ``program`` with ``overrides`` and ``seed``; unknown fields raise ValueError."""
    if program not in PROGRAMS:
        raise ValueError(f"unknown program {program!r}; expected one of {', '.join(PROGRAMS)}")
    unknown = sorted(set(overrides) - config_fields(program))
    if unknown:
        raise ValueError(f"{program}: unknown config field(s) {', '.join(unknown)}")
    return replace(PROGRAMS[program].base, **dict(overrides), seed=seed)


def _classifier(cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    r = classify.train(cfg, run_dir, probe=probe, run_id=run_id)
    series = {"loss": r.losses, "accuracy": r.accuracy, "eval_step": r.eval_steps, "eval_loss": r.eval_loss,
              "eval_accuracy": r.eval_accuracy}
    return series, r.summary()


def _moe(cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    r = moe.train_moe(cfg, run_dir=run_dir, probe=probe, run_id=run_id)
    tpe = r.tokens_per_expert.astype(float)
    top2 = np.sort(tpe, axis=1)[:, -2:].sum(axis=1) / np.maximum(tpe.sum(axis=1), 1)
    half = len(tpe) // 2
    series = {"loss": r.losses, "tokens_per_expert": tpe, "top2_share": top2, "dropped_frac": r.dropped_frac,
              "router_grad_norm": r.router_grad_norm, "lb_loss": r.aux_loss}
    summary = {"final_loss": r.final_loss, "expert_cv": r.expert_cv,
               "expert_cv_last_half": moe.expert_balance(tpe[half:])["cv"], "entropy_floor": r.entropy_floor,
               "chance_loss": math.log(cfg.vocab), "first_nonfinite_step": _first_nonfinite(r.losses)}
    return series, summary


def _ddp(cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    r = distributed.train(cfg, run_dir, probe=probe, run_id=run_id)
    series = {"loss": r.losses, "step_ms": r.step_ms, "data_ms": r.data_ms, "compute_ms": r.compute_ms,
              "comm_ms": r.comm_ms}
    return series, {"final_loss": r.final_loss, "first_nonfinite_step": _first_nonfinite(r.losses),
                    "chance_loss": math.log(10)}


def _first_nonfinite(x: np.ndarray) -> int:
    bad = np.flatnonzero(~np.isfinite(x))
    return int(bad[0]) if len(bad) else -1


_RUNNERS: dict[str, Callable[[Any, Path | None, bool, str | None], tuple[dict, dict]]] = {
    "classifier": _classifier, "moe": _moe, "ddp": _ddp}


def run(program: str, overrides: Mapping[str, Any] | None = None, *, seed: int = 0,
        run_dir: str | Path | None = None, probe: bool = False, run_id: str | None = None) -> Outcome:
    """Train ``program`` once (with the probe writing into ``run_dir`` when ``probe``)."""
    cfg = make_config(program, overrides or {}, seed)
    path = Path(run_dir) if run_dir is not None else None
    series, summary = _RUNNERS[PROGRAMS[program].kind](cfg, path, probe, run_id)
    return Outcome(program, {k: np.asarray(v) for k, v in series.items()}, summary)
