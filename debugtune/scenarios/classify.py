"""Classifier trainings on CPU (an MLP or a small CNN on digits, MLPs on blobs and circles), with fault knobs.

Healthy defaults: standardised inputs, He-normal init, ReLU, logits into cross-entropy, SGD with
momentum, ``zero_grad`` every step, every layer in the optimizer. Each fault of the catalogue
(`debugtune.scenarios.faults`) is one or two of these fields set otherwise; the benign look-alikes
(warm-up, a scheduled LR drop, a batch of hard examples, wide sparse ReLU layers) are fields too.

The program measures on its own what the benchmark's manifestation criteria need: the loss and
accuracy of every step, held-out loss and accuracy, and at the end, on the held-out set, the
fraction of dead ReLU units (zero for every sample) and of saturated sigmoid/tanh outputs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from debugtune.scenarios import tabular
from debugtune.scenarios.common import Recorder, probe_session, seed_everything, window_mean
from debugtune.scenarios.models import MLP, SmallCNN, activation_modules, init_weights, weight_layers

OUTPUTS = ("logits", "softmax", "relu")


@dataclass(frozen=True)
class ClassifierConfig:
    """One classifier training; frozen (use ``dataclasses.replace`` for variants)."""

    dataset: str = "digits"
    arch: str = "mlp"
    width: int = 64
    depth: int = 3
    activation: str = "relu"
    init_scale: float = 1.0
    hidden_bias: float = 0.0
    output: str = "logits"
    raw_scale: float = 0.0
    label_noise: float = 0.0
    lr: float = 0.05
    momentum: float = 0.9
    zero_grad_every: int = 1
    frozen: int = 0
    bad_batch_step: int = -1
    bad_batch_steps: int = 1
    bad_batch_scale: float = 0.0
    hard_batch_step: int = -1
    warmup_steps: int = 0
    lr_drop_step: int = -1
    lr_drop_factor: float = 0.1
    steps: int = 300
    batch_size: int = 32
    eval_every: int = 10
    seed: int = 0

    @property
    def program(self) -> str:
        return f"{self.dataset}_{self.arch}"

    def validate(self) -> None:
        if self.arch not in ("mlp", "cnn"):
            raise ValueError(f"arch must be 'mlp' or 'cnn', got {self.arch!r}")
        if self.arch == "cnn" and self.dataset != "digits":
            raise ValueError("the CNN runs on the digits images only")
        if self.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {self.output!r}")
        if self.frozen < 0:
            raise ValueError(f"frozen (leading layers left out of the optimizer) must be >= 0, got {self.frozen}")


@dataclass(frozen=True)
class ClassifierResult:
    """The program's own measurements (the run directory holds only what the probe wrote)."""

    losses: np.ndarray
    accuracy: np.ndarray
    eval_steps: np.ndarray
    eval_loss: np.ndarray
    eval_accuracy: np.ndarray
    dead_frac: float
    act_zero_frac: float
    sat_frac: float
    first_nonfinite_step: int
    step_ms: float
    classes: int
    run_dir: Path | None

    @property
    def final_loss(self) -> float:
        return window_mean(self.losses)

    @property
    def final_accuracy(self) -> float:
        return window_mean(self.accuracy)

    def summary(self) -> dict[str, Any]:
        """Plain JSON-able figures (the fault benchmark stores them next to its labels)."""
        return {"final_loss": self.final_loss, "final_accuracy": self.final_accuracy,
                "final_eval_loss": float(self.eval_loss[-1]) if len(self.eval_loss) else float("nan"),
                "final_eval_accuracy": float(self.eval_accuracy[-1]) if len(self.eval_accuracy) else float("nan"),
                "dead_frac": self.dead_frac, "act_zero_frac": self.act_zero_frac, "sat_frac": self.sat_frac,
                "first_nonfinite_step": self.first_nonfinite_step, "step_ms": self.step_ms,
                "chance_loss": math.log(self.classes)}


def build_model(cfg: ClassifierConfig, data: tabular.Split) -> nn.Module:
    inputs = data.x_train.shape[1]
    if cfg.arch == "cnn":
        model: nn.Module = SmallCNN(data.classes, cfg.width, cfg.activation)
    else:
        model = MLP(inputs, data.classes, cfg.width, cfg.depth, cfg.activation)
    init_weights(model, cfg.init_scale, cfg.hidden_bias)
    return model


def trained_parameters(model: nn.Module, frozen: int) -> list[nn.Parameter]:
    """The parameters handed to the optimizer: all but those of the first ``frozen`` weight layers (never the head)."""
    layers = weight_layers(model)
    left_out = layers[: min(frozen, len(layers) - 1)]
    skip = {id(p) for m in left_out for p in m.parameters()}
    return [p for p in model.parameters() if id(p) not in skip]


def lr_factor(cfg: ClassifierConfig, step: int) -> float:
    f = 1.0
    if cfg.warmup_steps > 0:
        f *= min(1.0, (step + 1) / cfg.warmup_steps)
    if 0 <= cfg.lr_drop_step <= step:
        f *= cfg.lr_drop_factor
    return f


