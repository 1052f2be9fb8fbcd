"""Suite B of the fresh bench: three small PyTorch training programs with the mistakes users make.

Written from the bench's brief alone (the public probe API: ``debugtune.attach``, ``probe.log``,
``probe.watch_router``), independently of the diagnoser: nothing here was read from, or tuned against, the
engine, the knowledge base, the other benches or the diagnosis of these runs. Fault magnitudes were chosen as a
user's mistake would look and checked only against the task loss (or, for the MoE causes, expert balance).

- ``tabular_widedeep``: a wide-and-deep regressor for a synthetic "store sales" table: three categorical columns
  through ``nn.Embedding`` (deep part) and per-level biases (wide part), five numeric columns of very different
  natural scales (income in currency units, age in years, distance in metres, temperature in kelvin, a discount
  fraction) standardised by the program, a ReLU MLP, MSE on a standardised target, Adam with weight decay.
- ``bow_topics``: a bag-of-words classifier of synthetic documents (token id lists of 10-50 tokens drawn from a
  Zipf-like distractor vocabulary, with a few topic words deciding one of five classes and now and then a
  misleading topic word of another class), ``nn.EmbeddingBag`` (mean) and a two-layer ReLU MLP, cross-entropy,
  SGD with Nesterov momentum.
- ``moe_clusters``: a mixture-of-experts classifier written from scratch: a shared input projection, a top-1
  (Switch-style) MoE layer of four expert MLPs behind a linear router module, a Switch load-balancing loss
  (coefficient 0.02) added to the task loss, on standardised points from eight Gaussian clusters each labelled by
  its own linear rule (so experts can specialise), AdamW.

Each ``train(run_dir, seed, fault)`` seeds torch and its data generator with ``seed`` (the healthy run and a
faulty one see the same data and batches), trains with the probe attached, writing into ``run_dir``, and returns
the per-step task loss (for the MoE, without the balancing term). NaN and inf losses are kept as they are.

Run ``OPENBLAS_NUM_THREADS=1 python -m bench.fresh.suite_b`` to train every program healthy and with each fault
once (seed 0) and print first and late losses, the MoE balance and the seconds taken.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import debugtune


def _setup(seed: int) -> torch.Generator:
    """One thread, seeded torch; the generator draws the mini-batches (the same for healthy and faulty runs)."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def _batch(generator: torch.Generator, n: int, size: int) -> torch.Tensor:
    return torch.randint(0, n, (size,), generator=generator)


def _finish_step(optimizer: torch.optim.Optimizer, loss: torch.Tensor, zero_grad: bool) -> None:
    """The iteration's backward and step; ``zero_grad`` False is the forgotten ``optimizer.zero_grad()``."""
    if zero_grad:
        optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _relabel(labels: np.ndarray, classes: int, fraction: float, seed: int) -> np.ndarray:
    """``fraction`` of the labels replaced by a class drawn at random (a noisy annotation)."""
    rng = np.random.default_rng(seed + 7919)
    noisy = labels.copy()
    hit = rng.random(len(labels)) < fraction
    noisy[hit] = rng.integers(0, classes, int(hit.sum()))
    return noisy


# ----------------------------------------------------------------------------------------------------------------
# 1. Wide-and-deep tabular regressor
# ----------------------------------------------------------------------------------------------------------------

TAB_CARDINALITIES = (12, 7, 25)  # store, weekday, region
TAB_ROWS = 6000
TAB_STEPS = 250
TAB_BATCH = 128
TAB_LR = 3e-3

TAB_FAULTS = {
    "LearningRateTooHigh": "LearningRateTooHigh",          # Adam lr 3e-3 -> 0.3 (x100)
    "LearningRateTooLow": "LearningRateTooLow",            # Adam lr 3e-3 -> 3e-6 (/1000)
    "MissingZeroGrad": "MissingZeroGrad",                  # optimizer.zero_grad() never called
    "FrozenParameters": "FrozenParameters",                # requires_grad_(False) on all but the output layer
    "BadWeightInit": "BadWeightInit",                      # every Linear weight drawn from N(0, 1)
    "SaturatingActivations": "SaturatingActivations",      # Sigmoid hidden activations instead of ReLU
    "DyingReLU": "DyingReLU",                              # hidden biases set to -4 before the ReLUs
    "UnnormalizedInputs": "UnnormalizedInputs",            # numeric columns fed in their natural units
}


