"""A synthetic next-token task for the MoE scenario: sequences from a mixture of sparse Markov chains.

Each sequence starts with a domain marker token and then follows that domain's transition table
(each token has a few likely successors). A model that routes each domain to its own experts can
reach the entropy floor; a model whose experts are shared by everything cannot hold every table at
once. The batch for position ``p`` is a pure function of (seed, p), so the sampler's state is its
position and a replay from a checkpoint sees the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class MarkovSource:
    """``domains`` transition tables over ``vocab`` tokens; token ids 0..domains-1 are the markers."""

    vocab: int
    domains: int
    successors: int
    seed: int

    def tables(self) -> np.ndarray:
        """Transition probabilities, shape [domains, vocab, vocab] (rows sum to 1; read-only, computed once)."""
        return _tables(self.vocab, self.domains, self.successors, self.seed)

    def entropy_floor(self) -> float:
        """The mean next-token entropy (nats) of a body token: the best achievable LM loss."""
        w = self.tables()[0, self.domains]
        w = w[w > 0]
        return float(-(w * np.log(w)).sum())


@lru_cache(maxsize=16)
def _tables(vocab: int, domains: int, successors: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 7919])
    t = np.zeros((domains, vocab, vocab))
    body = np.arange(domains, vocab)
    weights = np.array([0.75, 0.2, 0.05, 0.0][:successors]) + 1e-9
    weights = weights / weights.sum()
    for d in range(domains):
        for tok in range(vocab):
            nxt = rng.choice(body, size=successors, replace=False)
            t[d, tok, nxt] = weights
    t.setflags(write=False)
    return t


class SequenceSampler:
    """Deterministic batches of (inputs, targets) token ids; ``state_dict()`` holds the position.

    ``domain_skew`` > 0 draws the domains from a Zipf law of that exponent instead of uniformly (a corpus
    where a few sources dominate). ``shards`` > 1 gives each cabinet's data-parallel ranks their own domains
    (`_sharded`)."""

    def __init__(self, source: MarkovSource, batch_size: int, seq_len: int, seed: int, domain_skew: float = 0.0,
                 shards: int = 1, cycle_steps: int = 0, cycle_skew: float = 0.0):
        self.source = source
        self.shards = shards
        self.cycle_steps, self.cycle_skew = cycle_steps, cycle_skew
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.seed = seed
        self.position = 0
        self._cum = np.cumsum(source.tables(), axis=-1)
        zipf = 1.0 / np.arange(1, source.domains + 1) ** domain_skew
        self._domain_p = zipf / zipf.sum() if domain_skew > 0 else None

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])
        self.seed = int(state.get("seed", self.seed))

    def batch_at(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """The batch at ``position`` (without moving the sampler): int64 arrays [batch, seq_len]."""
        rng = np.random.default_rng([self.seed, position, 104729])
        b, n, src = self.batch_size, self.seq_len + 1, self.source
        seq = np.empty((b, n), dtype=np.int64)
        if self._domain_p is None:
            dom = rng.integers(0, src.domains, size=b)
        else:
            dom = rng.choice(src.domains, size=b, p=self._domain_p)
        if self.shards > 1:
            dom = self._sharded(rng, position, dom)
        seq[:, 0] = dom
        seq[:, 1] = rng.integers(src.domains, src.vocab, size=b)
        u = rng.random((b, n))
        for i in range(2, n):
            cum = self._cum[dom, seq[:, i - 1]]
            seq[:, i] = np.minimum((cum < u[:, i : i + 1]).sum(axis=1), src.vocab - 1)
        return seq[:, :-1], seq[:, 1:]

    def _sharded(self, rng: np.random.Generator, position: int, dom: np.ndarray) -> np.ndarray:
        """Sequence i is read by cabinet ``i * shards // batch``, whose data holds the domains ≡ that cabinet mod
        ``shards``; with ``cycle_steps`` the mixture within a shard swings (a von Mises weight of ``cycle_skew``
        over the shard's domains, its peak going round once per ``cycle_steps`` batches: shards read in order)."""
        b, per = len(dom), -(-self.source.domains // self.shards)
        local = dom // self.shards
        if self.cycle_steps > 0 and self.cycle_skew > 0:
            phase = 2 * np.pi * (position % self.cycle_steps) / self.cycle_steps
            w = np.exp(self.cycle_skew * np.cos(phase - 2 * np.pi * np.arange(per) / per))
            local = rng.choice(per, size=b, p=w / w.sum())
        out = local * self.shards + np.arange(b) * self.shards // b
        return np.where(out < self.source.domains, out, out - self.shards)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        batch = self.batch_at(self.position)
        self.position += 1
        return batch
