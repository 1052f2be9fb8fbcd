"""Scalar names of training loggers (HF Trainer, Megatron-LM, Lightning, plain logs) → schema metric names.

``metric_for(key)`` returns (metric, scale) for a logged key or TensorBoard tag. Spellings in the metric's own
unit come from the knowledge base (``cases/metrics.ttl``, see ``engine/telemetry/aliases.py``); only the
spellings logged in another unit are converted here. Unknown keys keep a cleaned form of their own name (they
land in the convergence dimension and detectors ignore them). Keys that use another x-axis than the step
(Megatron's "… vs samples") return None.
"""

from __future__ import annotations

import re

from debugtune.engine.telemetry.aliases import alias_table, normalise

# spellings logged in another unit than their metric's: key (normalised) → (metric, scale to the metric's unit)
_CONVERTED: dict[str, tuple[str, float]] = {
    normalise(key): ("step_time_ms", 1e3)  # Megatron's TensorBoard iteration-time is in seconds
    for key in ("iteration-time", "iteration_time", "train/iteration_time")
}


def _norm(key: str) -> str:
    return re.sub(r"[\s\-]+", "_", key.strip().lower())


_STEP_KEYS = ("step", "global_step", "iteration", "iter", "train/global_step", "trainer/global_step", "_step")


def metric_for(key: str) -> tuple[str, float] | None:
    """(metric name, unit scale) for a logged key; None for keys not indexed by the step."""
    norm = _norm(key)
    if "_vs_" in norm:
        return None
    if (converted := _CONVERTED.get(normalise(key))) is not None:
        return converted
    if (metric := alias_table().find(key)) is not None:
        return metric, 1.0
    if norm.startswith("lr_") or norm.startswith("lr/"):  # Lightning LearningRateMonitor: 'lr-AdamW', 'lr-Adam/pg1'
        return "lr", 1.0
    return re.sub(r"[^a-z0-9_./:]+", "_", norm).strip("_") or "value", 1.0


def is_step_key(key: str) -> bool:
    """Whether a column/key names the training step."""
    return _norm(key) in _STEP_KEYS
