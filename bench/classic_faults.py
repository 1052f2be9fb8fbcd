"""Faults injected into the classic example programs, a harness nothing was calibrated or tuned on: the widest
held-out figure this project can measure here.

The fault bench's two harnesses (``bench.faults``, ``bench.harness2``) are what the knowledge base's calibration
was fitted on, and leaving one out still leaves the faults' wording in: each was written with the other's
injections in view. The programs of ``bench.classic_programs`` are shapes of well-known examples (LeNet-5, a
ResNet with batch norm, an LSTM over rows, a VAE, a siamese CNN, a character GRU …) that no family of the fault
bench shares. Here each gets the mistakes users make, applied the way a user makes them, after the program is
built: the rate ×50 or ÷1000, ``zero_grad`` that does nothing, every parameter but the output layer's
``requires_grad=False``, weights ×8, ReLU modules swapped for sigmoids, ReLU biases at −5, half the labels
replaced at random, pixels left at 0-255; and in the two MoE programs (``bench.classic_moe``) the balancing
term switched off and the router initialised with ``nn.init.normal_`` (std 1).

A fault counts only where it harmed the run against its healthy twin (same program, same seed): the loss it
ended at is not finite, or above 1.5 × the twin's and the twin's plus a tenth of what the twin learnt (an MoE's
task loss, without the balancing term it logs); for the balancing term switched off, the experts' balance
instead (:func:`unbalanced`), and for the router's initialisation either. Its diagnosis is then scored: the
top hypothesis against the injected cause. The healthy twins are scored too (a cause named on one that learnt
is a false positive).

    python -m bench.classic_faults [--seeds 1] [--first-seed 0] [--only FAULT ...] [--jobs 2] [--json]

Prints a line per run, then top-1 and top-3 (macro over causes and over runs), the runs with no hypothesis, the
wrong answers at confidence ≥ 0.9, the ECE of the top hypothesis, and the healthy twins named.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bench.classic_moe import SparseMoE
from bench.classic_programs import PROGRAMS, Data, Program, late_loss, train
from bench.faults.calibration import reliability
from bench.harness2.manifest import CV_FLOOR, CV_RATIO

# The programs that classify ``Data.y`` directly, and those that read the normalised pixels ``Data.img`` / ``flat``
# as inputs only (the autoencoder's targets are its inputs: raw pixels change its loss's scale, not its fit).
LABELLED = {"mnist_adadelta", "lenet_tanh", "mlp_sgd", "logreg_raw", "resnet_bn", "transformer_rows", "mnist_rnn",
            "mixtral_rows", "fcn_segment"}
PIXELS = {"mnist_adadelta", "lenet_tanh", "mlp_sgd", "resnet_bn", "transformer_rows", "mnist_rnn", "siamese",
          "mixtral_rows", "fcn_segment", "huber_rows"}


def _scale_lr(factor: float) -> Callable[[Data, Program], None]:
    def inject(d: Data, p: Program) -> None:
        for g in p.opt.param_groups:
            g["lr"] *= factor
            if "initial_lr" in g:
                g["initial_lr"] *= factor
        if p.sched is not None:  # a schedule multiplies its own copy of the base rates
            p.sched.base_lrs = [lr * factor for lr in p.sched.base_lrs]
    return inject


def _no_zero_grad(d: Data, p: Program) -> None:
    p.opt.zero_grad = lambda set_to_none=True: None  # type: ignore[method-assign]


def _output_layer(model: nn.Module) -> nn.Module:
    """The layer that produces the output: the last weight layer of ``head`` / ``out`` where the model names one,
    else its last weight layer."""
    scope = getattr(model, "head", None) or getattr(model, "out", None) or model
    leaves = [m for m in scope.modules() if not list(m.children()) and any(True for _ in m.parameters(False))]
    return leaves[-1]


def _freeze_body(d: Data, p: Program) -> None:
    keep = {id(q) for q in _output_layer(p.model).parameters()}
    for q in p.model.parameters():
        if id(q) not in keep:
            q.requires_grad_(False)


def _weights_x8(d: Data, p: Program) -> None:
    with torch.no_grad():
        for q in p.model.parameters():
            if q.dim() > 1:
                q.mul_(8.0)


def _swap_relu(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU):
            setattr(module, name, nn.Sigmoid())
        else:
            _swap_relu(child)


def _relu_biases(model: nn.Module) -> list[torch.Tensor]:
    """The biases of the weight layers that a ReLU module follows directly in a ``Sequential``."""
    out = []
    for m in model.modules():
        if isinstance(m, nn.Sequential):
            kids = list(m)
            out += [a.bias for a, b in zip(kids, kids[1:], strict=False)
                    if isinstance(b, nn.ReLU) and isinstance(a, (nn.Linear, nn.Conv2d)) and a.bias is not None]
    return out


def _dead_relu(d: Data, p: Program) -> None:
    with torch.no_grad():
        for b in _relu_biases(p.model):
            b.fill_(-5.0)


def _label_noise(d: Data, p: Program) -> None:
    g = torch.Generator().manual_seed(d.g.initial_seed() + 7)
    flip = torch.rand(len(d.y), generator=g) < 0.5
    d.y[flip] = torch.randint(0, 10, (int(flip.sum()),), generator=g)


def _raw_pixels(d: Data, p: Program) -> None:
    d.img.copy_(d.pixels() * 255.0)  # in place: the program's step already holds this tensor
    d.flat.mul_(255.0)


def _moe(p: Program) -> SparseMoE | None:
    return next((m for m in p.model.modules() if isinstance(m, SparseMoE)), None)


def _the_moe(p: Program) -> SparseMoE:
    moe = _moe(p)
    if moe is None:
        raise ValueError("an MoE fault in a program without an MoE layer")
    return moe


def _aux_off(d: Data, p: Program) -> None:
    _the_moe(p).aux_coeff = 0.0


def _gate_std_1(d: Data, p: Program) -> None:
    """The router initialised with ``nn.init.normal_`` at its default std of 1 (Switch cut its scale to 0.1)."""
    with torch.no_grad():
        nn.init.normal_(_the_moe(p).gate.weight)


@dataclass(frozen=True)
class Fault:
    """One mistake: the cause it is, how it is made, the programs it can be made in, and how its harm is judged
    (``loss``: against the twin's loss, :func:`harmed`; ``balance``: against the twin's expert balance,
    :func:`unbalanced`; ``either``: one or the other)."""

    cause: str
    inject: Callable[[Data, Program], None]
    applies: Callable[[str, Program], bool]
    criterion: str = "loss"


def _any(name: str, p: Program) -> bool:
    return True


FAULTS: dict[str, Fault] = {
    "lr_x50": Fault("LearningRateTooHigh", _scale_lr(50.0), _any),
    "lr_div1000": Fault("LearningRateTooLow", _scale_lr(1e-3), _any),
    "no_zero_grad": Fault("MissingZeroGrad", _no_zero_grad, _any),
    "frozen_body": Fault("FrozenParameters", _freeze_body, _any),
    "weights_x8": Fault("BadWeightInit", _weights_x8, _any),
    "sigmoid": Fault("SaturatingActivations", lambda d, p: _swap_relu(p.model),
                     lambda n, p: any(isinstance(m, nn.ReLU) for m in p.model.modules())),
    "relu_bias_neg5": Fault("DyingReLU", _dead_relu, lambda n, p: bool(_relu_biases(p.model))),
    "labels_50pct": Fault("LabelNoise", _label_noise, lambda n, p: n in LABELLED),
    "raw_pixels": Fault("UnnormalizedInputs", _raw_pixels, lambda n, p: n in PIXELS),
    "aux_off": Fault("AuxLossDisabled", _aux_off, lambda n, p: _moe(p) is not None, "balance"),
    "gate_std_1": Fault("GateInitBias", _gate_std_1, lambda n, p: _moe(p) is not None, "either"),
}


def applicable(program: str, fault: str) -> bool:
    """Whether the fault can be made in the program (built once on seed 0's data to look at its model)."""
    return FAULTS[fault].applies(program, _built(program))


@functools.cache
def _built(program: str) -> Program:
    torch.manual_seed(0)
    return PROGRAMS[program](Data(0))


def _summary(losses: list[float], report: Any) -> dict[str, Any]:
    return {"loss_first": losses[0], "loss_end": late_loss(losses),
            "causes": [[h.cause, round(h.confidence, 3)] for h in report.hypotheses],
            "findings": sorted({f.symptom for f in report.findings}), "signs": [s.symptom for s in report.signs]}


def harmed(fault_end: float, twin_first: float, twin_end: float) -> bool:
    """The fault left the run worse than its healthy twin: a loss that is not finite, or above 1.5× the twin's and
    the twin's plus a tenth of what the twin learnt."""
    if not math.isfinite(fault_end):
        return True
    return fault_end > 1.5 * twin_end and fault_end > twin_end + 0.1 * max(twin_first - twin_end, 0.0)


def unbalanced(fault_cv: float | None, twin_cv: float | None) -> bool:
    """The fault left the experts less balanced than the twin's: the CV of their top-1 shares at least
    ``CV_RATIO`` × the twin's and at least ``CV_FLOOR`` (harness 2's balance criterion)."""
    if fault_cv is None or twin_cv is None:
        return False
    return not math.isfinite(fault_cv) or fault_cv >= max(CV_RATIO * twin_cv, CV_FLOOR)


def _trained(program: str, seed: int, run_dir: Path,
             inject: Callable[[Data, Program], None] | None = None) -> dict[str, Any]:
    """Train and diagnose one run: its summary, with the experts' balance where the program has experts. An MoE
    program logs its loss with the balancing term in it, as users do; its harm is judged on the task's loss
    alone (a coefficient ×100 adds 1 to the logged loss without costing the task anything)."""
    built: list[Program] = []

    def keep(d: Data, p: Program) -> None:
        built.append(p)
        if inject is not None:
            inject(d, p)
    losses, report = train(program, seed, run_dir, keep)
    moe = _moe(built[0])
    if moe is not None and len(moe.terms) == len(losses):
        losses = [loss - term for loss, term in zip(losses, moe.terms, strict=True)]
    return {**_summary(losses, report), "expert_cv": moe.balance() if moe is not None else None}


def one(job: tuple[str, int, list[str]]) -> list[dict[str, Any]]:
    """The healthy twin of one program and seed, then each fault in it."""
    program, seed, faults = job
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        twin = _trained(program, seed, Path(tmp) / "healthy")
        rows.append({"program": program, "seed": seed, "fault": None, "cause": None, **twin,
                     "learnt": twin["loss_end"] < twin["loss_first"]})
        for name in faults:
            f = FAULTS[name]
            row = _trained(program, seed, Path(tmp) / name, f.inject)
            loss = harmed(row["loss_end"], twin["loss_first"], twin["loss_end"])
            balance = unbalanced(row["expert_cv"], twin["expert_cv"])
            hit = {"loss": loss, "balance": balance, "either": loss or balance}[f.criterion]
            rows.append({"program": program, "seed": seed, "fault": name, "cause": f.cause, **row,
                         "manifested": hit})
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Top-1/top-3 (macro over causes, and over runs), no hypothesis, confident wrong answers, ECE, false
    positives on the healthy twins that learnt."""
    faulty = [r for r in rows if r["cause"] and r["manifested"]]
    per: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    tops: list[tuple[float, bool]] = []
    for r in faulty:
        names = [c for c, _ in r["causes"]]
        per[r["cause"]].append((names[:1] == [r["cause"]], r["cause"] in names[:3]))
        if r["causes"]:
            tops.append((r["causes"][0][1], names[0] == r["cause"]))
    healthy = [r for r in rows if r["cause"] is None and r["learnt"]]
    for r in healthy:
        if r["causes"]:
            tops.append((r["causes"][0][1], False))
    _, ece = reliability(tops)

    def macro(k: int) -> float:
        return sum(sum(x[k] for x in v) / len(v) for v in per.values()) / max(len(per), 1)
    return {
        "faulty_runs": len(faulty), "not_manifested": sum(1 for r in rows if r["cause"] and not r["manifested"]),
        "top1_macro": macro(0), "top3_macro": macro(1),
        "top1_runs": sum(x[0] for v in per.values() for x in v) / max(len(faulty), 1),
        "per_cause": {c: {"top1": sum(x[0] for x in v), "top3": sum(x[1] for x in v), "n": len(v)}
                      for c, v in sorted(per.items())},
        "no_hypothesis": sum(1 for r in faulty if not r["causes"]),
        "confident_wrong": [f"{r['program']}:{r['fault']}:{r['seed']} -> {r['causes'][0][0]} {r['causes'][0][1]:.2f}"
                            for r in faulty if r["causes"] and r["causes"][0][0] != r["cause"]
                            and r["causes"][0][1] >= 0.9],
        "ece": ece, "healthy_learnt": len(healthy),
        "healthy_named": [f"{r['program']}:{r['seed']} -> {r['causes'][0][0]} {r['causes'][0][1]:.2f}"
                          for r in healthy if r["causes"]],
    }


def _line(r: dict[str, Any]) -> str:
    named = ", ".join(f"{c} {p:.2f}" for c, p in r["causes"][:3]) or "none"
    if r["cause"] is None:
        mark = "healthy"
    else:
        mark = ("ok " if r["causes"][:1] and r["causes"][0][0] == r["cause"] else "XX ") if r["manifested"] \
            else "-- "
    cv = f" cv {r['expert_cv']:.2f}" if r.get("expert_cv") is not None else ""
    return (f"{mark:7s} {r['program']:17s} s{r['seed']} {r['fault'] or '':13s} loss {r['loss_first']:.3g} → "
            f"{r['loss_end']:.3g}{cv}  causes: {named}  findings: {', '.join(r['findings']) or '-'}")


def _print(fig: dict[str, Any], seconds: float) -> None:
    print(f"\n{fig['faulty_runs']} faulty runs that the fault harmed ({fig['not_manifested']} it did not are left "
          f"out); {seconds:.0f} s")
    print(f"top-1 {fig['top1_macro']:.3f} macro over causes ({fig['top1_runs']:.3f} over runs), "
          f"top-3 {fig['top3_macro']:.3f}; no hypothesis {fig['no_hypothesis']}; ECE {fig['ece']:.3f}")
    for c, v in fig["per_cause"].items():
        print(f"  {c:24s} top-1 {v['top1']}/{v['n']}  top-3 {v['top3']}/{v['n']}")
    print(f"wrong at ≥ 0.9: {len(fig['confident_wrong'])}" + "".join(f"\n  {x}" for x in fig["confident_wrong"]))
    print(f"healthy twins that learnt named with a cause: {len(fig['healthy_named'])} of {fig['healthy_learnt']}"
          + "".join(f"\n  {x}" for x in fig["healthy_named"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.classic_faults", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=1, help="seeds per program")
    ap.add_argument("--first-seed", type=int, default=0, help="the first seed (0, then 1, ...)")
    ap.add_argument("--only", nargs="*", choices=sorted(FAULTS), help="these faults only")
    ap.add_argument("--programs", nargs="*", choices=sorted(PROGRAMS), help="these programs only")
    ap.add_argument("--jobs", type=int, default=2, help="programs trained side by side")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args(argv)
    jobs = [(prog, seed, [f for f in (args.only or list(FAULTS)) if applicable(prog, f)])
            for seed in range(args.first_seed, args.first_seed + args.seeds) for prog in (args.programs or PROGRAMS)]
    return score_jobs(one, jobs, args.jobs, args.json)


def score_jobs(one: Callable[[Any], list[dict[str, Any]]], jobs: list[Any], workers: int, as_json: bool) -> int:
    """Run ``one`` over ``jobs`` in ``workers`` processes (a line per run as each batch lands), then print the
    figures, or one JSON document of the figures and every run."""
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        for batch in pool.map(one, jobs):
            rows += batch
            if not as_json:
                for r in batch:
                    print(_line(r), flush=True)
    fig = figures(rows)
    if as_json:
        print(json.dumps({"figures": fig, "runs": rows}, indent=2))
    else:
        _print(fig, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
