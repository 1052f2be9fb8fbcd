"""The sequence models of the harness programs: recurrent classifiers (LSTM, GRU), a post-norm Transformer
encoder classifier, a dense decoder-only LM, and the mixture-of-experts models (the seed scenario's LM, a
top-2 classifier) seen through the harness's layer lists (`debugtune.scenarios.models.HarnessModel`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from debugtune.scenarios.models import HarnessModel, activation
from debugtune.scenarios.moe import MoEConfig, MoELM


class RecurrentClassifier(HarnessModel):
    """A linear input projection per time step, ``layers`` stacked LSTM or GRU layers (one module each), the last
    hidden state into the head. No hidden activation module (the gates' sigmoid and tanh are inside the kernel)."""

    def __init__(self, cell: str, inputs: int, hidden: int, classes: int, layers: int = 2):
        super().__init__()
        kinds = {"lstm": nn.LSTM, "gru": nn.GRU}
        if cell not in kinds:
            raise ValueError(f"recurrent cell must be one of {', '.join(kinds)}, got {cell!r}")
        self.proj = nn.Linear(inputs, hidden // 2)
        sizes = [hidden // 2] + [hidden] * layers
        self.rnns = nn.ModuleList(kinds[cell](a, b, batch_first=True) for a, b in zip(sizes, sizes[1:], strict=False))
        self.head = nn.Linear(hidden, classes)

    def weight_layers(self) -> list[nn.Module]:
        return [self.proj, *self.rnns, self.head]

    def hidden_layers(self) -> list[nn.Module]:
        return []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        for rnn in self.rnns:
            h, _ = rnn(h)
        return self.head(h[:, -1])


class EncoderLayer(nn.Module):
    """Post-norm encoder layer (Vaswani et al.; BERT): LN(x + MHA(x)), LN(x + W2 act(W1 x)), act a module."""

    def __init__(self, d_model: int, heads: int, d_ff: int, act: str, dropout: float):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, heads, dropout=dropout, batch_first=True)
        self.ln1 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.act = activation(act)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.drop(self.attn(x, x, x, need_weights=False)[0]))
        return self.ln2(x + self.drop(self.ff2(self.act(self.ff1(x)))))


class TransformerModel(HarnessModel):
    """Token embeddings, ``blocks`` with ``attn``/``ff1``/``ff2`` each (ff1 feeds the activation), the head."""

    embed: nn.Module
    blocks: nn.ModuleList
    head: nn.Module

    def weight_layers(self) -> list[nn.Module]:
        inner = [b.get_submodule(name) for b in self.blocks for name in ("attn", "ff1", "ff2")]
        return [self.embed, *inner, self.head]

    def hidden_layers(self) -> list[nn.Module]:
        return [b.get_submodule("ff1") for b in self.blocks]


class EncoderClassifier(TransformerModel):
    """Token and position embeddings, ``layers`` post-norm encoder layers, mean-pooling, the head."""

    def __init__(self, vocab: int, seq_len: int, classes: int, d_model: int, heads: int, d_ff: int, layers: int,
                 act: str, dropout: float):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, act, dropout) for _ in range(layers))
        self.head = nn.Linear(d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        for layer in self.blocks:
            x = layer(x)
        return self.head(x.mean(dim=1))


class DecoderBlock(nn.Module):
    """Pre-norm causal block (GPT-2): x + MHA(LN(x)), x + W2 act(W1 LN(x)) with the activation a function call."""

    def __init__(self, d_model: int, heads: int, d_ff: int, act: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.act = act  # the owning model's recorded activation

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff2(self.act(self.ff1(self.ln2(x))))


class DecoderLM(TransformerModel):
    """A dense decoder-only LM: embeddings, ``layers`` pre-norm causal blocks, a final LayerNorm, the head."""

    mask: torch.Tensor  # the causal mask, a registered buffer

    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, d_ff: int, layers: int, act: str):
        super().__init__()
        self.act_name = act
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(DecoderBlock(d_model, heads, d_ff, self.act) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:n]
        for b in self.blocks:
            x = b(x, self.mask[:n, :n])
        return self.head(self.ln(x))


def _moe_weight_layers(embed: nn.Module, blocks: nn.ModuleList, head: nn.Module) -> list[nn.Module]:
    inner = [m for b in blocks for m in (b.get_submodule("attn"), b.get_submodule("moe.router.gate"),
                                         *b.get_submodule("moe.experts").children())]
    return [embed, *inner, head]


class HarnessMoELM(MoELM, HarnessModel):
    """The seed scenario's MoE LM (`debugtune.scenarios.moe.MoELM`, unchanged) with the harness's layer lists."""

    def weight_layers(self) -> list[nn.Module]:
        return _moe_weight_layers(self.embed, self.blocks, self.head)

    def hidden_layers(self) -> list[nn.Module]:
        return []


class MoEClassifier(HarnessMoELM):
    """Sequence classification with the MoE LM's blocks (bidirectional attention here, routed FFN; top-2 with
    renormalised gates in its program), mean-pooled into a class head."""

    def __init__(self, cfg: MoEConfig, classes: int):
        super().__init__(cfg)
        self.head = nn.Linear(cfg.d_model, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:n]
        for blk in self.blocks:
            x = blk(x, None)
        return self.head(self.ln(x).mean(dim=1))
