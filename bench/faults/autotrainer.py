"""The baseline: AutoTrainer's detection rules (Zhang et al., ICSE 2021), ported to our telemetry.

Rules and defaults are those of ``shiningrain/AUTOTRAINER:AutoTrainer/utils/monitor.py`` with the
parameters of ``AutoTrainer/reproduce.py`` (fault-diagnosis-anchors.md §1.2):

- gradient (every check): NaN/Inf gradients; vanishing when ``‖g_first‖/‖g_last‖ < β1`` and
  ``‖g_first‖ < β2``; exploding when the ratio ``> β3``; dying ReLU when the fraction of exactly-zero
  gradient entries over all parameters ``≥ γ``;
- loss/accuracy (from the judgment point, 30% of the planned epochs): NaN/Inf loss or val loss ≥ 1e5;
  oscillation ("unstable") when the paired local maxima and minima of the train-accuracy curve differ
  by ≥ ζ at least η·len(acc) times; slow convergence when the largest one-epoch accuracy gain is
  below δ on train and val; not converged when the best train or val accuracy is below Θ;
- decision (``IssueMonitor.determine``): NaN anywhere → explode; if not converged or slow, the first
  of relu → explode → vanish → slow convergence whose counter fired; otherwise unstable.
  The first check that names a problem ends the run's diagnosis (AutoTrainer then repairs).

Our telemetry has no epochs: an "epoch" here is one evaluation interval (the steps between two
``eval_accuracy`` rows; 10 steps by default), train accuracy is the mean of the logged per-step
``accuracy`` over it, and the checks run every ``CHECKGAP`` epochs. Gradient norms are per module
(weight and bias together), first and last in the run's layer order. The TDSC'24 additions (improper
output activation, improper loss, abnormal data) need the model's structure or its raw outputs, which
telemetry does not hold, so they are not ported; neither are the accuracy rules on runs that log no
accuracy (the language model, the data-parallel run).

AutoTrainer's problems map to our causes in the order its repair strategies try fixes (``repair.py``).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from debugtune.engine.telemetry import read_telemetry

PARAMS = {"beta_1": 1e-3, "beta_2": 1e-4, "beta_3": 70.0, "gamma": 0.7, "zeta": 0.03, "eta": 0.2,
          "delta": 0.01, "Theta": 0.6}
JUDGMENT_POINT = 0.3
NAN_LOSS = 1e5
CHECKGAP = 3

CAUSES = {
    # GV: SELU + lecun_uniform; ReLU + he_uniform; BatchNorm
    "vanish": ("SaturatingActivations", "BadWeightInit"),
    # GE: SELU; ReLU + he_uniform; gradient clipping; tanh + he_uniform; BatchNorm
    "explode": ("BadWeightInit", "LearningRateTooHigh", "SaturatingActivations"),
    # DR: SELU; BatchNorm; another initialiser; LeakyReLU / ELU
    "relu": ("DyingReLU", "BadWeightInit"),
    # OL: Adam; LR x0.1; ReduceLROnPlateau; batch size; momentum; Gaussian noise; re-initialise
    "unstable": ("LearningRateTooHigh", "BadWeightInit"),
    # SC: another optimizer; LR x10; re-initialise
    "not_converge": ("LearningRateTooLow", "BadWeightInit"),
}


@dataclass(frozen=True)
class Verdict:
    """AutoTrainer's diagnosis of one run: the problem, our causes in rank order, the step it was named."""

    problem: str | None
    causes: tuple[str, ...]
    detection_step: int | None
    seconds: float


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _ol_judge(acc: list[float], threshold: float, rate: float) -> bool:
    maximum, minimum = [], []
    for i in range(1, len(acc) - 1):
        if acc[i] - acc[i - 1] >= 0 and acc[i] - acc[i + 1] >= 0:
            maximum.append(acc[i])
        if acc[i] - acc[i - 1] <= 0 and acc[i] - acc[i + 1] <= 0:
            minimum.append(acc[i])
    count = sum(1 for i in range(min(len(maximum), len(minimum))) if maximum[i] - minimum[i] >= threshold)
    return count >= rate * len(acc)


def _max_delta(acc: list[float]) -> float:
    return max([0.0] + [acc[i + 1] - acc[i] for i in range(len(acc) - 1)])


def _series(tel, metric: str, entity: str = "") -> dict[int, float]:
    steps, values = tel.series(metric, entity)
    return dict(zip(steps.tolist(), values.tolist(), strict=True))


def _layers(tel, meta_layers: list[str] | None) -> list[str]:
    names = [e for e in tel.entities("grad_norm") if e and "/expert:" not in e]
    if meta_layers:
        pos = {n: i for i, n in enumerate(meta_layers)}
        return sorted(names, key=lambda n: (pos.get(n, len(pos)), _natural(n)))
    return sorted(names, key=_natural)