def _tabular_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw numeric columns [n, 5], categorical codes [n, 3] and a standardised target [n]."""
    rng = np.random.default_rng(seed)
    n = TAB_ROWS
    cats = np.stack([rng.integers(0, c, n) for c in TAB_CARDINALITIES], axis=1)
    raw = np.stack([
        rng.lognormal(10.8, 0.5, n),     # customer income, ~50,000
        rng.uniform(18.0, 80.0, n),      # age in years
        rng.exponential(3000.0, n),      # distance to the store in metres
        rng.normal(293.0, 8.0, n),       # temperature in kelvin
        rng.beta(2.0, 5.0, n),           # discount fraction
    ], axis=1)
    z = (raw - raw.mean(0)) / raw.std(0)
    store, weekday, region = (rng.normal(0.0, 1.0, c) for c in TAB_CARDINALITIES)
    y = (1.2 * np.sin(1.7 * z[:, 1])
         + 0.8 * region[cats[:, 2]] * z[:, 0]
         + store[cats[:, 0]]
         + 0.7 * weekday[cats[:, 1]] * z[:, 3]
         + 0.6 * np.tanh(2.0 * z[:, 2]) * z[:, 4]
         + 0.5 * z[:, 4] ** 2
         + rng.normal(0.0, 0.25, n))
    y = (y - y.mean()) / y.std()
    return raw.astype(np.float32), cats.astype(np.int64), y.astype(np.float32)


class WideDeep(nn.Module):
    """Wide part: linear in the numeric columns plus a bias per category level; deep part: embeddings + MLP."""

    def __init__(self, n_numeric: int, embed_dim: int = 6, hidden: int = 64,
                 activation: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, embed_dim) for c in TAB_CARDINALITIES)
        self.wide_numeric = nn.Linear(n_numeric, 1)
        self.wide_levels = nn.ModuleList(nn.Embedding(c, 1) for c in TAB_CARDINALITIES)
        width = n_numeric + embed_dim * len(TAB_CARDINALITIES)
        self.deep = nn.Sequential(nn.Linear(width, hidden), activation(), nn.Linear(hidden, hidden), activation())
        self.head = nn.Linear(hidden, 1)
        for level in self.wide_levels:
            nn.init.zeros_(level.weight)

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        embedded = [emb(categorical[:, i]) for i, emb in enumerate(self.embeddings)]
        deep = self.head(self.deep(torch.cat([numeric, *embedded], dim=1)))
        wide = self.wide_numeric(numeric) + sum(lvl(categorical[:, i]) for i, lvl in enumerate(self.wide_levels))
        return (deep + wide).squeeze(1)


def _tabular_model(fault: str | None) -> WideDeep:
    model = WideDeep(5, activation=nn.Sigmoid if fault == "SaturatingActivations" else nn.ReLU)
    if fault == "BadWeightInit":
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=1.0)
    if fault == "DyingReLU":
        for module in model.deep:
            if isinstance(module, nn.Linear):
                nn.init.constant_(module.bias, -4.0)
    if fault == "FrozenParameters":
        model.requires_grad_(False)
        model.head.requires_grad_(True)
    return model


def train_tabular(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    generator = _setup(seed)
    raw, cats, target = _tabular_data(seed)
    numeric = raw if fault == "UnnormalizedInputs" else (raw - raw.mean(0)) / raw.std(0)
    x_num, x_cat, y = torch.from_numpy(numeric), torch.from_numpy(cats), torch.from_numpy(target)
    model = _tabular_model(fault)
    lr = {"LearningRateTooHigh": TAB_LR * 100, "LearningRateTooLow": TAB_LR / 1000}.get(fault or "", TAB_LR)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr, weight_decay=1e-4)
    losses: list[float] = []
    with debugtune.attach(model, optimizer, run_dir) as probe:
        for _ in range(TAB_STEPS):
            idx = _batch(generator, TAB_ROWS, TAB_BATCH)
            loss = F.mse_loss(model(x_num[idx], x_cat[idx]), y[idx])
            _finish_step(optimizer, loss, zero_grad=fault != "MissingZeroGrad")
            losses.append(loss.item())
            probe.log(loss=losses[-1])
    return losses


# ----------------------------------------------------------------------------------------------------------------
# 2. Bag-of-words topic classifier
# ----------------------------------------------------------------------------------------------------------------

BOW_VOCAB = 2000
BOW_CLASSES = 5
BOW_TOPIC_WORDS = 6
BOW_DOCS = 5000
BOW_STEPS = 300
BOW_BATCH = 64
BOW_LR = 0.2

BOW_FAULTS = {
    "LearningRateTooHigh": "LearningRateTooHigh",          # SGD lr 0.2 -> 8 (x40)
    "LearningRateTooLow": "LearningRateTooLow",            # SGD lr 0.2 -> 2e-4 (/1000)
    "MissingZeroGrad": "MissingZeroGrad",                  # zero_grad() only every 10th step
    "FrozenParameters": "FrozenParameters",                # only the output layer given to the optimizer
    "BadWeightInit": "BadWeightInit",                      # Linear weights N(0, 2^2), embeddings N(0, 5^2)
    "SaturatingActivations": "SaturatingActivations",      # Sigmoid hidden activations instead of ReLU
    "DyingReLU": "DyingReLU",                              # hidden biases set to -6 before the ReLUs
    "LabelNoise": "LabelNoise",                            # 50% of the labels replaced at random
    "LossActivationMismatch": "LossActivationMismatch",    # softmax applied before F.cross_entropy
}


def _bow_data(seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Documents as token id arrays and their classes."""
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.arange(1, BOW_VOCAB))
    topics = ids[:BOW_CLASSES * BOW_TOPIC_WORDS].reshape(BOW_CLASSES, BOW_TOPIC_WORDS)
    distractors = ids[BOW_CLASSES * BOW_TOPIC_WORDS:]
    zipf = 1.0 / (np.arange(len(distractors)) + 10.0)
    zipf /= zipf.sum()
    labels = rng.integers(0, BOW_CLASSES, BOW_DOCS)
    docs = []
    for label in labels:
        length = int(rng.integers(10, 51))
        words = list(rng.choice(topics[label], 1 + rng.binomial(3, 0.5)))
        if rng.random() < 0.4:   # a misleading topic word of another class
            other = (label + rng.integers(1, BOW_CLASSES)) % BOW_CLASSES
            words.append(rng.choice(topics[other]))
        words += list(rng.choice(distractors, max(length - len(words), 0), p=zipf))
        docs.append(rng.permutation(np.array(words, dtype=np.int64)))
    return docs, labels.astype(np.int64)


