"""Mixture-of-experts programs of two published shapes, for the classic held-out bench: written here from the
papers' descriptions, sharing no code with the fault bench's MoE families (``debugtune/scenarios``,
``bench/harness2``).

- ``switch_lm``: a Switch Transformer layer (Fedus et al., arXiv 2101.03961): top-1 routing, the expert output
  scaled by its router probability, a capacity of 1.25 × tokens / experts with the overflow skipping the layer
  through the residual, the balancing term N · Σ fᵢ · Pᵢ at 0.01; in a one-block character language model.
- ``mixtral_rows``: a Mixtral block (Jiang et al., arXiv 2401.04088): a plain linear ``gate``, softmax, top-2,
  the two weights renormalised, SwiGLU experts, no capacity limit; the balancing term at 0.02 logged as
  ``aux_loss`` the way the transformers model returns it; classifying the digits from their 8 rows.

Each watches its router through ``probe.watch_router`` and records the top-1 expert of every token it routes in
training, for the bench's balance criterion.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from bench.classic_base import Data, Program, update


class _SwiGLU(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False), \
            nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SparseMoE(nn.Module):
    """Token-choice routing over expert FFNs: top ``top_k`` of the gate's softmax (renormalised when ``renorm``),
    each expert taking at most ``capacity_factor`` × its fair share of the assignments in token order (None: no
    limit), the balancing term kept in ``aux`` for the step's loss, and for each training step its top-1 counts
    (``counts``) and the term it adds to the loss (``terms``: ``aux_coeff`` × ``aux``)."""

    def __init__(self, d: int, experts: nn.ModuleList, top_k: int, *, renorm: bool,
                 capacity_factor: float | None, aux_coeff: float) -> None:
        super().__init__()
        self.num_experts, self.top_k, self.renorm = len(experts), top_k, renorm
        self.capacity_factor, self.aux_coeff = capacity_factor, aux_coeff
        self.gate, self.experts = nn.Linear(d, self.num_experts), experts
        self.aux = torch.zeros(())
        self.counts: list[torch.Tensor] = []
        self.terms: list[float] = []

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        probs = self.gate(h).softmax(-1)
        w, idx = probs.topk(self.top_k, -1)
        if self.renorm:
            w = w / w.sum(-1, keepdim=True)
        top1 = F.one_hot(idx[:, 0], self.num_experts).float()
        self.aux = self.num_experts * (top1.mean(0) * probs.mean(0)).sum()
        if self.training:
            self.counts.append(top1.sum(0).detach())
            self.terms.append(self.aux_coeff * float(self.aux.detach()))
        cap = len(h) if self.capacity_factor is None else \
            math.ceil(self.capacity_factor * len(h) * self.top_k / self.num_experts)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            tok, slot = torch.nonzero(idx == e, as_tuple=True)
            tok, slot = tok[:cap], slot[:cap]
            if len(tok):
                out = out.index_add(0, tok, w[tok, slot, None] * expert(h[tok]))
        return out

    def balance(self) -> float:
        """The CV of the top-1 expert shares over the last fifth of the training steps."""
        tail = torch.stack(self.counts[-max(1, len(self.counts) // 5):]).sum(0)
        share = tail / tail.sum()
        return float(share.std() / share.mean().clamp_min(1e-9))


def _moe_program(model: nn.Module, moe: SparseMoE, opt: torch.optim.Optimizer, step: Any, steps: int,
                 *, log_aux: bool, sched: torch.optim.lr_scheduler.LRScheduler | None = None) -> Program:
    return Program(model, opt, step, steps, sched,
                   watch=lambda probe: probe.watch_router(moe.gate, moe.num_experts, moe.top_k, name="moe.gate"),
                   metrics=(lambda: {"aux_loss": float(moe.aux.detach())}) if log_aux else None, balance=moe.balance)


_TEXT = ("a mixture of experts sends each token to a few of its experts. the router learns which expert suits "
         "which token, and a balancing term keeps every expert busy. numbers like 1024 or 3.14 go one way, "
         "punctuation; quotes and (brackets) another! short words and long words differ too. ")


class _SwitchLM(nn.Module):
    def __init__(self, vocab: int, d: int = 48, length: int = 64) -> None:
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(1, length, d) * 0.02)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        experts = nn.ModuleList(nn.Sequential(nn.Linear(d, 96), nn.ReLU(), nn.Linear(96, d)) for _ in range(4))
        self.moe = SparseMoE(d, experts, 1, renorm=False, capacity_factor=1.25, aux_coeff=0.01)
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos[:, :x.size(1)]
        a = self.norm1(h)
        causal = torch.triu(torch.ones(x.size(1), x.size(1), dtype=torch.bool), 1)
        h = h + self.attn(a, a, a, attn_mask=causal, need_weights=False)[0]
        b, t, d = h.shape
        h = h + self.moe(self.norm2(h).reshape(b * t, d)).view(b, t, d)
        return self.head(h)


def switch_lm(d: Data) -> Program:
    """A one-block character language model with a Switch FFN of 4 experts; Adam 1e-3, the balancing term at
    0.01 inside the loss that is logged."""
    vocab = sorted(set(_TEXT))
    ids = torch.tensor([vocab.index(c) for c in _TEXT * 20])
    model = _SwitchLM(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss() -> torch.Tensor:
        starts = torch.randint(0, len(ids) - 65, (16,), generator=d.g).tolist()
        b = torch.stack([ids[k:k + 65] for k in starts])
        lm = F.cross_entropy(model(b[:, :-1]).reshape(-1, len(vocab)), b[:, 1:].reshape(-1))
        return lm + model.moe.aux_coeff * model.moe.aux
    return _moe_program(model, model.moe, opt, lambda: update(opt, loss), 300, log_aux=False)


class _MixtralRows(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.embed, self.pos = nn.Linear(8, d), nn.Parameter(torch.zeros(1, 8, d))
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.moe = SparseMoE(d, nn.ModuleList(_SwiGLU(d, 64) for _ in range(8)), 2, renorm=True,
                             capacity_factor=None, aux_coeff=0.02)
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x.view(-1, 8, 8)) + self.pos
        a = self.norm1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        b, t, d = h.shape
        h = h + self.moe(self.norm2(h).reshape(b * t, d)).view(b, t, d)
        return self.head(h.mean(1))


def mixtral_rows(d: Data) -> Program:
    """A Mixtral block of 8 SwiGLU experts, top-2, over the digits' 8 rows; AdamW 1e-3; loss and ``aux_loss``
    logged."""
    model = _MixtralRows()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss() -> torch.Tensor:
        i = d.batch()
        return F.cross_entropy(model(d.flat[i]), d.y[i]) + model.moe.aux_coeff * model.moe.aux
    return _moe_program(model, model.moe, opt, lambda: update(opt, loss), 300, log_aux=True)