def loss_of(cfg: ClassifierConfig, logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy on what the model outputs: logits (healthy), a softmax (double softmax) or a ReLU."""
    if cfg.output == "softmax":
        logits = logits.softmax(dim=-1)
    elif cfg.output == "relu":
        logits = F.relu(logits)
    return F.cross_entropy(logits, y, reduction=reduction)


def accuracy_of(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=-1) == y).float().mean())


class BatchSource:
    """Training batches with the data faults and look-alikes applied at their steps."""

    def __init__(self, cfg: ClassifierConfig, data: tabular.Split):
        self.cfg = cfg
        self.x = torch.from_numpy(data.x_train)
        self.y = torch.from_numpy(tabular.noisy_labels(data.y_train, data.classes, cfg.label_noise, cfg.seed))
        self.sampler = tabular.BatchSampler(len(self.x), cfg.batch_size, cfg.seed)
        self.rng = np.random.default_rng([cfg.seed, 4242])

    def batch(self, step: int, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        idx = self.sampler.next()
        x, y = self.x[idx], self.y[idx]
        if cfg.bad_batch_step >= 0 and cfg.bad_batch_step <= step < cfg.bad_batch_step + cfg.bad_batch_steps:
            garbage = self.rng.normal(0.0, cfg.bad_batch_scale, size=tuple(x.shape)).astype(np.float32)
            x = torch.from_numpy(garbage)
        if step == cfg.hard_batch_step:
            with torch.no_grad():
                per_sample = loss_of(cfg, model(self.x), self.y, reduction="none")
            hardest = torch.argsort(per_sample, descending=True)[: max(cfg.batch_size, len(self.x) * 15 // 100)]
            pick = self.rng.choice(len(hardest), size=cfg.batch_size, replace=False)
            idx = hardest[torch.from_numpy(pick)]
            x, y = self.x[idx], self.y[idx]
        return x, y


def held_out_activity(model: nn.Module, x: torch.Tensor) -> tuple[float, float, float]:
    """(dead ReLU unit fraction, zero-activation fraction, saturated sigmoid/tanh fraction) on ``x``."""
    outs: list[tuple[nn.Module, torch.Tensor]] = []
    hooks = [m.register_forward_hook(lambda m, _i, o: outs.append((m, o.detach()))) for m in activation_modules(model)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    dead = zero = sat = 0.0
    units = elems = sat_elems = 0
    for m, o in outs:
        flat = o.reshape(o.shape[0], o.shape[1], -1)
        if isinstance(m, nn.ReLU):
            dead += float((flat <= 0).all(dim=0).all(dim=-1).sum())
            units += flat.shape[1]
            zero += float((o <= 0).sum())
            elems += o.numel()
        else:
            lo, hi = (0.0, 1.0) if isinstance(m, nn.Sigmoid) else (-1.0, 1.0)
            band = 0.01 * (hi - lo)
            sat += float(((o < lo + band) | (o > hi - band)).sum())
            sat_elems += o.numel()
    return (dead / units if units else 0.0, zero / elems if elems else 0.0,
            sat / sat_elems if sat_elems else 0.0)


def train(cfg: ClassifierConfig, run_dir: str | Path | None = None, probe: bool = False,
          run_id: str | None = None) -> ClassifierResult:
    """Train ``cfg``; with ``probe`` the live probe writes telemetry into ``run_dir``."""
    cfg.validate()
    seed_everything(cfg.seed)
    data = tabular.load(cfg.dataset, cfg.raw_scale)
    model = build_model(cfg, data)
    optimizer = torch.optim.SGD(trained_parameters(model, cfg.frozen), lr=cfg.lr, momentum=cfg.momentum)
    source = BatchSource(cfg, data)
    x_test, y_test = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
    losses, accs, ev_steps, ev_loss, ev_acc = [], [], [], [], []
    first_bad = -1
    meta = {"program": cfg.program, "parameters": sum(p.numel() for p in model.parameters())}
    t0 = time.perf_counter()
    with probe_session(model, optimizer, run_dir, probe, activations=True, run_id=run_id, meta=meta) as pr:
        rec = Recorder(pr)
        for step in range(cfg.steps):
            lr = cfg.lr * lr_factor(cfg, step)
            for g in optimizer.param_groups:
                g["lr"] = lr
            model.train()
            x, y = source.batch(step, model)
            logits = model(x)
            loss = loss_of(cfg, logits, y)
            if cfg.zero_grad_every > 0 and step % cfg.zero_grad_every == 0:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            value, acc = float(loss.detach()), accuracy_of(logits.detach(), y)
            if first_bad < 0 and not math.isfinite(value):
                first_bad = step
            metrics: dict[str, float] = {"loss": value, "lr": lr, "accuracy": acc}
            if step % cfg.eval_every == 0 or step == cfg.steps - 1:
                model.eval()
                with torch.no_grad():
                    out = model(x_test)
                    metrics["eval_loss"] = float(loss_of(cfg, out, y_test))
                    metrics["eval_accuracy"] = accuracy_of(out, y_test)
                ev_steps.append(step)
                ev_loss.append(metrics["eval_loss"])
                ev_acc.append(metrics["eval_accuracy"])
            rec.log(**metrics)
            optimizer.step()
            losses.append(value)
            accs.append(acc)
    step_ms = (time.perf_counter() - t0) * 1e3 / max(1, cfg.steps)
    dead, zero, sat = held_out_activity(model, x_test)
    return ClassifierResult(np.array(losses), np.array(accs), np.array(ev_steps), np.array(ev_loss),
                            np.array(ev_acc), dead, zero, sat, first_bad, step_ms, data.classes,
                            Path(run_dir) if run_dir is not None else None)