def _bow_batch(docs: list[np.ndarray], idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat token ids and bag offsets for ``nn.EmbeddingBag``."""
    chosen = [docs[i] for i in idx.tolist()]
    offsets = np.cumsum([0] + [len(d) for d in chosen[:-1]])
    return torch.from_numpy(np.concatenate(chosen)), torch.from_numpy(offsets)


class BagOfWords(nn.Module):
    def __init__(self, embed_dim: int = 32, hidden: int = 64, activation: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(BOW_VOCAB, embed_dim, mode="mean")
        self.body = nn.Sequential(nn.Linear(embed_dim, hidden), activation(), nn.Linear(hidden, hidden), activation())
        self.head = nn.Linear(hidden, BOW_CLASSES)

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.bag(tokens, offsets)))


def _bow_model(fault: str | None) -> BagOfWords:
    model = BagOfWords(activation=nn.Sigmoid if fault == "SaturatingActivations" else nn.ReLU)
    if fault == "BadWeightInit":
        nn.init.normal_(model.bag.weight, std=5.0)
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=2.0)
    if fault == "DyingReLU":
        for module in model.body:
            if isinstance(module, nn.Linear):
                nn.init.constant_(module.bias, -6.0)
    return model


def train_bow(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    generator = _setup(seed)
    docs, labels = _bow_data(seed)
    if fault == "LabelNoise":
        labels = _relabel(labels, BOW_CLASSES, 0.5, seed)
    y = torch.from_numpy(labels)
    model = _bow_model(fault)
    lr = {"LearningRateTooHigh": BOW_LR * 40, "LearningRateTooLow": BOW_LR / 1000}.get(fault or "", BOW_LR)
    params = model.head.parameters() if fault == "FrozenParameters" else model.parameters()
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=1e-4)
    losses: list[float] = []
    with debugtune.attach(model, optimizer, run_dir) as probe:
        for step in range(BOW_STEPS):
            idx = _batch(generator, BOW_DOCS, BOW_BATCH)
            logits = model(*_bow_batch(docs, idx))
            if fault == "LossActivationMismatch":
                logits = F.softmax(logits, dim=1)
            loss = F.cross_entropy(logits, y[idx])
            _finish_step(optimizer, loss, zero_grad=fault != "MissingZeroGrad" or step % 10 == 0)
            losses.append(loss.item())
            probe.log(loss=losses[-1])
    return losses


# ----------------------------------------------------------------------------------------------------------------
# 3. Mixture-of-experts classifier (top-1 routing, Switch balancing loss)
# ----------------------------------------------------------------------------------------------------------------

MOE_IN = 12
MOE_DIM = 32
MOE_EXPERTS = 4
MOE_CLUSTERS = 8
MOE_CLASSES = 4
MOE_POINTS = 8000
MOE_STEPS = 300
MOE_BATCH = 256
MOE_LR = 3e-3
MOE_AUX = 0.02

MOE_FAULTS = {
    "LearningRateTooHigh": "LearningRateTooHigh",          # AdamW lr 3e-3 -> 0.18 (x60)
    "LearningRateTooLow": "LearningRateTooLow",            # AdamW lr 3e-3 -> 3e-6 (/1000)
    "MissingZeroGrad": "MissingZeroGrad",                  # optimizer.zero_grad() never called
    "LabelNoise": "LabelNoise",                            # 35% of the labels replaced at random
    "LossActivationMismatch": "LossActivationMismatch",    # sigmoid applied before F.cross_entropy
    "FrozenParameters": "FrozenParameters",                # projection and MoE layer frozen, only the head trains
    "BadWeightInit": "BadWeightInit",                      # every Linear weight drawn from N(0, 1.5^2)
    "DyingReLU": "DyingReLU",                              # projection bias set to -5 before its ReLU
    "AuxLossDisabled": "AuxLossDisabled",                  # balancing coefficient 0.02 -> 0
    "GateInitBias": "GateInitBias",                        # router bias +6 on expert 0 at init
}


def _moe_data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Points around eight cluster centres; each cluster labels its points by its own linear rule."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (MOE_CLUSTERS, MOE_IN))
    rules = rng.normal(0.0, 1.0, (MOE_CLUSTERS, MOE_CLASSES, MOE_IN))
    cluster = rng.integers(0, MOE_CLUSTERS, MOE_POINTS)
    offset = rng.normal(0.0, 1.0, (MOE_POINTS, MOE_IN))
    labels = np.einsum("nci,ni->nc", rules[cluster], offset).argmax(1)
    return (centres[cluster] + offset).astype(np.float32), labels.astype(np.int64)


class Router(nn.Module):
    """Linear gate: token features [tokens, dim] -> logits [tokens, experts]."""

    def __init__(self, dim: int, num_experts: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, num_experts)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.gate(h)


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(h)))


class SwitchMoE(nn.Module):
    """Top-1 routing: each token goes to its most probable expert, whose output is scaled by that probability."""

    def __init__(self, dim: int, hidden: int, num_experts: int) -> None:
        super().__init__()
        self.router = Router(dim, num_experts)
        self.experts = nn.ModuleList(Expert(dim, hidden) for _ in range(num_experts))
        self.last_counts = torch.zeros(num_experts, dtype=torch.long)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = self.router(h).softmax(dim=-1)
        gate, choice = probs.max(dim=-1)
        out = torch.zeros_like(h)
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero(as_tuple=True)[0]
            if rows.numel():
                out = out.index_add(0, rows, expert(h[rows]) * gate[rows, None])
        counts = torch.bincount(choice, minlength=len(self.experts))
        self.last_counts = counts.detach()
        # Switch Transformer balancing loss: E * sum_i (token share of expert i) * (mean router probability of i)
        balance = len(self.experts) * ((counts.float() / len(choice)) * probs.mean(dim=0)).sum()
        return h + out, balance


class MoEClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Sequential(nn.Linear(MOE_IN, MOE_DIM), nn.ReLU())
        self.moe = SwitchMoE(MOE_DIM, 64, MOE_EXPERTS)
        self.head = nn.Linear(MOE_DIM, MOE_CLASSES)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, balance = self.moe(self.project(x))
        return self.head(h), balance


def _moe_model(fault: str | None) -> MoEClassifier:
    model = MoEClassifier()
    if fault == "GateInitBias":
        with torch.no_grad():
            model.moe.router.gate.bias[0] = 6.0
    if fault == "BadWeightInit":
        for module in model.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=1.5)
    if fault == "DyingReLU":
        nn.init.constant_(model.project[0].bias, -5.0)
    if fault == "FrozenParameters":
        model.project.requires_grad_(False)
        model.moe.requires_grad_(False)
    return model


_MOE_COUNTS: list[torch.Tensor] = []


def train_moe(run_dir: Path, seed: int, fault: str | None) -> list[float]:
    generator = _setup(seed)
    points, labels = _moe_data(seed)
    if fault == "LabelNoise":
        labels = _relabel(labels, MOE_CLASSES, 0.35, seed)
    points = (points - points.mean(0)) / points.std(0)
    x, y = torch.from_numpy(points), torch.from_numpy(labels)
    model = _moe_model(fault)
    lr = {"LearningRateTooHigh": MOE_LR * 60, "LearningRateTooLow": MOE_LR / 1000}.get(fault or "", MOE_LR)
    aux_coef = 0.0 if fault == "AuxLossDisabled" else MOE_AUX
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    losses: list[float] = []
    _MOE_COUNTS.clear()
    with debugtune.attach(model, optimizer, run_dir) as probe:
        probe.watch_router(model.moe.router, num_experts=MOE_EXPERTS, top_k=1)
        for _ in range(MOE_STEPS):
            idx = _batch(generator, MOE_POINTS, MOE_BATCH)
            logits, balance = model(x[idx])
            if fault == "LossActivationMismatch":
                logits = torch.sigmoid(logits)
            task = F.cross_entropy(logits, y[idx])
            aux = aux_coef * balance
            _finish_step(optimizer, task + aux, zero_grad=fault != "MissingZeroGrad")
            losses.append(task.item())
            _MOE_COUNTS.append(model.moe.last_counts)
            probe.log(loss=losses[-1] + aux.item(), aux_loss=aux.item())
    return losses


def moe_balance() -> float | None:
    """CV (std / mean) of the experts' top-1 token shares over the last fifth of the last MoE training's steps."""
    if not _MOE_COUNTS:
        return None
    tail = _MOE_COUNTS[-max(1, len(_MOE_COUNTS) // 5):]
    shares = torch.stack(tail).sum(dim=0).double()
    shares /= shares.sum()
    return float(shares.std(unbiased=False) / shares.mean())


PROGRAMS: dict[str, Callable[[Path, int, str | None], list[float]]] = {
    "tabular_widedeep": train_tabular,
    "bow_topics": train_bow,
    "moe_clusters": train_moe,
}
FAULTS: dict[str, dict[str, str]] = {
    "tabular_widedeep": TAB_FAULTS,
    "bow_topics": BOW_FAULTS,
    "moe_clusters": MOE_FAULTS,
}
BALANCE: dict[str, Callable[[], float | None]] = {"moe_clusters": moe_balance}


def _late(losses: list[float]) -> float:
    return float(np.median(losses[-max(1, len(losses) // 10):]))


def main() -> None:
    print(f"{'program':18} {'fault':24} {'first':>10} {'last10%':>10} {'cv':>6} {'sec':>6}")
    for name, train in PROGRAMS.items():
        for fault in [None, *FAULTS[name]]:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                losses = train(Path(tmp) / "run", 0, fault)
                seconds = time.perf_counter() - start
            cv = BALANCE[name]() if name in BALANCE else None
            cv_text = "" if cv is None or math.isnan(cv) else f"{cv:.3f}"
            print(f"{name:18} {fault or 'healthy':24} {losses[0]:10.4g} {_late(losses):10.4g} {cv_text:>6} "
                  f"{seconds:6.1f}", flush=True)


if __name__ == "__main__":
    main()
