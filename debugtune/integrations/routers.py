"""MoE routers of a model, found by module type or named by the user, with their expert count and top-k.

Found automatically: modules whose class name ends in ``Router`` or ``Gate`` (transformers' ``*TopKRouter``,
Megatron-core's ``TopKRouter``, DeepSpeed's ``TopKGate``) that carry an expert count and a top-k; and, for
models whose router is a plain ``nn.Linear`` called ``gate`` (transformers 4.x Mixtral, Qwen2-MoE), that linear
layer of a block that carries both. The attribute names are those of the frameworks' own modules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "num_moe_experts", "moe_num_experts")
_TOP_K = ("top_k", "topk", "num_experts_per_tok", "moe_router_topk", "k")


@dataclass(frozen=True)
class Router:
    """One router to watch: its module path, the module, its expert count and top-k."""

    name: str
    module: Any
    num_experts: int
    top_k: int


def _int_attr(obj: Any, names: Iterable[str]) -> int | None:
    for owner in (obj, getattr(obj, "config", None)):
        if owner is None:
            continue
        for name in names:
            value = getattr(owner, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _is_router_type(module: Any) -> bool:
    return type(module).__name__.endswith(("Router", "Gate"))


def find_routers(model: Any) -> list[Router]:
    """Every router of ``model`` that the probe can count tokens for (see the module docstring)."""
    import torch

    found: list[Router] = []
    taken: set[str] = set()
    for name, module in model.named_modules():
        if any(name == t or name.startswith(t + ".") for t in taken):
            continue
        n, k = _int_attr(module, _EXPERTS), _int_attr(module, _TOP_K)
        if n is None or k is None:
            continue
        if _is_router_type(module):
            found.append(Router(name, module, n, k))
            taken.add(name)
            continue
        gate = getattr(module, "gate", None)
        inner = [m for m in module.modules() if m is not module and _is_router_type(m)]
        if isinstance(gate, torch.nn.Linear) and gate.out_features == n and not inner:
            found.append(Router(f"{name}.gate" if name else "gate", gate, n, k))
            taken.add(name)
    return found


def named_routers(model: Any, names: Iterable[str] | Mapping[str, tuple[int, int]]) -> list[Router]:
    """The routers the user named: module paths, or a mapping path → (num_experts, top_k) for modules that
    do not carry them. An unknown path or a router without its sizes is an error naming it."""
    modules = dict(model.named_modules())
    sizes = dict(names) if isinstance(names, Mapping) else {n: None for n in names}
    out = []
    for name, given in sizes.items():
        if name not in modules:
            near = [m for m in modules if m.endswith(name.rsplit(".", 1)[-1])][:3]
            raise ValueError(f"router {name!r}: no such module in the model" + (f" (did you mean {near}?)" if near
                                                                                  else ""))
        module = modules[name]
        n, k = given if given is not None else (_int_attr(module, _EXPERTS), _int_attr(module, _TOP_K))
        if n is None or k is None:
            raise ValueError(f"router {name!r}: its expert count and top-k are not attributes of the module; "
                             f"give them as routers={{{name!r}: (num_experts, top_k)}}")
        out.append(Router(name, module, int(n), int(k)))
    return out
