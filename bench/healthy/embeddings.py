"""Embeddings: skip-gram with negative sampling over a synthetic topical corpus, two ``nn.Embedding`` tables.

The corpus: ``VOCAB`` words, a few shared "function" words and the rest split into topics; each
sentence picks one topic and draws its content words from that topic with Zipf frequencies, mixed with
function words. Skip-gram (Mikolov et al. 2013, "Distributed representations of words and phrases",
eq. 4) scores (centre, context) pairs within a window against ``NEGATIVES`` noise words drawn from the
unigram distribution to the 3/4 power, with plain SGD as word2vec does.

Its telemetry has sparse gradients by construction: the rows of both tables whose words are absent
from a batch get an exactly zero gradient (most of the vocabulary on any step: the rare words of a
Zipf law), and a row's update ratio is large on the steps it appears. Learning is measured on the
input vectors: a content word's nearest neighbours (cosine) share its topic far above chance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

VOCAB, FUNCTION_WORDS, TOPICS = 1200, 40, 10
SENTENCE, WINDOW, FUNCTION_SHARE = 12, 2, 0.3
DIM, BATCH, NEGATIVES = 32, 512, 5
LR = 0.025
STEPS = 400
MIN_STEPS = 350
NEIGHBOURS = 5
# learned: 60% of a frequent content word's 5 nearest neighbours share its topic (chance: 1/10)
PURITY_BAR = 0.6


class Corpus:
    """The topical corpus: word ids 0..FUNCTION_WORDS-1 are function words, the rest belong to topics."""

    def __init__(self, seed: int):
        rng = np.random.default_rng([seed, 2013])
        content = rng.permutation(np.arange(FUNCTION_WORDS, VOCAB))
        self.topics = np.array_split(content, TOPICS)
        self.topic_of = np.full(VOCAB, -1)
        for t, words in enumerate(self.topics):
            self.topic_of[words] = t
        self.zipf = [1.0 / np.arange(1, len(w) + 1) for w in self.topics]
        self.zipf = [z / z.sum() for z in self.zipf]
        counts = np.zeros(VOCAB)
        counts[:FUNCTION_WORDS] = FUNCTION_SHARE / FUNCTION_WORDS
        for words, z in zip(self.topics, self.zipf, strict=True):
            counts[words] = (1 - FUNCTION_SHARE) * z / TOPICS
        self.unigram = counts

    def sentences(self, n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((n, SENTENCE), dtype=np.int64)
        topic = rng.integers(0, TOPICS, size=n)
        for i, t in enumerate(topic):
            out[i] = rng.choice(self.topics[t], size=SENTENCE, p=self.zipf[t])
        function = rng.random((n, SENTENCE)) < FUNCTION_SHARE
        out[function] = rng.integers(0, FUNCTION_WORDS, size=int(function.sum()))
        return out

    def pairs(self, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(centre, context) pairs within ``WINDOW`` from fresh sentences, ``n_pairs`` of them."""
        sents = self.sentences(n_pairs // (2 * WINDOW * (SENTENCE - WINDOW)) + 1, rng)
        centre, context = [], []
        for off in range(1, WINDOW + 1):
            centre += [sents[:, :-off].ravel(), sents[:, off:].ravel()]
            context += [sents[:, off:].ravel(), sents[:, :-off].ravel()]
        c, o = np.concatenate(centre), np.concatenate(context)
        pick = rng.permutation(len(c))[:n_pairs]
        return c[pick], o[pick]


class SkipGram(nn.Module):
    """Input and output embedding tables; ``forward`` gives the negative-sampling loss summed over a batch of
    pairs (word2vec's SGD takes one step per pair: a sum, so a word's step does not shrink with the batch)."""

    def __init__(self) -> None:
        super().__init__()
        self.centre = nn.Embedding(VOCAB, DIM)
        self.context = nn.Embedding(VOCAB, DIM)
        nn.init.uniform_(self.centre.weight, -0.5 / DIM, 0.5 / DIM)  # word2vec.c: input vectors small, outputs 0
        nn.init.zeros_(self.context.weight)

    def forward(self, centre: torch.Tensor, context: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        v = self.centre(centre)
        pos = (v * self.context(context)).sum(-1)
        neg = torch.bmm(self.context(noise), v.unsqueeze(2)).squeeze(2)
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).sum()


def topic_purity(model: SkipGram, corpus: Corpus) -> float:
    """Mean share of same-topic words among the ``NEIGHBOURS`` nearest input vectors of the 20 most frequent
    words of every topic."""
    vectors = F.normalize(model.centre.weight.detach(), dim=1)
    probes = np.concatenate([words[:20] for words in corpus.topics])
    sim = vectors[torch.from_numpy(probes)] @ vectors.T
    sim[torch.arange(len(probes)), torch.from_numpy(probes)] = -2.0
    near = sim.topk(NEIGHBOURS, dim=1).indices.numpy()
    return float(np.mean(corpus.topic_of[near] == corpus.topic_of[probes][:, None]))


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("skipgram_topics", steps, STEPS)
    seed_everything(seed)
    corpus = Corpus(seed)
    rng = np.random.default_rng([seed, 2014])
    noise_p = corpus.unigram**0.75 / (corpus.unigram**0.75).sum()
    model = SkipGram()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    start_purity = topic_purity(model, corpus)
    losses = []
    meta = {"program": "skipgram_topics", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            c, o = corpus.pairs(BATCH, rng)
            noise = rng.choice(VOCAB, size=(BATCH, NEGATIVES), p=noise_p)
            lr = LR * (1.0 - step / n_steps) + LR * 1e-2  # word2vec's linear decay of the learning rate
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss = model(torch.from_numpy(c), torch.from_numpy(o), torch.from_numpy(noise))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item() / BATCH)
            if pr is not None:
                pr.log(train_loss=losses[-1], learning_rate=lr)
    purity = topic_purity(model, corpus)
    checks = [Check("topic_purity", purity, ">=", PURITY_BAR)]
    summary = verdict(checks, start_topic_purity=start_purity, chance_purity=1.0 / TOPICS,
                      first_loss=losses[0], final_loss=float(np.mean(losses[-30:])))
    return as_series(loss=losses), summary
