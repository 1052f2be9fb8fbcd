"""A watched MoE router's own parameters and logits: a biased gate versus a missing balancing loss.

At ``watch_router`` (step 0): ``router_bias_spread``, max minus median over experts of a bias vector of size
``num_experts`` among the router's parameters (a gate initialised to prefer one expert shows it before any
token is routed), and ``router_weight_std``, the std of its first weight matrix. On detail steps:
``router_logit_spread``, max minus median over experts of the token-mean logits, read from the first floating
output tensor with last dimension ``num_experts`` that is not a probability simplex (probabilities say
nothing about a bias a softmax has normalised away). A missing balancing loss leaves the gate unbiased at
step 0 and lets imbalance grow from training; a biased gate is imbalanced from the first step.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from debugtune.engine.capture.hooks_forward import simplex_rows


def router_parameters(module: Any, num_experts: int) -> dict[str, float]:
    """``router_bias_spread`` and ``router_weight_std`` of the module's parameters (those it has)."""
    import torch

    out: dict[str, float] = {}
    with torch.no_grad():
        params = [p.detach() for p in module.parameters() if p.is_floating_point() and not p.is_meta]
        bias = next((p for p in params if p.dim() == 1 and p.numel() == num_experts), None)
        weight = next((p for p in params if p.dim() >= 2 and num_experts in p.shape), None)
        weight = weight if weight is not None else next((p for p in params if p.dim() >= 2), None)
        if bias is not None:
            b = bias.double().cpu().numpy()
            out["router_bias_spread"] = float(b.max() - np.median(b))
        if weight is not None and weight.numel() > 1:
            out["router_weight_std"] = float(weight.double().std(correction=0))
    return out


def router_logits(output: Any, num_experts: int, simplex_tol: float) -> Any:
    """The first floating tensor ``[..., num_experts]`` of a router output that is not a probability simplex."""
    import torch

    if isinstance(output, torch.Tensor):
        candidates = [output]
    elif isinstance(output, tuple | list):
        candidates = [t for t in output if isinstance(t, torch.Tensor)]
    else:
        return None
    for t in candidates:
        if t.is_floating_point() and t.dim() >= 1 and t.shape[-1] == num_experts and t.numel():
            hit, rows = simplex_rows(t, simplex_tol)
            if hit < rows:
                return t
    return None


class RouterLogits:
    """Token sums of one router's logits over a detail step."""

    def __init__(self, name: str, num_experts: int) -> None:
        self.name = name
        self.num_experts = int(num_experts)
        self.sums: Any = None
        self.tokens = 0

    def observe(self, output: Any, simplex_tol: float) -> None:
        import torch

        logits = router_logits(output, self.num_experts, simplex_tol)
        if logits is None:
            return
        with torch.no_grad():
            flat = logits.detach().reshape(-1, self.num_experts)
            s = flat.sum(dim=0, dtype=torch.float64)
        self.sums = s if self.sums is None else self.sums + s
        self.tokens += flat.shape[0]

    def take(self) -> float | None:
        """max - median over experts of the token-mean logit (None when no logits were seen)."""
        if self.sums is None or not self.tokens:
            return None
        mean = self.sums.cpu().numpy() / self.tokens
        self.sums, self.tokens = None, 0
        return float(mean.max() - np.median(mean))
