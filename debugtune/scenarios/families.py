"""The program families of the harness: per family the model it builds, its loss, its initialisation and the
fault knobs it implements; the mixture-of-experts families add routing (router watch, balancing losses,
tokens per expert).

A family is what leave-one-family-out scoring leaves out whole: its programs share the architecture, the
loss and the optimizer style, and differ from the other families in what shapes the symptoms
(`bench/faults/NOTES.md` says which fault is injected in which family, and why not elsewhere).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn

from debugtune.scenarios.config import TrainConfig
from debugtune.scenarios.models import MLP, Autoencoder, HarnessModel, ResidualMLP, SmallCNN
from debugtune.scenarios.moe import MoEConfig, MoELM, SequenceModelConfig, expert_balance, router_grad_norm
from debugtune.scenarios.sequence_models import (
    DecoderLM,
    EncoderClassifier,
    HarnessMoELM,
    MoEClassifier,
    RecurrentClassifier,
)
from debugtune.scenarios.tabular import Split

CORE = frozenset({"init_scale", "output", "label_noise", "zero_grad_every", "frozen", "bad_batch_step",
                  "bad_batch_steps", "bad_batch_scale", "hard_batch_step", "accum_steps", "freeze_backbone"})
"""Knobs every gradient-trained family implements (the harness applies them the same way everywhere)."""
RELU = frozenset({"activation", "hidden_bias"})    # a switchable hidden activation fed by biased layers
FEATURES = frozenset({"raw_scale"})                # continuous input features (not token ids)
ROUTING = frozenset({"gate_bias", "gate_bias_experts", "aux_loss_coeff", "capacity_factor", "domain_skew"})


@dataclass(frozen=True)
class Family:
    """How a family's programs are built and trained (the loop itself is the shared harness)."""

    name: str
    objective: str                      # debugtune.scenarios.objectives: ce, lm, bce, mse, recon
    build: Callable[[TrainConfig, Split], HarnessModel]
    knobs: frozenset[str]
    init: str = "default"               # "he": He-normal times init_scale; "default": the modules' own, times it
    description: str = ""

    def watch(self, probe: Any, model: nn.Module, cfg: TrainConfig) -> None:
        """Extra probe registrations (routers)."""

    def terms(self, model: nn.Module, cfg: TrainConfig, acc: dict[str, Any]) -> list[torch.Tensor]:
        """Loss terms added after each forward (auxiliary losses), in order; ``acc`` collects the step's stats."""
        return []

    def after_backward(self, model: nn.Module, cfg: TrainConfig, acc: dict[str, Any]) -> None:
        """Measurements of the raw gradients (before any clipping)."""

    def record(self, cfg: TrainConfig, acc: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
        """(canonical scalars to log, per-step series values) of the step from ``acc``."""
        return {}, {}

    def summary(self, cfg: TrainConfig, series: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return {}


def moe_config(cfg: TrainConfig) -> MoEConfig:
    """The MoE model and routing settings of ``cfg``."""
    return MoEConfig(**{f.name: getattr(cfg, f.name) for f in fields(SequenceModelConfig)})


def _routed(model: nn.Module) -> MoELM:
    """The model of an MoE family, typed (every MoE family builds an `MoELM`)."""
    if not isinstance(model, MoELM):
        raise TypeError(f"an MoE family's model must be an MoELM, not {type(model).__name__}")
    return model


@dataclass(frozen=True)
class MoEFamily(Family):
    """A family with routed experts: the Switch balancing loss and router z-loss as extra terms, tokens per
    expert, dropped assignments and the router's gradient norm measured every step."""

    def watch(self, probe: Any, model: nn.Module, cfg: TrainConfig) -> None:
        if probe is not None:
            for name, router in _routed(model).routers():
                probe.watch_router(router, cfg.num_experts, cfg.top_k, name=name)

    def terms(self, model: nn.Module, cfg: TrainConfig, acc: dict[str, Any]) -> list[torch.Tensor]:
        stats = [m.routed() for m in _routed(model).moe_layers()]
        lb = torch.stack([st.lb_loss for st in stats]).mean()
        zl = torch.stack([st.z_loss for st in stats]).mean()
        acc["tokens"] = acc.get("tokens", 0) + np.sum([st.tokens for st in stats], axis=0)
        acc["dropped"] = acc.get("dropped", 0) + int(np.sum([st.dropped for st in stats]))
        acc["micro"] = acc.get("micro", 0) + 1
        acc["lb"] = acc.get("lb", 0.0) + float(lb.detach())
        acc["zl"] = acc.get("zl", 0.0) + float(zl.detach())
        return [cfg.aux_loss_coeff * lb, cfg.z_loss_coeff * zl]

    def after_backward(self, model: nn.Module, cfg: TrainConfig, acc: dict[str, Any]) -> None:
        acc["router_grad"] = router_grad_norm(_routed(model))

    def record(self, cfg: TrainConfig, acc: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
        n = acc["micro"]
        lb, zl = acc["lb"] / n, acc["zl"] / n
        assigned = cfg.batch_size * cfg.seq_len * cfg.top_k * cfg.n_layers
        dropped = acc["dropped"] / assigned
        log = {"aux_loss": cfg.aux_loss_coeff * lb, "z_loss": cfg.z_loss_coeff * zl,
               "dropped_tokens": dropped * cfg.batch_size * cfg.seq_len * cfg.top_k, "dropped_frac": dropped}
        return log, {"tokens_per_expert": acc["tokens"], "dropped_frac": dropped,
                     "router_grad_norm": acc["router_grad"], "lb_loss": lb}

    def summary(self, cfg: TrainConfig, series: Mapping[str, np.ndarray]) -> dict[str, Any]:
        tpe = np.asarray(series["tokens_per_expert"], dtype=float)
        half, k = len(tpe) // 2, max(1, len(tpe) // 5)
        per_step = tpe.std(axis=1) / np.maximum(tpe.mean(axis=1), 1e-9)
        return {"expert_cv": expert_balance(tpe[-k:])["cv"], "expert_cv_last_half": expert_balance(tpe[half:])["cv"],
                "expert_step_cv_last_half": float(per_step[half:].mean())}


def _mlp(cfg: TrainConfig, data: Split) -> HarnessModel:
    return MLP(data.x_train.shape[1], data.classes, cfg.width, cfg.depth, cfg.activation, cfg.functional)


def _cnn(cfg: TrainConfig, data: Split) -> HarnessModel:
    if data.image_shape is None:
        raise ValueError(f"the CNN needs image data (digits), not {cfg.task!r}")
    return SmallCNN(data.classes, cfg.width, cfg.activation)


def _autoencoder(cfg: TrainConfig, data: Split) -> HarnessModel:
    return Autoencoder(data.x_train.shape[1], cfg.width, cfg.d_model, cfg.activation)


def _residual(cfg: TrainConfig, data: Split) -> HarnessModel:
    return ResidualMLP(data.x_train.shape[1], data.classes, cfg.width, cfg.depth, cfg.activation, cfg.dropout)


def _recurrent(cfg: TrainConfig, data: Split) -> HarnessModel:
    return RecurrentClassifier(cfg.arch, data.x_train.shape[-1], cfg.width, data.classes, cfg.n_layers)


def _encoder(cfg: TrainConfig, data: Split) -> HarnessModel:
    return EncoderClassifier(cfg.vocab, data.x_train.shape[1], data.classes, cfg.d_model, cfg.n_heads, cfg.width,
                             cfg.n_layers, cfg.activation, cfg.dropout)


def _decoder(cfg: TrainConfig, data: Split) -> HarnessModel:
    return DecoderLM(cfg.vocab, cfg.seq_len, cfg.d_model, cfg.n_heads, cfg.width, cfg.n_layers, cfg.activation)


def reset_routers(model: Any, cfg: TrainConfig) -> Any:
    for _, router in model.routers():
        router.reset(cfg.gate_init_std, cfg.gate_bias, cfg.gate_bias_experts)
    return model


def _moe_lm(cfg: TrainConfig, data: Split) -> HarnessModel:
    return reset_routers(HarnessMoELM(moe_config(cfg)), cfg)


def _moe_classifier(cfg: TrainConfig, data: Split) -> HarnessModel:
    return reset_routers(MoEClassifier(moe_config(cfg), data.classes), cfg)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("mlp", "ce", _mlp, CORE | RELU | FEATURES, "he",
           "ReLU MLP classifiers on tabular data, activations as modules, SGD with momentum"),
    Family("cnn", "ce", _cnn, CORE | RELU | FEATURES, "he", "a small CNN on 8x8 images, SGD with momentum"),
    Family("regression", "mse", _mlp, CORE | RELU | FEATURES, "he",
           "ReLU MLP regression with MSE (functional activations), Adam"),
    Family("recurrent", "ce", _recurrent, CORE | FEATURES, "default",
           "LSTM / GRU sequence classifiers on noisy signals, Adam"),
    Family("transformer", "ce", _encoder, CORE | RELU, "default",
           "post-norm Transformer encoder over tokens, mean-pooled, ReLU FFN modules, AdamW with warm-up"),
    Family("decoder_lm", "lm", _decoder, CORE | RELU, "default",
           "dense pre-norm decoder-only LM (causal attention, functional GELU), Adam"),
    Family("autoencoder", "recon", _autoencoder, CORE - {"label_noise"} | RELU | FEATURES, "default",
           "MLP autoencoder with a linear bottleneck, MSE reconstruction, SGD with momentum"),
    MoEFamily("moe_top1", "lm", _moe_lm, CORE | ROUTING, "default",
              "the seed scenario's MoE LM: top-1 softmax router, capacity 1.25, Switch aux loss, Adam"),
    MoEFamily("moe_top2", "ce", _moe_classifier, CORE | ROUTING, "default",
              "MoE sequence classifier, top-2 routing with renormalised gates, AdamW"),
    Family("multilabel", "bce", _mlp, CORE | RELU | FEATURES, "he",
           "multi-label MLP with BCEWithLogits (functional ReLU), plain SGD"),
    Family("residual", "ce", _residual, CORE | RELU | FEATURES, "default",
           "the modern recipe: pre-norm residual MLP, LayerNorm, dropout, clipping, warm-up + cosine, AdamW"),
)}
