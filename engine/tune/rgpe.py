"""RGPE: a ranking-weighted ensemble of GPy GPs (one per historical task + the target GP) as an Emukit model.

Feurer, Letham, Hutter & Bakshy, "Practical transfer learning for Bayesian optimization"
(arXiv:1802.02219); reference implementation ``automl/transfer-hpo-framework`` ``rgpe/methods/rgpe.py``.
Each task's outputs are z-scored on their own; the weight of model i is the probability (over posterior
draws) that it has the lowest pairwise ranking loss on the target's observations (the target GP is
judged by leave-one-out draws); a task whose median loss is worse than the target GP's 95th percentile (the
paper's weight-dilution guard) or no better than a random ranking's (it tells nothing of the target's order) gets
weight 0. Prediction: mu = sum w_i mu_i, var = sum w_i^2 var_i, mapped back to
target units. ``X``/``Y`` are the target task's data only, so Emukit's EI takes the target's best as
incumbent. Every random draw comes from the ``numpy.random.Generator`` given; GPy's optimizer restarts
use the global numpy state, which :func:`seeded_global` sets from that generator and restores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import GPy
import numpy as np
from emukit.core.interfaces import IDifferentiable, IModel

VARIANCE_MODES = ("target", "average")
"""How the ensemble's variance is formed: the target GP's alone (the reference implementation's
``variance_mode='target'``: EI never re-proposes a point the target already has), or sum w_i^2 var_i."""
NOISE_FLOOR = 1e-3
"""Lower bound of the GP noise variance in z-units (1e-6 breaks Cholesky on repeated points; notes §2.3)."""


@contextmanager
def seeded_global(rng: np.random.Generator) -> Iterator[None]:
    """Seed numpy's global RNG from ``rng`` for the block (GPy restarts, emukit anchors), then restore it."""
    saved = np.random.get_state()
    np.random.seed(int(rng.integers(2**32 - 1)))
    try:
        yield
    finally:
        np.random.set_state(saved)


