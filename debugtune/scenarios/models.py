"""The feed-forward models of the harness programs (MLP, small CNN, autoencoder, pre-norm residual MLP) and
what every harness model offers the harness's fault knobs.

A harness model lists its ``weight_layers()`` in forward order, the head last (the init scale, the layers
left out of the optimizer, a frozen backbone), and its ``hidden_layers()``, whose outputs feed the hidden
activation (their biases: DyingReLU). Hidden activations are modules (``nn.ReLU`` ..., which the probe's
forward hooks see) or, with ``functional=True``, plain function calls in ``forward`` (``F.relu``: no module
to hook), which the model records in ``trace`` when the program measures its own held-out activity.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "gelu": nn.GELU}
FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": F.relu, "sigmoid": torch.sigmoid,
                                                               "tanh": torch.tanh, "gelu": F.gelu}


def activation(name: str) -> nn.Module:
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}") from None


class HarnessModel(nn.Module):
    """The harness's view of a model (see the module docstring); subclasses override the layer lists."""

    act_name = "relu"
    trace: list[tuple[str, torch.Tensor]] | None = None

    def weight_layers(self) -> list[nn.Module]:
        return [m for m in self.modules() if isinstance(m, nn.Linear | nn.Conv2d)]

    def hidden_layers(self) -> list[nn.Module]:
        return self.weight_layers()[:-1]

    def act(self, h: torch.Tensor) -> torch.Tensor:
        """The hidden activation applied functionally (recorded in ``trace`` while the program measures)."""
        y = FUNCTIONS[self.act_name](h)
        if self.trace is not None:
            self.trace.append((self.act_name, y.detach()))
        return y


def init_weights(model: HarnessModel, scale: float, hidden_bias: float) -> None:
    """He-normal weights (fan-in, the ReLU gain) times ``scale``; biases of the hidden layers ``hidden_bias``,
    the others 0."""
    hidden = {id(m) for m in model.hidden_layers()}
    with torch.no_grad():
        for m in model.weight_layers():
            weight = m.get_parameter("weight")
            weight.normal_(0.0, scale * math.sqrt(2.0 / weight[0].numel()))
            m.get_parameter("bias").fill_(hidden_bias if id(m) in hidden else 0.0)


def scale_weights(model: HarnessModel, scale: float, hidden_bias: float) -> None:
    """The modules' own initialisation kept, every weight of the weight layers times ``scale``; biases of the
    hidden layers set to ``hidden_bias`` (left as initialised when it is 0)."""
    with torch.no_grad():
        if scale != 1.0:
            seen: set[int] = set()
            for m in model.weight_layers():
                for name, p in m.named_parameters():
                    if "weight" in name.rpartition(".")[2] and id(p) not in seen:
                        seen.add(id(p))
                        p.mul_(scale)
        if hidden_bias != 0.0:
            for m in model.hidden_layers():
                m.get_parameter("bias").fill_(hidden_bias)


class MLP(HarnessModel):
    """``depth`` hidden layers of ``width`` units, then the head: body.0, (act), body.1 ..., head."""

    def __init__(self, inputs: int, classes: int, width: int, depth: int, act: str, functional: bool = False):
        super().__init__()
        self.act_name = act
        self.functional = functional
        layers: list[nn.Module] = []
        for i in range(depth):
            layers.append(nn.Linear(inputs if i == 0 else width, width))
            if not functional:
                layers.append(activation(act))
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.functional:
            return self.head(self.body(x))
        for fc in self.body:
            x = self.act(fc(x))
        return self.head(x)


class SmallCNN(HarnessModel):
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


class Autoencoder(HarnessModel):
    """inputs → width → bottleneck (linear) → width → inputs; the two width layers feed the activation."""

    def __init__(self, inputs: int, width: int, bottleneck: int, act: str):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(inputs, width), activation(act), nn.Linear(width, bottleneck))
        self.decoder = nn.Sequential(nn.Linear(bottleneck, width), activation(act))
        self.head = nn.Linear(width, inputs)

    def hidden_layers(self) -> list[nn.Module]:
        return [self.encoder[0], self.decoder[0]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.decoder(self.encoder(x)))


class ResidualMLP(HarnessModel):
    """The modern recipe's model: an input projection, ``depth`` pre-norm residual blocks
    x + Dropout(W2 act(W1 LayerNorm(x))) with the activation applied functionally, a final LayerNorm, the head."""

    def __init__(self, inputs: int, classes: int, width: int, depth: int, act: str, dropout: float):
        super().__init__()
        self.act_name = act
        self.embed = nn.Linear(inputs, width)
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(depth))
        self.up = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(depth))
        self.down = nn.ModuleList(nn.Linear(2 * width, width) for _ in range(depth))
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def weight_layers(self) -> list[nn.Module]:
        blocks = [m for pair in zip(self.up, self.down, strict=True) for m in pair]
        return [self.embed, *blocks, self.head]

    def hidden_layers(self) -> list[nn.Module]:
        return list(self.up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for norm, up, down in zip(self.norms, self.up, self.down, strict=True):
            h = h + self.drop(down(self.act(up(norm(h)))))
        return self.head(self.norm(h))


def activation_modules(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, tuple(ACTIVATIONS.values()))]
