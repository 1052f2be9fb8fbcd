"""What the training labels say of the model's own predictions (``output_label_*``, detail steps).

The output gradient carries the labels the loss used. Under cross-entropy on logits with hard targets it is
``c·(softmax(y) − onehot(t))``: a row's one negative element is its target. Under NLL of log-probabilities
(``log_softmax`` then ``NLLLoss``, PyTorch's MNIST example) or of probabilities it is ``−c`` (``−c/y``) at the
target and 0 elsewhere: the same one negative element, and the outputs rank the classes as their softmax would.
Under BCE on logits it is ``c·(σ(y) − t)``: each element's sign is its target. Where ``loss_identity`` finds
one of these losses behind most of a step's gradient (``convergence.loss_identity.share``), the probe reads, for
the rows it samples, the label and the model's prediction (the arg-max class; for BCE, each element above 0.5).
The labels themselves are never seen.

Labels corrupted at random and labels that are merely hard differ in how the model's disagreements fall:

- ``output_label_kappa``: agreement beyond chance, ``(a − m) / (1 − m)``, ``a`` the share of rows whose
  prediction is their label and ``m`` the share of the most frequent label (what a constant guess gets).
  A model that learnt the clean rule under a share ``η`` of labels replaced uniformly reaches about
  ``1 − η``; a model that learnt nothing, 0.
- ``output_label_error_rank``: on rows whose label is not the prediction (three classes or more), the
  label's rank among the other classes by the model's probability, scaled to [0, 1] (0: the runner-up).
  A label replaced at random is uniform over them (mean 0.5); a hard example's label is mostly the model's
  second guess (near 0).
- ``output_label_error_rank_expected``: on the same rows, the rank a label would have if it were drawn from
  the model's own probabilities over the classes it did not predict. A calibrated model matches its labels'
  rank, noise included (trained on random labels it learns to spread its probability as they do); a model
  still learning is flatter than its labels bear out, its expectation well above their rank. The diagnosis
  reads the gap as calibration (``engine/diagnose/labels.py``).
Read together, they tell random corruption (kappa well above 0, errors as far from the runner-up as chance)
from underfitting and intrinsic ambiguity (errors on the runner-up) and from a model that learnt nothing
(kappa near 0). Two classes and BCE give the kappa only. How sure the model is where it is contradicted (the
AUROC of its confidence for agreement, 0.5 for labels flipped independently of the input) was measured on the
fault bench and left out: a model still learning is unsure everywhere and scores as low. The hook only reads
tensors it is handed; cost: one comparison over the identity's sampled rows (at most
``probe.loss_identity_max_elements`` elements): 0.2–0.5 ms for 64–1,638 rows of 10 classes, 5 ms for 8 rows of
a 32,000-token vocabulary (where the identity itself takes about 70 ms), on one CPU core; the expected rank sorts
each contradicted row's probabilities on top: 0.04–0.4 ms for 64–1,638 rows of 10 classes, 20 ms for 8 rows of
32,000 (detail steps only).
"""

from __future__ import annotations

from typing import Any

SHARE_KEY = "convergence.loss_identity.share"
MIN_ROWS_KEY = "probe.label_agreement_min_rows"
KEYS = (SHARE_KEY, MIN_ROWS_KEY)
ONE_NEGATIVE = ("softmax_logits", "nll_logprobs", "nll_probs")
"""Losses whose gradient has one negative element per row, at its target, on outputs that rank the classes."""
LOSSES = (*ONE_NEGATIVE, "sigmoid_logits")
"""The identity hypotheses whose gradient gives away a hard target (see the module docstring)."""
Units = tuple[Any, Any, Any, Any]
"""(agrees, target, error rank, expected error rank) of a forward's labelled rows."""


def _expected_rank(ye: Any, probs: bool) -> Any:
    """Per row, the scaled rank a label drawn from the model's own probabilities over the classes it did not
    predict would have: what its disagreements score if they are its own uncertainty, calibrated."""
    import torch

    p = (ye / ye.sum(dim=-1, keepdim=True)) if probs else torch.softmax(ye, dim=-1)
    rest = p.sort(dim=-1, descending=True).values[:, 1:]
    q = rest / rest.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(p.dtype).tiny)
    return (q * torch.arange(rest.shape[-1], dtype=p.dtype)).sum(dim=-1) / (rest.shape[-1] - 1)


def _softmax_units(yd: Any, gd: Any, probs: bool = False) -> Units | None:
    """(agrees, target, error rank, its expectation) of rows with exactly one negative gradient element;
    ``probs``: the outputs are probabilities (NLL of ``log(y)``), else logits or log-probabilities."""
    import torch

    if yd.shape[-1] < 2:
        return None
    hard = (gd < 0).sum(dim=-1) == 1
    if not bool(hard.any()):
        return None
    y, g = yd[hard], gd[hard]  # logits and log-probabilities rank the classes as the softmax, without its underflow
    target = g.argmin(dim=-1)
    agrees = y.argmax(dim=-1) == target
    k = y.shape[-1]
    rank = expected = torch.empty(0, dtype=y.dtype)
    if k >= 3 and bool((~agrees).any()):
        ye, te = y[~agrees], target[~agrees]
        above = (ye > ye.gather(-1, te[:, None])).sum(dim=-1) - 1  # classes above the label, less the prediction
        rank = above.to(y.dtype) / (k - 2)
        expected = _expected_rank(ye, probs)
    return agrees, target, rank, expected


def _sigmoid_units(yd: Any, gd: Any) -> Units | None:
    """(agrees, target, no rank) of the non-zero gradient elements under BCE on logits."""
    import torch

    live = gd != 0
    if not bool(live.any()):
        return None
    y, g = yd[live], gd[live]
    target = (g < 0).long()
    pred = (y > 0).long()
    none = torch.empty(0, dtype=y.dtype)
    return pred == target, target, none, none


class LabelAgreement:
    """Pools a step's labelled rows (several forwards) until the step is taken."""

    def __init__(self, share: float, min_rows: int) -> None:
        self.share, self.min_rows = share, min_rows
        self.parts: list[Units] = []

    def observe(self, yd: Any, gd: Any, hits: dict[str, int], n: int) -> None:
        """``yd``/``gd``: the identity's sampled rows (double); ``hits``/``n``: its counts for them."""
        best = max(LOSSES, key=lambda h: hits.get(h, 0))
        if n <= 0 or hits.get(best, 0) < self.share * n:
            return
        got = _softmax_units(yd, gd, best == "nll_probs") if best in ONE_NEGATIVE else _sigmoid_units(yd, gd)
        if got is not None:
            self.parts.append(got)

    def take(self) -> dict[str, float] | None:
        """The step's metrics (those its rows allow), or None under ``min_rows`` rows; resets."""
        import torch

        parts, self.parts = self.parts, []
        if not parts:
            return None
        agrees = torch.cat([p[0] for p in parts])
        target = torch.cat([p[1] for p in parts])
        rank = torch.cat([p[2] for p in parts])
        expected = torch.cat([p[3] for p in parts])
        n = int(agrees.numel())
        if n < self.min_rows:
            return None
        a = float(agrees.double().mean())
        m = float(torch.bincount(target).max()) / n
        out = {"output_label_kappa": (a - m) / (1 - m) if m < 1 else 0.0}
        if rank.numel():
            out["output_label_error_rank"] = float(rank.mean())
            out["output_label_error_rank_expected"] = float(expected.mean())
        return out
