"""What every healthy-only program shares: its registry entry and the verdict of its own learning check.

A healthy program proves it learned by a measure of its own (a GAN's sample statistics, a policy's
return against a random policy's, a GCN's test accuracy ...), computed from the model and data,
never from the probe's telemetry. Each check is a figure against a bar with the reason for the bar;
the program learned when every check holds.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

Series = dict[str, np.ndarray]
Summary = dict[str, Any]
TrainFn = Callable[..., tuple[Series, Summary]]

_OPS = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class HealthyProgram:
    """A healthy program: ``train(seed, run_dir, probe, run_id, steps=None) -> (series, summary)``.

    ``series`` holds at least ``"loss"`` (per step, the scalar the probed model optimises or the program
    reports); ``summary`` holds ``learned``, ``why`` and the figures behind them. ``steps`` is the default
    length; ``min_steps`` the shortest run whose learning check holds (on the seeds the tests use);
    ``loss_metric`` the name under which the program logs that loss to the probe (``loss``, ``train_loss``).
    """

    name: str
    family: str
    description: str
    train: TrainFn
    steps: int
    min_steps: int
    loss_metric: str


@dataclass(frozen=True)
class Check:
    """One figure of the program's own learning measure against its bar (``op`` is ">=" or "<=")."""

    name: str
    value: float
    op: str
    bar: float

    @property
    def holds(self) -> bool:
        return bool(np.isfinite(self.value)) and _OPS[self.op](self.value, self.bar)

    def text(self) -> str:
        mark = "ok" if self.holds else "FAILED"
        return f"{self.name} {self.value:.4g} {self.op} {self.bar:.4g} ({mark})"


def verdict(checks: Sequence[Check], **figures: float) -> Summary:
    """The summary of a run: ``learned``, ``why`` (every check in words) and the figures (checks included)."""
    summary: Summary = {c.name: float(c.value) for c in checks}
    summary.update({k: float(v) for k, v in figures.items()})
    summary["learned"] = all(c.holds for c in checks)
    summary["why"] = "; ".join(c.text() for c in checks)
    return summary


def as_series(**columns: Sequence[float] | np.ndarray) -> Series:
    """Per-step lists as float arrays (the interface's series)."""
    return {k: np.asarray(v, dtype=float) for k, v in columns.items()}


def resolve_steps(name: str, steps: int | None, default: int) -> int:
    """``steps`` or the program's default (a run shorter than its ``min_steps`` may not have learned yet)."""
    n = default if steps is None else int(steps)
    if n < 1:
        raise ValueError(f"{name}: steps must be >= 1, got {n}")
    return n


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Classification accuracy of ``model`` on ``x`` in eval mode (batch norm on its running statistics)."""
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc
