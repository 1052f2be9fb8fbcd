"""Scalar names of training loggers (HF Trainer, Megatron-LM, Lightning, plain logs) → schema metric names.

``metric_for(key)`` returns (metric, scale) for a logged key or TensorBoard tag; unknown keys keep a cleaned
form of their own name (they land in the convergence dimension and detectors ignore them). Keys that use
another x-axis than the step (Megatron's "… vs samples") return None.
"""

from __future__ import annotations

import re

# key (lower-case, blanks/dashes as '_') → (metric, scale to the metric's unit)
_ALIASES: dict[str, tuple[str, float]] = {}


def _alias(metric: str, *keys: str, scale: float = 1.0) -> None:
    for key in keys:
        _ALIASES[_norm(key)] = (metric, scale)


def _norm(key: str) -> str:
    return re.sub(r"[\s\-]+", "_", key.strip().lower())


_alias("loss", "loss", "train/loss", "train_loss", "train_loss_step", "training_loss", "lm loss", "train/lm_loss",
       "lm_loss", "train/lm loss", "trainer/loss")
_alias("lr", "lr", "learning_rate", "train/learning_rate", "learning-rate", "learning rate", "train/lr", "trainer/lr")
_alias("grad_norm", "grad_norm", "train/grad_norm", "grad-norm", "grad norm", "grad_2.0_norm_total",
       "grad_2.0_norm/total", "gradient_norm", "train/gradient_norm", "total_grad_norm")
_alias("eval_loss", "eval_loss", "eval/loss", "val_loss", "val/loss", "validation_loss", "valid_loss",
       "lm loss validation", "validation/lm loss", "lm loss value", "val_loss_epoch")
_alias("accuracy", "accuracy", "acc", "train_acc", "train/accuracy", "train_accuracy", "train_acc_step")
_alias("eval_accuracy", "eval_accuracy", "eval/accuracy", "val_acc", "val_accuracy", "val/acc", "val_acc_epoch")
_alias("loss_scale", "loss_scale", "loss-scale", "loss scale", "train/loss_scale")
_alias("weight_norm", "params-norm", "params norm", "param_norm", "weight_norm", "params_norm")
_alias("aux_loss", "load_balancing_loss", "aux_loss", "moe/load_balancing_loss", "train/aux_loss",
       "moe_aux_loss", "load balancing loss")
_alias("z_loss", "z_loss", "router_z_loss", "moe/z_loss", "z loss")
_alias("epoch", "epoch", "train/epoch")
_alias("step_time_ms", "iteration-time", "iteration_time", "train/iteration_time", scale=1e3)  # logged in seconds
_alias("step_time_ms", "elapsed time per iteration (ms)", "step_time_ms", "iteration_time_ms")
_alias("skipped_iterations", "number of skipped iterations", "skipped_iterations")
_alias("nan_iterations", "number of nan iterations", "nan_iterations")
_alias("dropped_tokens", "dropped_tokens", "moe/dropped_tokens")

_STEP_KEYS = ("step", "global_step", "iteration", "iter", "train/global_step", "trainer/global_step", "_step")


def metric_for(key: str) -> tuple[str, float] | None:
    """(metric name, unit scale) for a logged key; None for keys not indexed by the step."""
    norm = _norm(key)
    if "_vs_" in norm:
        return None
    if norm in _ALIASES:
        return _ALIASES[norm]
    if norm.startswith("lr_") or norm.startswith("lr/"):  # Lightning LearningRateMonitor: 'lr-AdamW', 'lr-Adam/pg1'
        return "lr", 1.0
    return re.sub(r"[^a-z0-9_./:]+", "_", norm).strip("_") or "value", 1.0


def is_step_key(key: str) -> bool:
    """Whether a column/key names the training step."""
    return _norm(key) in _STEP_KEYS
