"""Every data set of the harness programs by name, all generated offline (numpy, sklearn's generators and
bundled sets; nothing downloaded), each a fixed data set whatever the training seed.

Continuous features come in "raw units" (per-feature scales and offsets, as measured quantities are) and are
standardised by default; ``raw_scale`` > 0 skips that (`tabular.preprocess`: the UnnormalizedInputs fault).

| name | inputs | targets |
|---|---|---|
| digits, blobs, circles | `tabular` (sklearn digits; AutoTrainer's blobs and circles) | class |
| tabular5 | ``make_classification``: 20 features (8 informative), 5 classes, features in mixed units | class |
| smooth | 8 features in mixed units | a random smooth function of them (16 random Fourier terms), noise 0.1 |
| friedman | ``make_friedman1``: 10 features in [0, 1] | Friedman #1, standardised |
| multilabel | ``make_multilabel_classification``: 24 word-count features | 6 binary labels |
| sines | 32 samples of a noisy sine (sensor units) | which of 4 frequency bands |
| waves | 32 samples of a noisy periodic signal | its waveform (sine, square, triangle, sawtooth) |
| domains | 31 tokens of a sequence from one of 8 Markov chains (`sequences`) | the chain |
| markov | next-token prediction on the Markov chains: a fresh stream per step, pools for eval / hard batches | tokens |
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from debugtune.scenarios import tabular
from debugtune.scenarios.config import TrainConfig
from debugtune.scenarios.sequences import MarkovSource, SequenceSampler
from debugtune.scenarios.tabular import Split, preprocess

N_TRAIN, N_TEST = 1200, 400
POOL_TRAIN, POOL_TEST = 512, 256


def _mixed_units(z: np.ndarray, seed: int) -> np.ndarray:
    """Standard-normal features turned into raw measurements: scales 1..100 and offsets up to ±200."""
    rng = np.random.default_rng([seed, 8191])
    scale = 10.0 ** rng.uniform(0.0, 2.0, size=z.shape[-1])
    offset = rng.normal(0.0, 100.0, size=z.shape[-1])
    return (z * scale + offset).astype(np.float32)


def _split(x: np.ndarray, y: np.ndarray, raw_scale: float, classes: int) -> Split:
    xtr, xte = preprocess(x[:N_TRAIN], x[N_TRAIN:N_TRAIN + N_TEST], raw_scale)
    return Split(xtr, y[:N_TRAIN], xte, y[N_TRAIN:N_TRAIN + N_TEST], classes)


@lru_cache(maxsize=16)
def _raw(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    from sklearn import datasets

    n = N_TRAIN + N_TEST
    if name == "tabular5":
        x, y = datasets.make_classification(n_samples=n, n_features=20, n_informative=8, n_redundant=4,
                                            n_classes=5, n_clusters_per_class=1, class_sep=1.5, random_state=3)
        return _mixed_units(x, 3), y.astype(np.int64), 5
    if name == "smooth":
        rng = np.random.default_rng(11)
        z = rng.normal(size=(n, 8))
        w, b, a = rng.normal(0.0, 0.5, size=(8, 16)), rng.uniform(0, 2 * np.pi, 16), rng.normal(size=16)
        f = np.sin(z @ w + b) @ a
        y = (f - f.mean()) / f.std() + rng.normal(0.0, 0.1, size=n)
        return _mixed_units(z, 11), y.astype(np.float32)[:, None], 1
    if name == "friedman":
        x, y = datasets.make_friedman1(n_samples=n, n_features=10, noise=0.5, random_state=7)
        y = (y - y[:N_TRAIN].mean()) / y[:N_TRAIN].std()
        return x.astype(np.float32), y.astype(np.float32)[:, None], 1
    if name == "multilabel":
        x, y = datasets.make_multilabel_classification(n_samples=n, n_features=24, n_classes=6, n_labels=2,
                                                       random_state=5)
        return x.astype(np.float32), y.astype(np.float32), 6
    if name in ("sines", "waves"):
        return _signals(name, n)
    raise ValueError(f"unknown data set {name!r}; expected one of {', '.join(DATASETS)}")


def _signals(name: str, n: int, length: int = 32) -> tuple[np.ndarray, np.ndarray, int]:
    """Noisy periodic signals in sensor units (baseline 100, gain 20): frequency band or waveform is the class."""
    rng = np.random.default_rng(17 if name == "sines" else 19)
    y = rng.integers(0, 4, size=n)
    t = np.arange(length) / length
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
    amp = rng.uniform(0.5, 1.5, size=(n, 1))
    if name == "sines":
        freq = np.array([1.0, 2.0, 3.5, 5.0])[y][:, None] * rng.uniform(0.9, 1.1, size=(n, 1))
        s = np.sin(2 * np.pi * freq * t + phase)
    else:
        freq = rng.uniform(1.5, 3.0, size=(n, 1))
        u = (freq * t + phase / (2 * np.pi)) % 1.0
        shapes = np.stack([np.sin(2 * np.pi * u), np.sign(np.sin(2 * np.pi * u)), 4 * np.abs(u - 0.5) - 1,
                           2 * u - 1])
        s = shapes[y, np.arange(n)]
    x = 100.0 + 20.0 * (amp * s + rng.normal(0.0, 0.3, size=(n, length)))
    return x.astype(np.float32)[:, :, None], y.astype(np.int64), 4


def markov_source(cfg: TrainConfig) -> MarkovSource:
    return MarkovSource(cfg.vocab, cfg.domains, cfg.successors, cfg.data_seed)


def _sequences(cfg: TrainConfig, count: int, seed: int, skew: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    x, y = _pool(markov_source(cfg), count, cfg.seq_len, seed, skew)
    return x.copy(), y.copy()


@lru_cache(maxsize=32)
def _pool(source: MarkovSource, count: int, seq_len: int, seed: int, skew: float) -> tuple[np.ndarray, np.ndarray]:
    """A fixed set of sequences (computed once per process; callers get copies)."""
    return SequenceSampler(source, count, seq_len, seed, domain_skew=skew).batch_at(0)


def _domains(cfg: TrainConfig) -> Split:
    """The chain that generated a sequence, from its tokens (the marker token is cut off)."""
    xs, ys = [], []
    for seed, n in ((10_000 + cfg.data_seed, N_TRAIN), (20_000 + cfg.data_seed, N_TEST)):
        x, _ = _sequences(cfg, n, seed, cfg.domain_skew)
        xs.append(x[:, 1:])
        ys.append(x[:, 0].copy())
    return Split(xs[0], ys[0], xs[1], ys[1], cfg.domains)


def _markov(cfg: TrainConfig) -> Split:
    """Next-token prediction: training batches from a stream seeded by the run (as the MoE seed scenario), pools
    of training-like and held-out sequences for hard batches and evaluation."""
    xtr, ytr = _sequences(cfg, POOL_TRAIN, 30_000 + cfg.data_seed, cfg.domain_skew)
    xte, yte = _sequences(cfg, POOL_TEST, 40_000 + cfg.data_seed, cfg.domain_skew)
    stream = SequenceSampler(markov_source(cfg), cfg.batch_size, cfg.seq_len, cfg.seed, domain_skew=cfg.domain_skew)
    return Split(xtr, ytr, xte, yte, cfg.vocab, stream=stream)


DATASETS = (*tabular.DATASETS, "tabular5", "smooth", "friedman", "multilabel", "sines", "waves", "domains",
            "markov")


def load(cfg: TrainConfig) -> Split:
    """The data set ``cfg.task`` with ``cfg.raw_scale``'s preprocessing."""
    if cfg.task in tabular.DATASETS:
        return tabular.load(cfg.task, cfg.raw_scale)
    if cfg.task == "domains":
        return _domains(cfg)
    if cfg.task == "markov":
        return _markov(cfg)
    x, y, classes = _raw(cfg.task)
    return _split(x, y, cfg.raw_scale, classes)
