"""The classification data sets of the scenarios, all offline: sklearn's bundled digits and AutoTrainer's
synthetic blobs and circles (fault-diagnosis-anchors §1: ``make_circles(n_samples=1000, noise=0.1,
random_state=1)``, ``make_blobs(n_samples=1000, centers=3, n_features=2, cluster_std=2, random_state=2)``,
700/300 split).

``raw_scale`` is the preprocessing knob: 0 gives the healthy preprocessing (features standardised
with the training split's mean and standard deviation); a positive value skips it and multiplies
the raw features instead (digits' raw pixels are intensities 0..16, so 16 mimics 8-bit pixels
0..255 that were never divided; AutoTrainer's "abnormal data" is blobs/circles times 100).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

DATASETS = ("digits", "blobs", "circles")


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    image_shape: tuple[int, ...] | None = None
    stream: Any = None  # a sampler with ``next() -> (x, y)``: fresh training batches instead of the pool

    @property
    def tokens(self) -> bool:
        """Inputs are token ids (no feature scale to normalise)."""
        return bool(np.issubdtype(self.x_train.dtype, np.integer))


@lru_cache(maxsize=8)
def _raw(name: str) -> tuple[np.ndarray, np.ndarray, int]:
    from sklearn import datasets

    if name == "digits":
        d = datasets.load_digits()
        return d.data.astype(np.float32), d.target.astype(np.int64), 700 * 1797 // 1000
    if name == "blobs":
        x, y = datasets.make_blobs(n_samples=1000, centers=3, n_features=2, cluster_std=2, random_state=2)
        return x.astype(np.float32), y.astype(np.int64), 700
    if name == "circles":
        x, y = datasets.make_circles(n_samples=1000, noise=0.1, random_state=1)
        return x.astype(np.float32), y.astype(np.int64), 700
    raise ValueError(f"unknown data set {name!r}; expected one of {', '.join(DATASETS)}")


def load(name: str, raw_scale: float = 0.0, split_seed: int = 0) -> Split:
    """Train/test split of data set ``name`` with the preprocessing described in the module docstring."""
    x, y, n_train = _raw(name)
    order = np.random.default_rng(split_seed).permutation(len(x))
    x, y = x[order], y[order]
    xtr, xte, ytr, yte = x[:n_train], x[n_train:], y[:n_train], y[n_train:]
    xtr, xte = preprocess(xtr, xte, raw_scale)
    shape = (1, 8, 8) if name == "digits" else None
    return Split(xtr, ytr, xte, yte, int(y.max()) + 1, shape)


def preprocess(xtr: np.ndarray, xte: np.ndarray, raw_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Features standardised per column with the training split's statistics (over every axis but the last),
    or, with ``raw_scale`` > 0, the raw features times ``raw_scale`` (the UnnormalizedInputs fault)."""
    if raw_scale > 0:
        xtr, xte = xtr * raw_scale, xte * raw_scale
    else:
        axes = tuple(range(xtr.ndim - 1))
        mu, sd = xtr.mean(axis=axes), xtr.std(axis=axes) + 1e-6
        xtr, xte = (xtr - mu) / sd, (xte - mu) / sd
    return xtr.astype(np.float32), xte.astype(np.float32)


def noisy_labels(y: np.ndarray, classes: int, fraction: float, seed: int) -> np.ndarray:
    """A copy of ``y`` with ``fraction`` of the labels corrupted: replaced by a class drawn uniformly from all
    classes (Zhang et al. 2017, "partially corrupted labels"), so a share ``fraction * (classes - 1) / classes``
    ends up wrong and the true class stays the most frequent label of its examples (on two classes, 60%
    corruption leaves 30% wrong, not an inverted task)."""
    if fraction <= 0:
        return y
    rng = np.random.default_rng([seed, 31337])
    out = y.copy()
    idx = rng.choice(len(y), size=int(round(fraction * len(y))), replace=False)
    out[idx] = rng.integers(0, classes, size=len(idx))
    return out


class BatchSampler:
    """Shuffled mini-batches, epoch after epoch; the batch at a position is a pure function of (seed, position)."""

    def __init__(self, n: int, batch_size: int, seed: int):
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.per_epoch = max(1, n // batch_size)
        self.position = 0

    def indices_at(self, position: int) -> np.ndarray:
        epoch, i = divmod(position, self.per_epoch)
        perm = np.random.default_rng([self.seed, epoch, 271828]).permutation(self.n)
        return perm[i * self.batch_size : (i + 1) * self.batch_size]

    def next(self) -> np.ndarray:
        idx = self.indices_at(self.position)
        self.position += 1
        return idx

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])
        self.seed = int(state.get("seed", self.seed))
