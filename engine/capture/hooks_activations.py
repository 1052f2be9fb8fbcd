"""Zero and saturation fractions of activation-module outputs (bounded activations by default; every activation
module with ``attach(..., activations=True)``).

Zero fraction (``act_zero_frac``): exact zeros of the output, for every activation module. Saturation
(``act_sat_frac``), for bounded activations only, is the share of outputs whose pre-activation lies
outside ±b (``probe.act_sat_preact`` in the knowledge base), tested on the output:
Sigmoid y <= sigmoid(-b) or y >= sigmoid(b); Tanh |y| >= tanh(b); Softsign |y| >= b/(1+b);
Hardtanh (symmetric) and ReLU6 at their clip value; Hardsigmoid at 0 or 1.

Slope (``act_slope``, bounded activations, detail steps): the mean derivative of the activation at the inputs it
received, read from its output (sigmoid y(1 - y), at most 1/4; tanh 1 - y²; softsign (1 - |y|)²; the clipping
functions their slope inside the clip): the share of the signal, forward and backward, the function passes on.
"""

from __future__ import annotations

import math
from typing import Any

_ACTIVATIONS = ("ReLU", "ReLU6", "LeakyReLU", "PReLU", "RReLU", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish",
                "Sigmoid", "Tanh", "Hardtanh", "Hardsigmoid", "Hardswish", "Softsign", "Softplus", "LogSigmoid",
                "Tanhshrink")


def saturation_bounds(module: Any, preact: float | None) -> tuple[float, float] | None:
    """(eps, large) such that saturated = (|y| < eps) + (|y| >= large), or None when not defined."""
    import torch.nn as nn

    if isinstance(module, nn.Hardsigmoid):
        return 0.0, 1.0  # zeros are counted by eps=0 → none; handled by adding exact zeros
    if isinstance(module, nn.ReLU6):
        return 0.0, 6.0
    if isinstance(module, nn.Hardtanh):
        if module.min_val != -module.max_val:
            return None
        return 0.0, float(module.max_val)
    if preact is None:
        return None
    if isinstance(module, nn.Sigmoid):
        return 1.0 / (1.0 + math.exp(preact)), 1.0 / (1.0 + math.exp(-preact))
    if isinstance(module, nn.Tanh):
        return 0.0, math.tanh(preact)
    if isinstance(module, nn.Softsign):
        return 0.0, preact / (1.0 + preact)
    return None


_BOUNDED = ("Sigmoid", "Tanh", "Softsign", "Hardtanh", "ReLU6", "Hardsigmoid")


def activation_modules(model: Any, *, bounded_only: bool = False) -> list[tuple[str, Any]]:
    """The activation modules of ``model`` (only those with a bounded output with ``bounded_only``)."""
    import torch.nn as nn

    kinds = tuple(getattr(nn, k) for k in (_BOUNDED if bounded_only else _ACTIVATIONS) if hasattr(nn, k))
    return [(name or type(m).__name__, m) for name, m in model.named_modules() if isinstance(m, kinds)]


def slope_of(module: Any) -> Any:
    """The derivative of a bounded activation as a function of its output (a tensor function), or None."""
    import torch.nn as nn

    if isinstance(module, nn.Sigmoid):
        return lambda y: y * (1.0 - y)
    if isinstance(module, nn.Tanh):
        return lambda y: 1.0 - y * y
    if isinstance(module, nn.Softsign):
        return lambda y: (1.0 - y.abs()) ** 2
    if isinstance(module, nn.Hardsigmoid):
        return lambda y: ((y > 0) & (y < 1)).to(y.dtype) / 6.0
    if isinstance(module, nn.ReLU6):
        return lambda y: ((y > 0) & (y < 6)).to(y.dtype)
    if isinstance(module, nn.Hardtanh):
        lo, hi = float(module.min_val), float(module.max_val)
        return lambda y: ((y > lo) & (y < hi)).to(y.dtype)
    return None


class ActivationStats:
    """Per activation module: zeros, saturated and element counts accumulated over a step, and the mean slope of a
    bounded one on detail steps."""

    def __init__(self, name: str, module: Any, preact: float | None) -> None:
        import torch.nn as nn

        self.name = name
        self.bounds = saturation_bounds(module, preact)
        self.sat_counts_zeros = isinstance(module, nn.Hardsigmoid)
        self.slope = slope_of(module)
        self.zeros = self.sat = self.numel = 0.0
        self.slope_sum = self.slope_numel = 0.0

    def add_slope(self, output: Any) -> None:
        """Accumulate the activation's derivative at this call's inputs (read from ``output``, no graph kept)."""
        if self.slope is not None:
            y = output.detach()
            self.slope_sum += float(self.slope(y.float()).sum())
            self.slope_numel += float(y.numel())

    def take_slope(self) -> float | None:
        if self.slope_numel == 0:
            return None
        out = self.slope_sum / self.slope_numel
        self.slope_sum = self.slope_numel = 0.0
        return out

    def add(self, zeros: float, tiny: float, large: float, numel: float) -> None:
        self.zeros += zeros
        self.numel += numel
        if self.bounds is not None:
            self.sat += tiny + large + (zeros if self.sat_counts_zeros else 0.0)

    def take(self) -> tuple[float, float | None] | None:
        if self.numel == 0:
            return None
        out = (self.zeros / self.numel, self.sat / self.numel if self.bounds is not None else None)
        self.zeros = self.sat = self.numel = 0.0
        return out
