"""The losses of the families and what each needs to be judged: the loss on what the model outputs (with the
LossActivationMismatch fault's activation in between), an accuracy where there is one, the loss of chance
(the best constant prediction), and how a share of the targets is corrupted (LabelNoise).

| objective | loss | chance loss | label noise (share ``f``) |
|---|---|---|---|
| ce | cross-entropy over classes | ln(classes) | labels replaced by a class drawn uniformly |
| lm | cross-entropy over the vocabulary, every position | ln(vocab) | target tokens replaced uniformly |
| bce | BCEWithLogits per label | mean binary entropy of the label priors | label vectors replaced by random bits |
| mse | mean squared error | the target variance | targets replaced by those of random examples |
| recon | mean squared reconstruction error | the input variance | — (no labels) |
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from debugtune.scenarios.tabular import noisy_labels

OUTPUT_FUNCTIONS = {"softmax": lambda z: z.softmax(dim=-1), "relu": F.relu, "sigmoid": torch.sigmoid}


@dataclass(frozen=True)
class Objective:
    name: str
    outputs: tuple[str, ...]  # the activations a LossActivationMismatch may put before this loss

    def loss(self, out: torch.Tensor, y: torch.Tensor, output: str = "logits", reduction: str = "mean") -> torch.Tensor:
        """The loss of ``out`` (after the ``output`` activation); ``reduction="none"`` gives one value per example."""
        if output != "logits":
            out = OUTPUT_FUNCTIONS[output](out)
        if self.name in ("ce", "lm"):
            flat = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            if reduction == "mean":  # the library's own reduction (bitwise what programs call)
                return F.cross_entropy(*flat)
            per = F.cross_entropy(*flat, reduction="none").view(y.shape)
        elif self.name == "bce":
            per = F.binary_cross_entropy_with_logits(out, y, reduction=reduction)
        else:
            per = F.mse_loss(out, y, reduction=reduction)
        if reduction == "mean":
            return per
        return per.reshape(per.shape[0], -1).mean(dim=1)

    def accuracy(self, out: torch.Tensor, y: torch.Tensor, output: str = "logits") -> float | None:
        """Share of correct predictions (per label for bce, per token for lm); None for regression. ``output``:
        the activation already applied to ``out`` (a sigmoid's decision point is 0.5, not 0)."""
        if self.name in ("ce", "lm"):
            return float((out.argmax(dim=-1) == y).float().mean())
        if self.name == "bce":
            return float(((out > (0.5 if output == "sigmoid" else 0.0)).float() == y).float().mean())
        return None

    def chance(self, y_train: np.ndarray, classes: int) -> float:
        """The loss of the best input-blind prediction (uniform for ce/lm, the prior for bce, the mean for mse)."""
        if self.name in ("ce", "lm"):
            return math.log(classes)
        if self.name == "bce":
            p = np.clip(y_train.mean(axis=0), 1e-6, 1 - 1e-6)
            return float(np.mean(-(p * np.log(p) + (1 - p) * np.log(1 - p))))
        return float(np.mean(np.var(y_train.reshape(len(y_train), -1), axis=0)))

    def corrupt(self, y: np.ndarray, classes: int, fraction: float, seed: int) -> np.ndarray:
        """A copy of ``y`` with ``fraction`` of its targets corrupted uniformly (see the module docstring)."""
        if fraction <= 0:
            return y
        if self.name == "recon":
            raise ValueError("an autoencoder has no labels to corrupt")
        if self.name in ("ce", "lm"):
            return noisy_labels(y.reshape(-1), classes, fraction, seed).reshape(y.shape)
        rng = np.random.default_rng([seed, 31337])
        out = y.copy()
        idx = rng.choice(len(y), size=int(round(fraction * len(y))), replace=False)
        if self.name == "bce":
            out[idx] = rng.integers(0, 2, size=(len(idx), y.shape[1])).astype(y.dtype)
        else:
            out[idx] = y[rng.integers(0, len(y), size=len(idx))]
        return out


OBJECTIVES = {o.name: o for o in (
    Objective("ce", ("softmax", "relu", "sigmoid")),
    Objective("lm", ("softmax", "relu", "sigmoid")),
    Objective("bce", ("sigmoid", "relu")),
    Objective("mse", ("relu", "sigmoid")),
    Objective("recon", ("relu", "sigmoid")),
)}
