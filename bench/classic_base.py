"""What every classic program is made of: the data they share (scikit-learn's digits), the training a program
hands the harness, and one optimizer step. Shared by ``bench.classic_programs`` and ``bench.classic_moe``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

Step = Callable[[], float]


@dataclass
class Program:
    """One training: its model and optimizer, the step that returns the batch loss, how many steps, a scheduler
    stepped every ``sched_every`` steps (or none); for an MoE, what it shows the probe once attached (``watch``:
    its routers), what it logs beside the loss each step (``metrics``), and how balanced its experts ended
    (``balance``: the CV of the top-1 expert shares over the last fifth of the steps)."""

    model: nn.Module
    opt: torch.optim.Optimizer
    step: Step
    steps: int
    sched: torch.optim.lr_scheduler.LRScheduler | None = None
    sched_every: int = 1
    watch: Callable[[Any], None] | None = None
    metrics: Callable[[], dict[str, float]] | None = None
    balance: Callable[[], float] | None = None


class Data:
    """The digits as 28×28 images (MNIST's normalisation) and as 8 rows of 8, their labels, and a generator."""

    MEAN, STD = 0.1307, 0.3081  # MNIST's pixel mean and std, as the examples normalise

    def __init__(self, seed: int) -> None:
        from sklearn.datasets import load_digits

        digits = load_digits()
        self.flat = torch.tensor(digits.data, dtype=torch.float32) / 16.0
        self.raw = torch.tensor(digits.data, dtype=torch.float32)
        self.img = (F.interpolate(self.flat.view(-1, 1, 8, 8), size=(28, 28), mode="bilinear",
                                  align_corners=False) - self.MEAN) / self.STD
        self.y = torch.tensor(digits.target)
        self.g = torch.Generator().manual_seed(seed)

    def pixels(self) -> torch.Tensor:
        """The images back on the pixel scale, 0 to 1."""
        return self.img * self.STD + self.MEAN

    def batch(self, n: int = 64) -> torch.Tensor:
        return torch.randint(0, len(self.y), (n,), generator=self.g)


def update(opt: torch.optim.Optimizer, loss: Callable[[], torch.Tensor], clip: float | None = None) -> float:
    """One optimizer step on ``loss()``; its value."""
    opt.zero_grad()
    out = loss()
    out.backward()
    if clip is not None:
        nn.utils.clip_grad_norm_([p for group in opt.param_groups for p in group["params"]], clip)
    opt.step()
    return out.item()


