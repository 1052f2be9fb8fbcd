"""Several objectives: ParEGO scalarisation, the Pareto front and its hypervolume (all minimised).

ParEGO (Knowles 2006): each iteration draws weights ``w`` from a flat Dirichlet and scalarises the
objectives, normalised to [0, 1] per task, with the augmented Chebyshev function
``max_i w_i f_i + rho * sum_i w_i f_i``. The hypervolume is exact (recursive slicing on the last
objective), fine for up to 3-4 objectives and a few hundred points.
"""

from __future__ import annotations

import numpy as np


def pareto_mask(F: np.ndarray) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``F`` (minimisation; duplicates are all kept)."""
    F = np.asarray(F, float)
    if len(F) == 0:
        return np.zeros(0, dtype=bool)
    le = np.all(F[:, None, :] <= F[None, :, :], axis=2)
    lt = np.any(F[:, None, :] < F[None, :, :], axis=2)
    dominated = np.any(le & lt, axis=0)  # column j is dominated by some row i
    return ~dominated


def hypervolume(F: np.ndarray, ref: np.ndarray) -> float:
    """Volume dominated by ``F`` and bounded by the reference point ``ref`` (minimisation)."""
    F = np.asarray(F, float)
    ref = np.asarray(ref, float)
    F = F[np.all(F < ref, axis=1)]
    if len(F) == 0:
        return 0.0
    if F.shape[1] == 1:
        return float(ref[0] - F[:, 0].min())
    F = F[np.argsort(F[:, -1], kind="stable")]
    volume = 0.0
    for i in range(len(F)):
        top = F[i + 1, -1] if i + 1 < len(F) else ref[-1]
        if top > F[i, -1]:
            volume += (top - F[i, -1]) * hypervolume(F[: i + 1, :-1], ref[:-1])
    return float(volume)


def reference_point(F: np.ndarray, margin: float = 0.1) -> np.ndarray:
    """A reference point just beyond the worst observed value of each objective."""
    F = np.asarray(F, float)
    lo, hi = F.min(axis=0), F.max(axis=0)
    return hi + margin * np.where(hi > lo, hi - lo, np.maximum(np.abs(hi), 1.0))


def normalise(F: np.ndarray) -> np.ndarray:
    """Each column mapped to [0, 1] by its observed range (a constant column becomes 0)."""
    F = np.asarray(F, float)
    lo, span = F.min(axis=0), np.ptp(F, axis=0)
    return (F - lo) / np.where(span > 0, span, 1.0)


class ParEGO:
    """Augmented-Chebyshev scalarisation with weights redrawn from ``rng`` by :meth:`resample`."""

    def __init__(self, n_objectives: int, rng: np.random.Generator, rho: float = 0.05):
        self.m, self.rng, self.rho = n_objectives, rng, rho
        self.weights = np.ones(n_objectives) / n_objectives
        self.version = 0

    def resample(self) -> np.ndarray:
        self.weights = self.rng.dirichlet(np.ones(self.m))
        self.version += 1
        return self.weights

    def __call__(self, F: np.ndarray) -> np.ndarray:
        """Scalarised values (n, 1) of the objective rows ``F`` of one task (normalised within it)."""
        Fn = normalise(np.asarray(F, float).reshape(-1, self.m))
        wf = self.weights * Fn
        return (wf.max(axis=1) + self.rho * wf.sum(axis=1))[:, None]
