"""The model's weight layers and their scale at attach (``init_weight_std``, ``init_gain``), the class of
every parameter-owning module (run.json ``probe.layer_kinds``), and the modules that compute differently in
training and evaluation mode (run.json ``probe.mode_dependent``).

A weight layer is a module holding a parameter of two or more dimensions named ``weight`` (or ``weight_*`` /
``*_weight``: recurrent modules' ``weight_ih_l0`` / ``weight_hh_l0``, attention's ``in_proj_weight``), that is
not an embedding (a lookup table, not a map of its input) nor a normalisation layer. Its entity is its module
path, the probe's layer entity of those parameters. A model that is one bare layer (``nn.Linear`` as softmax or
linear regression: a root without children) is its own weight layer, under its weight parameter's entity
(``weight``); any other root is not one, and its own parameters' entities are their names.

``init_norm_gain``: the median |gamma| of a normalisation layer's weight at attach. LayerNorm, RMSNorm,
BatchNorm and GroupNorm start it at 1 in PyTorch and the frameworks built on it (zero for a residual branch's
last norm under zero-init recipes), so a whole model scaled by a constant shows here even where the weight
layers' gains stay within the standard range (a BERT init of std 0.02 times 8 is He-sized).

``init_gain`` = std(W) * sqrt(fan_in) with fan_in from ``torch.nn.init._calculate_fan_in_and_fan_out``: about
0.58 for PyTorch's default Linear/Conv init (kaiming_uniform with a = sqrt(5)), 1 for LeCun or square Xavier,
1.41 for He; a 0.02x or 12x init is far from all of them whatever the width. A module with several weight
matrices (an LSTM's input and hidden weights of every layer) reports the median over its matrices, each
against its own fan-in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_NOT_WEIGHT_LAYERS = ("Embedding", "EmbeddingBag")


def _is_weight_name(name: str) -> bool:
    return name == "weight" or name.startswith("weight_") or name.endswith("_weight")


def weight_matrices(module: Any) -> list[Any]:
    """The module's own (not its children's) weight parameters of two or more dimensions."""
    return [p for n, p in module.named_parameters(recurse=False) if _is_weight_name(n) and p.dim() >= 2]


def is_weight_layer(module: Any) -> bool:
    kind = type(module).__name__
    return kind not in _NOT_WEIGHT_LAYERS and "Norm" not in kind and bool(weight_matrices(module))


def weight_layers(model: Any) -> list[tuple[str, Any]]:
    """(module path, module) of every weight layer, in registration order (see the module docstring)."""
    if next(iter(model.children()), None) is None and is_weight_layer(model):
        return [(next(n for n, _ in model.named_parameters(recurse=False) if _is_weight_name(n)), model)]
    return [(name, m) for name, m in model.named_modules() if name and is_weight_layer(m)]


def layer_kinds(model: Any, layer_names: Any) -> dict[str, str]:
    """Layer entity → class name of the module that owns its parameters (the root's class for root parameters)."""
    modules = dict(model.named_modules())
    return {str(n): type(modules.get(str(n), model)).__name__ for n in layer_names}


_DROPOUTS = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout")


def mode_dependent(model: Any) -> dict[str, int]:
    """How many modules make a training-mode forward differ from an evaluation-mode one: dropout of p > 0 (the
    dropout modules, attention's and stacked recurrent layers' own ``dropout``) and batch norm that keeps running
    statistics. With any of them a training loss above the held-out loss is the regulariser's as much as the
    labels'; dropout applied functionally in ``forward`` is not seen."""
    counts = {"dropout": 0, "batch_norm": 0}
    for m in model.modules():
        kind = type(m).__name__
        p = getattr(m, "p" if kind in _DROPOUTS else "dropout", 0.0)
        if kind in _DROPOUTS or kind == "MultiheadAttention" or (
                kind in ("RNN", "LSTM", "GRU") and getattr(m, "num_layers", 1) > 1):
            counts["dropout"] += isinstance(p, int | float) and p > 0
        elif kind.startswith("BatchNorm") and getattr(m, "track_running_stats", False):
            counts["batch_norm"] += 1
    return counts


def init_scale(module: Any) -> tuple[float, float] | None:
    """(median std, median std * sqrt(fan_in)) over the module's weight matrices; None when none is readable."""
    import torch

    stds, gains = [], []
    with torch.no_grad():
        for w in weight_matrices(module):
            if w.is_meta or not w.is_floating_point() or w.numel() < 2:
                continue
            x = w.detach().double()
            std = float(x.std(correction=0))
            fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(w)
            stds.append(std)
            gains.append(std * math.sqrt(fan_in))
    if not stds:
        return None
    return float(np.median(stds)), float(np.median(gains))


def init_rows(layers: list[tuple[str, Any]]) -> tuple[list[str], list[float], list[float]]:
    """Entities, ``init_weight_std`` and ``init_gain`` of the weight layers that have readable weights."""
    names, stds, gains = [], [], []
    for name, module in layers:
        scale = init_scale(module)
        if scale is not None:
            names.append(name)
            stds.append(scale[0])
            gains.append(scale[1])
    return names, stds, gains


def norm_gains(model: Any) -> tuple[list[str], list[float]]:
    """Entities and median |weight| at attach of the normalisation layers with a readable 1-D weight."""
    import torch

    names, gains = [], []
    with torch.no_grad():
        for name, m in model.named_modules():
            w = getattr(m, "weight", None)
            if not name or "Norm" not in type(m).__name__ or not isinstance(w, torch.Tensor) or w.dim() != 1:
                continue
            if w.is_meta or not w.is_floating_point() or w.numel() == 0:
                continue
            names.append(name)
            gains.append(float(w.detach().double().abs().median()))
    return names, gains
