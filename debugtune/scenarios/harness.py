"""The shared training loop of every single-process scenario program, with the fault and look-alike knobs.

Healthy defaults: standardised inputs, the family's initialisation, the family's loss on the raw model
output, ``zero_grad`` every step, every layer in the optimizer. Each knob of ``TrainConfig`` is applied here,
the same way in every family (`debugtune.scenarios.families`): the learning rate and its schedule (warm-up,
cosine decay, a scheduled drop), the init scale and hidden biases, the activation between the output and
the loss (as the model's last operation or in the loss code), corrupted labels, ``zero_grad`` every N steps
or never, leading layers left out of the optimizer (while ``optimizer.zero_grad()`` is still called, so
their gradients accumulate), corrupt and hard batches, gradient accumulation, an intentionally frozen
backbone (``requires_grad=False``), gradient clipping.

The program measures on its own what the benchmark's manifestation criteria need (never from the probe):
the loss, accuracy and global gradient norm of every step, held-out loss and accuracy, and at the end, on
the held-out set, the share of dead ReLU units (zero for every sample), of zero ReLU outputs and of saturated
sigmoid/tanh outputs; MoE families add tokens per expert, dropped assignments and the router gradient.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from debugtune.scenarios import datasets
from debugtune.scenarios.common import Recorder, probe_session, seed_everything, window_mean
from debugtune.scenarios.config import TrainConfig
from debugtune.scenarios.families import Family
from debugtune.scenarios.logstyles import rename
from debugtune.scenarios.models import ACTIVATIONS, HarnessModel, init_weights, scale_weights
from debugtune.scenarios.objectives import OBJECTIVES, OUTPUT_FUNCTIONS, Objective
from debugtune.scenarios.tabular import BatchSampler, Split


def leading_layers(model: HarnessModel, count: int) -> list[nn.Module]:
    """The first ``count`` weight layers (never the head)."""
    layers = model.weight_layers()
    return layers[: min(count, len(layers) - 1)]


def trained_parameters(model: HarnessModel, frozen: int) -> list[nn.Parameter]:
    """The parameters handed to the optimizer: all that require grad but those of the first ``frozen`` weight
    layers (FrozenParameters: left out by mistake, they still require grad)."""
    skip = {id(p) for m in leading_layers(model, frozen) for p in m.parameters()}
    return [p for p in model.parameters() if id(p) not in skip and p.requires_grad]


def make_optimizer(cfg: TrainConfig, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr)
    matrices = [p for p in params if p.ndim >= 2]  # the usual AdamW grouping: no decay on biases and norms
    rest = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": matrices, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr)


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then constant or cosine decay to 0, times the scheduled drop."""
    f = 1.0
    if cfg.warmup_steps > 0:
        f *= min(1.0, (step + 1) / cfg.warmup_steps)
    if cfg.schedule == "cosine" and step >= cfg.warmup_steps:
        progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        f *= 0.5 * (1.0 + math.cos(math.pi * progress))
    if 0 <= cfg.lr_drop_step <= step:
        f *= cfg.lr_drop_factor
    return f