def zscore(y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(y - mean) / sd`` with sd = 1 for fewer than two distinct values."""
    mu = float(np.mean(y)) if len(y) else 0.0
    sd = float(np.std(y)) if len(y) > 1 else 0.0
    sd = sd if sd > 1e-12 else 1.0
    return (y - mu) / sd, mu, sd


def make_gp(X: np.ndarray, Z: np.ndarray) -> GPy.models.GPRegression:
    """A Matérn-5/2 ARD GP on inputs in [0, 1]^d with bounded hyper-parameters (z-scored outputs)."""
    kern = GPy.kern.Matern52(X.shape[1], ARD=True, lengthscale=0.3)
    kern.lengthscale.constrain_bounded(0.02, 5.0, warning=False)
    kern.variance.constrain_bounded(0.05, 20.0, warning=False)
    gp = GPy.models.GPRegression(X, Z, kern, noise_var=0.01)
    gp.Gaussian_noise.variance.constrain_bounded(NOISE_FLOOR, 1.0, warning=False)
    return gp


def fit_gp(gp: GPy.models.GPRegression, rng: np.random.Generator, restarts: int) -> None:
    """Fit hyper-parameters with seeded restarts; too few points (< 3) keep the priors' defaults."""
    if gp.X.shape[0] < 3:
        return
    with seeded_global(rng), np.errstate(all="ignore"):
        gp.optimize_restarts(num_restarts=max(1, restarts), robust=True, verbose=False, messages=False)


class Posterior:
    """A fitted Matérn-5/2 ARD GP's latent posterior in plain numpy (GPy's own predict costs milliseconds per
    call, which dominates acquisition optimisation); same values and gradients as GPy's."""

    def __init__(self, gp: GPy.models.GPRegression):
        self.X = np.array(gp.X, dtype=float)
        self.ls = np.array(gp.kern.lengthscale.values, dtype=float)
        self.var = float(gp.kern.variance.values[0])
        self.alpha = np.array(gp.posterior.woodbury_vector[:, 0], dtype=float)
        self.k_inv = np.array(gp.posterior.woodbury_inv, dtype=float)

    def _kernel(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        diff = (x[:, None, :] - self.X[None, :, :]) / self.ls
        r5 = np.sqrt(5.0 * np.sum(diff**2, axis=2))
        e = np.exp(-r5)
        return self.var * (1.0 + r5 + r5**2 / 3.0) * e, diff, (1.0 + r5) * e

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, _, _ = self._kernel(x)
        var = self.var - np.einsum("ij,jk,ik->i", k, self.k_inv, k)
        return (k @ self.alpha)[:, None], np.maximum(var, 1e-12)[:, None]

    def gradients(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """d mean / dx and d variance / dx, each (N, D)."""
        k, diff, g = self._kernel(x)
        dk = (-5.0 / 3.0 * self.var * g)[:, :, None] * diff / self.ls  # (N, n, D)
        dm = np.einsum("ind,n->id", dk, self.alpha)
        dv = -2.0 * np.einsum("in,nm,imd->id", k, self.k_inv, dk)
        return dm, dv


def _digest(X: np.ndarray, Y: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(X).tobytes() + np.ascontiguousarray(Y).tobytes()).hexdigest()


class TaskGPs:
    """Fitted GPs of historical tasks by their data, so a task's GP is fitted once per session (the tuner's
    warm start and the RGPE model share one)."""

    def __init__(self) -> None:
        self._gps: dict[str, GPy.models.GPRegression] = {}

    def get(self, X: np.ndarray, y: np.ndarray, rng: np.random.Generator, restarts: int) -> GPy.models.GPRegression:
        X, y = np.asarray(X, float), np.asarray(y, float).reshape(-1, 1)
        key = _digest(X, y)
        gp = self._gps.get(key)
        if gp is None:
            gp = self._gps[key] = make_gp(X, zscore(y)[0])
            fit_gp(gp, rng, restarts)
        return gp


def history_mean(gps: Sequence[GPy.models.GPRegression], X: np.ndarray) -> np.ndarray:
    """The ensemble's mean before the target has any point: the uniform average of the historical tasks'
    standardised posterior means at ``X`` (RGPE's weights are uniform then), shape (N,)."""
    if not gps:
        return np.zeros(len(X))
    return np.mean([Posterior(gp).predict(np.atleast_2d(X))[0][:, 0] for gp in gps], axis=0)


class RGPEModel(IModel, IDifferentiable):
    """The ensemble (see module doc). ``base_tasks``: per historical task ``(X, y)`` in the target's encoding."""

    def __init__(self, X: np.ndarray, Y: np.ndarray, base_tasks: Sequence[tuple[np.ndarray, np.ndarray]] = (),
                 *, rng: np.random.Generator, n_samples: int = 256, restarts: int = 2,
                 task_names: Sequence[str] | None = None, variance: str = "target", task_gps: TaskGPs | None = None):
        if variance not in VARIANCE_MODES:
            raise ValueError(f"variance mode {variance!r} is not one of {VARIANCE_MODES}")
        self.variance = variance
        self.rng, self.n_samples, self.restarts = rng, n_samples, restarts
        self._task_gps = task_gps if task_gps is not None else TaskGPs()
        self._posteriors: dict[int, Posterior] = {}
        self.base: list[GPy.models.GPRegression] = []
        self.task_names: list[str] = []
        self.set_base_tasks(base_tasks, task_names)
        self._X, self._Y = np.asarray(X, float), np.asarray(Y, float).reshape(-1, 1)
        Z, self.mu, self.sd = zscore(self._Y)
        self.target = make_gp(self._X, Z)
        self.weights = np.ones(len(self.base) + 1) / (len(self.base) + 1)
        self._update_weights()

    # -- base tasks (frozen GPs, refitted only when their data change) -------------------------------
    def set_base_tasks(self, tasks: Sequence[tuple[np.ndarray, np.ndarray]],
                       names: Sequence[str] | None = None) -> None:
        """Use these historical tasks; a task with fewer than 2 points is skipped."""
        names = list(names) if names is not None else [f"task{i}" for i in range(len(tasks))]
        base, kept = [], []
        for name, (Xb, yb) in zip(names, tasks, strict=True):
            if len(yb) < 2:
                continue
            base.append(self._task_gps.get(Xb, yb, self.rng, self.restarts))
            kept.append(name)
        self.base, self.task_names = base, kept
        live = {id(gp) for gp in base} | ({id(self.target)} if hasattr(self, "target") else set())
        self._posteriors = {k: v for k, v in self._posteriors.items() if k in live}

    # -- IModel ----------------------------------------------------------------------------------------
    @property
    def X(self) -> np.ndarray:
        return self._X

    @property
    def Y(self) -> np.ndarray:
        return self._Y

    def set_data(self, X: np.ndarray, Y: np.ndarray) -> None:
        self._X, self._Y = np.asarray(X, float), np.asarray(Y, float).reshape(-1, 1)
        Z, self.mu, self.sd = zscore(self._Y)
        self.target.set_XY(self._X, Z)
        self._posteriors.pop(id(self.target), None)
        self._update_weights()

    def optimize(self, verbose: bool = False) -> None:
        fit_gp(self.target, self.rng, self.restarts)
        self._posteriors.pop(id(self.target), None)
        self._update_weights()

    def _posterior(self, gp: GPy.models.GPRegression) -> Posterior:
        post = self._posteriors.get(id(gp))
        if post is None:
            post = self._posteriors[id(gp)] = Posterior(gp)
        return post

    def _members(self) -> Iterator[tuple[float, Posterior]]:
        for w, gp in zip(self.weights, [*self.base, self.target], strict=True):
            if w > 0:
                yield float(w), self._posterior(gp)

    def predict(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m = np.zeros((len(X), 1))
        v = np.zeros((len(X), 1))
        for w, post in self._members():
            mi, vi = post.predict(X)
            m += w * mi
            if self.variance == "average":
                v += w**2 * vi
        if self.variance == "target":
            v = self._posterior(self.target).predict(X)[1]
        return m * self.sd + self.mu, np.maximum(v, 1e-12) * self.sd**2

    def get_prediction_gradients(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dm = np.zeros(X.shape)
        dv = np.zeros(X.shape)
        for w, post in self._members():
            a, b = post.gradients(X)
            dm += w * a
            if self.variance == "average":
                dv += w**2 * b
        if self.variance == "target":
            dv = self._posterior(self.target).gradients(X)[1]
        return dm * self.sd, dv * self.sd**2

    # -- weights ---------------------------------------------------------------------------------------
    def _update_weights(self) -> None:
        k, y = len(self.base) + 1, self.target.Y[:, 0]
        n = len(y)
        if k == 1 or n < 3:
            self.weights = np.ones(k) / k  # too few target points to rank (as the reference implementation)
            return
        losses = np.empty((k, self.n_samples))
        for i, gp in enumerate(self.base):
            mu, cov = gp.predict(self._X, full_cov=True, include_likelihood=False)
            draws = self.rng.multivariate_normal(mu[:, 0], cov + 1e-9 * np.eye(n), self.n_samples,
                                                 method="eigh")
            losses[i] = _misranked(draws, draws, y)
        k_inv = self.target.posterior.woodbury_inv
        alpha, diag = self.target.posterior.woodbury_vector[:, 0], np.diag(k_inv)
        loo = (y - alpha / diag) + np.sqrt(1.0 / diag) * self.rng.standard_normal((self.n_samples, n))
        losses[-1] = _misranked(loo, np.broadcast_to(y, loo.shape), y)
        threshold = np.percentile(losses[-1], 95)  # weight-dilution guard: drop tasks worse than the target
        chance = n * (n - 1) / 2  # a random ranking's expected count (`_misranked`): no information
        for i in range(k - 1):
            if np.median(losses[i]) > threshold or np.median(losses[i]) >= chance:
                losses[i] = 2 * losses.max() + 1
        best = losses == losses.min(axis=0, keepdims=True)
        self.weights = (best / best.sum(axis=0, keepdims=True)).mean(axis=1)


def _misranked(f_rows: np.ndarray, f_cols: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per draw, the number of pairs (i, j) whose order under the draw differs from the order of ``y``."""
    pred = f_rows[:, :, None] < f_cols[:, None, :]
    return (pred ^ (y[:, None] < y[None, :])[None]).sum(axis=(1, 2))
