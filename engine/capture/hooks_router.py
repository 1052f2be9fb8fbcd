"""Tokens per expert from a MoE router's forward output (``Probe.watch_router``).

Accepted outputs:

- a floating tensor ``[..., num_experts]`` (logits or probabilities): each token's ``top_k`` largest
  entries are its experts (leading dimensions are flattened to tokens);
- a tuple/list: the first integer tensor in it is taken as expert indices (any shape, e.g.
  ``[tokens, top_k]``; negative indices, as some routers use for dropped slots, are not counted);
  without one, the first floating tensor whose last dimension is ``num_experts`` is read as logits.

Counts are computed with ``torch.bincount`` without weights (deterministic on every device, no RNG)
under ``no_grad`` and accumulate over the forward calls of a step; they are copied to the host once per step.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def expert_indices(output: Any, num_experts: int, top_k: int) -> Any:
    """The flat tensor of chosen expert indices in a router output (see the module docstring)."""
    import torch

    if isinstance(output, torch.Tensor):
        candidates = [output]
    elif isinstance(output, tuple | list):
        candidates = [t for t in output if isinstance(t, torch.Tensor)]
        for t in candidates:
            if not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool:
                return t.detach().reshape(-1)
    else:
        raise TypeError(f"router output of type {type(output).__name__} is not a tensor or tuple of tensors")
    for t in candidates:
        if t.is_floating_point() and t.dim() >= 1 and t.shape[-1] == num_experts:
            return torch.topk(t.detach().reshape(-1, num_experts), top_k, dim=-1).indices.reshape(-1)
    raise ValueError(f"router output has no index tensor and no tensor with last dimension {num_experts}")


def count_tokens(indices: Any, num_experts: int) -> Any:
    """Tokens per expert [num_experts] (int64, on the indices' device)."""
    import torch

    idx = indices.to(torch.int64)
    return torch.bincount(idx[(idx >= 0) & (idx < num_experts)], minlength=num_experts)


class RouterWatch:
    """Accumulated tokens per expert of one router."""

    def __init__(self, name: str, num_experts: int, top_k: int, params: list[int]) -> None:
        self.name = name
        self.num_experts = int(num_experts)
        self.top_k = int(top_k)
        self.params = params
        self.counts: Any = None

    @property
    def entities(self) -> list[str]:
        return [f"{self.name}/expert:{i}" for i in range(self.num_experts)]

    def observe(self, output: Any) -> None:
        import torch

        with torch.no_grad():
            c = count_tokens(expert_indices(output, self.num_experts, self.top_k), self.num_experts)
            self.counts = c if self.counts is None else self.counts + c

    def take(self) -> np.ndarray | None:
        if self.counts is None:
            return None
        out: np.ndarray = self.counts.cpu().numpy().astype(np.float64)
        self.counts = None
        return out
