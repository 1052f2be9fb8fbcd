"""The classifier models of the scenarios: an MLP and a small CNN, with the knobs the faults turn.

Weights start He-normal (fan-in, the ReLU gain) times ``init_scale`` — a scale far below 1 is the
BadWeightInit fault; hidden biases start at ``hidden_bias`` (strongly negative: DyingReLU). The
activation modules are real ``nn.Module`` instances (``nn.ReLU``, ``nn.Sigmoid``, ``nn.Tanh``) so
forward hooks can measure their zero and saturation fractions.
"""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def activation(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}") from None


def init_weights(model: nn.Module, scale: float, hidden_bias: float) -> None:
    """He-normal weights times ``scale``; biases of every layer but the head set to ``hidden_bias``."""
    layers = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
    with torch.no_grad():
        for i, m in enumerate(layers):
            fan_in = m.weight[0].numel()
            m.weight.normal_(0.0, scale * math.sqrt(2.0 / fan_in))
            m.bias.fill_(hidden_bias if i < len(layers) - 1 else 0.0)


class MLP(nn.Module):
    """``depth`` hidden layers of ``width`` units: fc0, act0, fc1, act1, ..., head."""

    def __init__(self, inputs: int, classes: int, width: int, depth: int, act: str):
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Linear(inputs if i == 0 else width, width), activation(act)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class SmallCNN(nn.Module):
    """Two 3x3 convolutions (8 and 16 channels) with max-pooling, then a hidden dense layer and the head."""

    def __init__(self, classes: int, width: int, act: str):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), activation(act),
            nn.Conv2d(8, 16, 3, padding=1), activation(act), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 4 * 4, width), activation(act),
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x.reshape(-1, 1, 8, 8)))


def weight_layers(model: nn.Module) -> list[nn.Module]:
    """The Linear and Conv2d layers in forward order (the head last)."""
    return [m for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d)]


def activation_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, tuple(ACTIVATIONS.values()))]
