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


# transformers' MoE configs (Mixtral, Qwen2-MoE, OLMoE, Jamba, Switch, NLLB-MoE) and Megatron-core's config
_AUX_COEF = ("router_aux_loss_coef", "moe_aux_loss_coeff")


def balance_setting(model: Any, term_seen: bool) -> dict[str, Any]:
    """The balancing coefficient a training of ``model`` used, for run.json's ``moe`` section: the config's
    coefficient where the training forward returned a balancing term (``output.aux_loss``), 0 where it returned
    none (transformers computes the term only with ``output_router_logits=True``, which its MoE configs default
    to False, so ``Trainer`` trains them with no balancing at all); empty for a config without a coefficient."""
    config = getattr(model, "config", None)
    name = next((n for n in _AUX_COEF if isinstance(getattr(config, n, None), int | float)
                 and not isinstance(getattr(config, n), bool)), None)
    if name is None:
        return {}
    coef = float(getattr(config, name))
    if term_seen:
        return {"aux_loss_coeff": coef, "aux_loss_coeff_from": f"config.{name}"}
    return {"aux_loss_coeff": 0.0, "aux_loss_coeff_from": (
        f"the training forward returned no aux_loss (config.output_router_logits "
        f"{getattr(config, 'output_router_logits', None)}; config.{name} {coef:g} unused)")}
