"""Which parameters the probe watches and how their statistics group into telemetry entities.

Every parameter belongs to a layer (the path of the module that owns it, e.g. ``layers.3.mlp.fc1``; a
parameter held by the root module is its own layer) and, when the path contains ``experts.<i>``, to an
expert entity ``<path before experts>/expert:<i>`` (``kg.records.location_kind`` → "expert").
Aggregation over a group sums squares and counts and takes the maximum of abs-max.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from debugtune.native import STAT_FIELDS

_EXPERT = re.compile(r"^(?:(.*)\.)?experts\.(\d+)(?:\.|$)")
_COL = {name: i for i, name in enumerate(STAT_FIELDS)}


def layer_of(param_name: str) -> str:
    """Module path of a parameter name ("layers.0.fc.weight" → "layers.0.fc"; "scale" → "scale")."""
    head, _, _ = param_name.rpartition(".")
    return head or param_name


def expert_of(module_path: str) -> str | None:
    """Expert entity of a module path ("blocks.1.moe.experts.3.w1" → "blocks.1.moe/expert:3"), else None."""
    m = _EXPERT.match(module_path)
    if not m:
        return None
    prefix, idx = m.group(1), m.group(2)
    return f"{prefix}/expert:{idx}" if prefix else f"expert:{idx}"


@dataclass
class Groups:
    """Entity names and the group index of each member (-1 = not in any group)."""

    names: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def id(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]


class ParamLayout:
    """The named parameters of a model, their layers and experts, and which ones the optimizer updates."""

    def __init__(self, model: Any, optimizer: Any) -> None:
        in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.names: list[str] = []
        self.params: list[Any] = []
        self.layers = Groups()
        self.experts = Groups()
        layer_ids: list[int] = []
        expert_ids: list[int] = []
        for name, p in model.named_parameters():
            self.names.append(name)
            self.params.append(p)
            layer = layer_of(name)
            layer_ids.append(self.layers.id(layer))
            expert = expert_of(layer)
            expert_ids.append(self.experts.id(expert) if expert else -1)
        self.layer_of = np.array(layer_ids, dtype=np.int64)
        self.expert_of = np.array(expert_ids, dtype=np.int64)
        self.layer_names = np.array(self.layers.names, dtype=object)  # entity names, indexed by group
        self.expert_names = np.array(self.experts.names, dtype=object)
        self.position = {id(p): i for i, p in enumerate(self.params)}
        self.optimized = [i for i, p in enumerate(self.params) if id(p) in in_optimizer]
        self.trainable = [i for i, p in enumerate(self.params) if p.requires_grad]
        self.frozen = [i for i, p in enumerate(self.params) if not p.requires_grad]
        self.unnamed_in_optimizer = len(in_optimizer - set(self.position))

    def indices_of(self, module: Any) -> list[int]:
        """Positions of the parameters held by ``module`` (and its children)."""
        return [self.position[id(p)] for p in module.parameters() if id(p) in self.position]


def aggregate(values: np.ndarray, group: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """Per-group gradient metrics from per-tensor statistics rows (rows with group < 0 are left out)."""
    keep = group >= 0
    v, g = values[keep], group[keep]

    def total(col: str) -> np.ndarray:
        return np.bincount(g, weights=v[:, _COL[col]], minlength=n_groups)

    numel = total("numel")
    sumsq = total("sumsq")
    absmax = np.full(n_groups, np.nan)
    np.fmax.at(absmax, g, v[:, _COL["absmax"]])
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "numel": numel, "sumsq": sumsq, "grad_norm": np.sqrt(sumsq), "grad_absmax": absmax,
            "grad_zero_frac": total("zeros") / numel, "grad_tiny_frac": total("tiny") / numel,
            "grad_nan": total("nan"), "grad_inf": total("inf"),
        }