class BatchSource:
    """Training batches (from the pool, or the data's stream) with the data faults and look-alikes applied."""

    def __init__(self, cfg: TrainConfig, data: Split, objective: Objective):
        self.cfg, self.objective, self.classes = cfg, objective, data.classes
        self.tokens = data.tokens
        self.x = torch.from_numpy(data.x_train)
        targets = data.x_train if objective.name == "recon" else data.y_train
        self.y = torch.from_numpy(objective.corrupt(targets, data.classes, cfg.label_noise, cfg.seed))
        self.stream = data.stream
        self.sampler = BatchSampler(len(self.x), cfg.batch_size, cfg.seed)
        self.rng = np.random.default_rng([cfg.seed, 4242])

    def batch(self, step: int, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        if self.stream is not None:
            xs, ys = self.stream.next()
            ys = self.objective.corrupt(ys, self.classes, cfg.label_noise, cfg.seed * 1_000_003 + step)
            x, y = torch.from_numpy(xs), torch.from_numpy(ys)
        else:
            idx = self.sampler.next()
            x, y = self.x[idx], self.y[idx]
        if cfg.bad_batch_step >= 0 and cfg.bad_batch_step <= step < cfg.bad_batch_step + cfg.bad_batch_steps:
            x, y = self._corrupt(x, y)
        if step == cfg.hard_batch_step:
            x, y = self._hardest(model)
        return x, y

    def _corrupt(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Garbage of scale ``bad_batch_scale`` for features; for tokens, one token id repeated (a shard of
        padding or a stuck reader), its own next token for an LM."""
        if not self.tokens:
            garbage = torch.from_numpy(self.rng.normal(0.0, self.cfg.bad_batch_scale, size=tuple(x.shape))
                                       .astype(np.float32))
            return garbage, garbage if self.objective.name == "recon" else y
        tok = torch.full_like(x, int(self.rng.integers(0, self.classes if self.objective.name == "lm" else
                                                        int(self.x.max()) + 1)))
        return tok, tok if self.objective.name == "lm" else y

    def _hardest(self, model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch from the hardest 15% of the (valid) training pool."""
        with torch.no_grad():
            per_sample = self.objective.loss(model(self.x), self.y, self.cfg.loss_activation, reduction="none")
        hardest = torch.argsort(per_sample, descending=True)[: max(self.cfg.batch_size, len(self.x) * 15 // 100)]
        pick = self.rng.choice(len(hardest), size=self.cfg.batch_size, replace=False)
        idx = hardest[torch.from_numpy(pick)]
        return self.x[idx], self.y[idx]


def _micro(x: torch.Tensor, y: torch.Tensor, k: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    if k == 1:
        yield x, y
        return
    yield from zip(x.chunk(k), y.chunk(k), strict=True)


def _global_norm(model: nn.Module) -> float:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0.0
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def held_out_activity(model: HarnessModel, x: torch.Tensor) -> tuple[float, float, float]:
    """(dead ReLU unit share, zero ReLU output share, saturated sigmoid/tanh output share) on ``x``, from the
    activation modules (forward hooks) and the functional activations the model records."""
    outs: list[tuple[str, torch.Tensor]] = []
    names = {cls: name for name, cls in ACTIVATIONS.items()}
    mods = [m for m in model.modules() if type(m) in names]
    hooks = [m.register_forward_hook(lambda m, _i, o: outs.append((names[type(m)], o.detach()))) for m in mods]
    model.trace = outs
    try:
        with torch.no_grad():
            model(x)
    finally:
        model.trace = None
        for h in hooks:
            h.remove()
    dead = zero = sat = 0.0
    units = elems = sat_elems = 0
    for kind, o in outs:
        if kind == "relu":
            channels = o.reshape(o.shape[0], o.shape[1], -1) if o.ndim == 4 else o.reshape(-1, o.shape[-1], 1)
            dead += float((channels <= 0).all(dim=0).all(dim=-1).sum())
            units += channels.shape[1]
            zero += float((o <= 0).sum())
            elems += o.numel()
        elif kind in ("sigmoid", "tanh"):
            lo, hi = (0.0, 1.0) if kind == "sigmoid" else (-1.0, 1.0)
            band = 0.01 * (hi - lo)
            sat += float(((o < lo + band) | (o > hi - band)).sum())
            sat_elems += o.numel()
    return (dead / units if units else 0.0, zero / elems if elems else 0.0,
            sat / sat_elems if sat_elems else 0.0)


def first_nonfinite(x: np.ndarray) -> int:
    bad = np.flatnonzero(~np.isfinite(x))
    return int(bad[0]) if len(bad) else -1


def check_output(family: Family, cfg: TrainConfig, program: str) -> None:
    """The activation between output and loss must be one the family's loss defines (or none)."""
    objective = OBJECTIVES[family.objective]
    if cfg.output != "logits" and cfg.output not in objective.outputs:
        raise ValueError(f"{program}: output {cfg.output!r} is not a mismatch defined for the {objective.name} loss")


def train(family: Family, cfg: TrainConfig, *, program: str, run_dir: str | Path | None = None, probe: bool = False,
          run_id: str | None = None, on_start: Callable[[nn.Module, torch.optim.Optimizer], None] | None = None,
          ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Train ``cfg`` as a program of ``family`` (the probe writing into ``run_dir`` when ``probe``); returns the
    program's own (series, summary). ``on_start(model, optimizer)`` runs once before step 0 (the replay
    checkpoint is written, or restored, there; it reads the state and draws no random number)."""
    cfg.validate()
    check_output(family, cfg, program)
    seed_everything(cfg.seed)
    objective = OBJECTIVES[family.objective]
    data = datasets.load(cfg)
    model = family.build(cfg, data)
    (init_weights if family.init == "he" else scale_weights)(model, cfg.init_scale, cfg.hidden_bias)
    if cfg.output_in_model:  # registered before the probe's hooks, which then see the squashed output
        model.register_forward_hook(lambda _m, _a, y: OUTPUT_FUNCTIONS[cfg.output](y))
    backbone = leading_layers(model, cfg.freeze_backbone)
    for m in backbone:
        m.requires_grad_(False)
    start = [p.detach().clone() for m in backbone for p in m.parameters()]
    optimizer = make_optimizer(cfg, trained_parameters(model, cfg.frozen))
    if on_start is not None:
        on_start(model, optimizer)
    source = BatchSource(cfg, data, objective)
    x_test = torch.from_numpy(data.x_test)
    y_test = x_test if objective.name == "recon" else torch.from_numpy(data.y_test)
    rows: dict[str, list[Any]] = {k: [] for k in ("loss", "accuracy", "grad_norm", "eval_step", "eval_loss",
                                                  "eval_accuracy")}
    clipped = 0
    meta = {"program": program, "parameters": sum(p.numel() for p in model.parameters())}
    t0 = time.perf_counter()
    with probe_session(model, optimizer, run_dir, probe, activations=cfg.watch_activations, run_id=run_id,
                       meta=meta) as pr:
        family.watch(pr, model, cfg)
        rec = Recorder(pr)
        for step in range(cfg.steps):
            lr = cfg.lr * lr_factor(cfg, step)
            for g in optimizer.param_groups:
                g["lr"] = lr
            model.train()
            x, y = source.batch(step, model)
            if cfg.zero_grad_every > 0 and step % cfg.zero_grad_every == 0:
                optimizer.zero_grad(set_to_none=True)
            acc: dict[str, Any] = {}
            value, hits = 0.0, []
            for xm, ym in _micro(x, y, cfg.accum_steps):
                out = model(xm)
                loss = objective.loss(out, ym, cfg.loss_activation)
                total = loss
                for term in family.terms(model, cfg, acc):
                    total = total + term
                (total / cfg.accum_steps if cfg.accum_steps > 1 else total).backward()
                value += float(loss.detach()) / cfg.accum_steps
                hits.append(objective.accuracy(out.detach(), ym, cfg.model_activation))
            family.after_backward(model, cfg, acc)
            if cfg.grad_clip > 0:
                norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
                clipped += step < max(1, cfg.steps // 10) and norm > cfg.grad_clip
            else:
                norm = _global_norm(model)
            scored = [h for h in hits if h is not None]
            accuracy = float(np.mean(scored)) if scored else None
            logged, extra = family.record(cfg, acc)
            metrics: dict[str, float | None] = {"loss": value, "lr": lr, "accuracy": accuracy, "grad_norm": norm,
                                                **logged}
            if cfg.eval_every > 0 and (step % cfg.eval_every == 0 or step == cfg.steps - 1):
                model.eval()
                with torch.no_grad():
                    out = model(x_test)
                    metrics["eval_loss"] = float(objective.loss(out, y_test, cfg.loss_activation))
                    metrics["eval_accuracy"] = objective.accuracy(out, y_test, cfg.model_activation)
                rows["eval_step"].append(step)
                rows["eval_loss"].append(metrics["eval_loss"])
                rows["eval_accuracy"].append(metrics["eval_accuracy"])
            rec.log(**rename(cfg.log_style, metrics, type(optimizer).__name__))
            optimizer.step()
            rows["loss"].append(value)
            rows["accuracy"].append(np.nan if accuracy is None else accuracy)
            rows["grad_norm"].append(norm)
            for k, v in extra.items():
                rows.setdefault(k, []).append(v)
    step_ms = (time.perf_counter() - t0) * 1e3 / max(1, cfg.steps)
    dead, zero, sat = held_out_activity(model, x_test)
    series = {k: np.asarray([np.nan if v is None else v for v in vs] if k == "eval_accuracy" else vs)
              for k, vs in rows.items()}
    now = [p.detach() for m in backbone for p in m.parameters()]
    moved = max((float((a - b).abs().max()) for a, b in zip(now, start, strict=True)), default=0.0)
    losses = series["loss"]
    summary = {"final_loss": window_mean(losses), "final_accuracy": window_mean(series["accuracy"]),
               "final_eval_loss": float(series["eval_loss"][-1]) if len(series["eval_loss"]) else float("nan"),
               "final_eval_accuracy": (float(series["eval_accuracy"][-1]) if len(series["eval_accuracy"])
                                       else float("nan")),
               "dead_frac": dead, "act_zero_frac": zero, "sat_frac": sat,
               "first_nonfinite_step": first_nonfinite(losses), "step_ms": step_ms,
               "chance_loss": objective.chance(data.x_train if objective.name == "recon" else data.y_train,
                                               data.classes),
               "objective": objective.name, "backwards_per_step": cfg.accum_steps,
               "clipped_early_frac": clipped / max(1, cfg.steps // 10) if cfg.grad_clip > 0 else 0.0,
               "backbone_max_change": moved, **family.summary(cfg, series)}
    return series, summary