def diagnose(run_dir: str | Path, params: dict[str, float] | None = None) -> Verdict:
    """AutoTrainer's rules over the telemetry of ``run_dir``."""
    t0 = time.perf_counter()
    p = {**PARAMS, **(params or {})}
    tel = read_telemetry(run_dir, metrics=["loss", "accuracy", "eval_loss", "eval_accuracy", "grad_norm",
                                            "grad_zero_frac", "grad_nan", "grad_inf", "weight_norm"], ranks=[0])
    loss, acc = _series(tel, "loss"), _series(tel, "accuracy")
    ev_loss, ev_acc = _series(tel, "eval_loss"), _series(tel, "eval_accuracy")
    if not loss:
        return Verdict(None, (), None, time.perf_counter() - t0)
    steps = sorted(loss)
    marks = sorted(ev_acc) or list(range(steps[0] + 9, steps[-1] + 1, 10))
    if marks and marks[0] == steps[0]:
        marks = marks[1:]
    total_epochs = len(marks)
    layers = _layers(tel, tel.meta.get("layers"))
    norms = {n: _series(tel, "grad_norm", n) for n in layers}
    zero, nan, inf = _series(tel, "grad_zero_frac"), _series(tel, "grad_nan"), _series(tel, "grad_inf")
    wnorm = _series(tel, "weight_norm")
    counters = {"died_relu": 0, "vanish_gradient": 0, "explode_gradient": 0}
    history: dict[str, list[float]] = {"loss": [], "acc": [], "val_loss": [], "val_acc": []}
    prev = steps[0] - 1
    for epoch, mark in enumerate(marks, start=1):
        window = [s for s in steps if prev < s <= mark]
        prev = mark
        history["loss"].append(float(np.mean([loss[s] for s in window])) if window else math.nan)
        if acc:
            history["acc"].append(float(np.mean([acc[s] for s in window if s in acc])))
            history["val_acc"].append(ev_acc.get(mark, history["acc"][-1]))
        history["val_loss"].append(ev_loss.get(mark, history["loss"][-1]))
        if epoch % CHECKGAP:
            continue
        problem = _determine(p, mark, history, total_epochs, layers, norms, zero, nan, inf, wnorm, counters)
        if problem:
            return Verdict(problem, CAUSES[problem], mark, time.perf_counter() - t0)
    return Verdict(None, (), None, time.perf_counter() - t0)


def _determine(p, step, history, total_epochs, layers, norms, zero, nan, inf, wnorm, counters) -> str | None:
    feature = {"nan_gradient": False, "nan_weight": False, "nan_loss": False, "not_converge": False,
               "sc_accuracy": False, "unstable_loss": False}
    # gradient_issue (on the gradient of the check step)
    if nan.get(step, 0) > 0 or inf.get(step, 0) > 0:
        feature["nan_gradient"] = True
    elif len(layers) >= 2 and step in norms[layers[0]] and step in norms[layers[-1]]:
        first, last = norms[layers[0]][step], norms[layers[-1]][step]
        rate = first / last if last > 0 else math.inf
        if rate < p["beta_1"] and first < p["beta_2"]:
            counters["vanish_gradient"] += 1
        if rate > p["beta_3"]:
            counters["explode_gradient"] += 1
        if zero.get(step, 0.0) >= p["gamma"]:
            counters["died_relu"] += 1
    # weights_issue
    if step in wnorm and not math.isfinite(wnorm[step]):
        feature["nan_weight"] = True
    # loss_issue
    tl, vl, ta, va = history["loss"], history["val_loss"], history["acc"], history["val_acc"]
    if not all(math.isfinite(x) for x in tl + vl) or vl[-1] >= NAN_LOSS:
        feature["nan_loss"] = True
    elif len(tl) >= JUDGMENT_POINT * total_epochs and ta:
        feature["unstable_loss"] = _ol_judge(ta, p["zeta"], p["eta"])
        feature["not_converge"] = max(va) < p["Theta"] or max(ta) < p["Theta"]
        feature["sc_accuracy"] = _max_delta(va) < p["delta"] and _max_delta(ta) < p["delta"]
    if feature["nan_loss"] or feature["nan_weight"] or feature["nan_gradient"]:
        return "explode"
    if feature["not_converge"] or feature["sc_accuracy"]:
        if counters["died_relu"] >= 1:
            return "relu"
        if counters["explode_gradient"] >= 1:
            return "explode"
        if counters["vanish_gradient"] >= 1:
            return "vanish"
        if feature["sc_accuracy"]:
            return "not_converge"
        return None
    if feature["unstable_loss"]:
        return "unstable"
    return None
