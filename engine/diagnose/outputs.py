"""Detectors of the model's outputs and of the loss behind them: outputs that are not logits (a set-up fact) and
a squashing activation in front of a loss that applies its own (a mismatch the output gradient proves).

The shared precomputation reads what the output looked like (``output_min``/``max``/``zero_frac``/
``simplex_frac``) and which loss produced its gradient (``output_loss_identity``, one share per hypothesis of
``engine/capture/loss_identity``). The shape alone cannot tell a softmax before ``CrossEntropyLoss`` from a
softmax before ``NLLLoss`` of its log; the gradient can, and it also sees an activation applied in the loss code,
which the output hook cannot. A third detector reads the outputs' spread against the loss: a model that predicts
about the same for every input (``convergence.explained.*``). Thresholds: ``convergence.outputs.*`` and
``convergence.loss_identity.*``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from debugtune.engine.capture.loss_identity import BOUNDED, GATED
from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.objective import not_supervised
from debugtune.engine.diagnose.registry import Emit, NotJudged

ON_LOGITS = ("sigmoid_logits", "softmax_logits")
"""Losses that apply their own sigmoid or softmax to the outputs (BCEWithLogits, cross-entropy)."""
ON_REAL = (*ON_LOGITS, "nll_logprobs")
"""Losses that fit real-valued outputs: on logits, or NLL of log-probabilities (``log_softmax`` then NLL)."""
SQUASHED_IN_LOSS = ("sigmoid_twice", "sigmoid_softmax", "softmax_twice", "relu_softmax", "relu_sigmoid")
"""An activation in the loss code, then a loss that applies its own."""


@dataclass(frozen=True)
class Outputs:
    """What the outputs were on the sampled steps and, where measured, which loss their gradient came from."""

    steps: np.ndarray
    kind: str  # "softmax", "relu" or "sigmoid": the squashing the outputs show most often
    mask: np.ndarray  # per sample: the outputs show ``kind``
    lo: np.ndarray
    hi: np.ndarray
    simplex: np.ndarray
    zeros: np.ndarray
    identity: dict[str, float]  # median share per loss hypothesis; empty where not measured
    identity_steps: np.ndarray
    identity_shares: dict[str, np.ndarray]

    @property
    def squashed(self) -> float:
        """The share of samples on which the outputs show ``kind``."""
        return float(self.mask.mean())


def output_data(ctx: Context) -> Outputs:
    th = ctx.th
    steps = ctx.view.steps("output_min")
    lo, hi = ctx.view.series("output_min")[1], ctx.view.series("output_max")[1]
    simplex = ctx.view.series("output_simplex_frac")[1] if ctx.view.has("output_simplex_frac") else np.zeros(lo.size)
    zeros = ctx.view.series("output_zero_frac")[1] if ctx.view.has("output_zero_frac") else np.zeros(lo.size)
    ok = np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        raise NotJudged("no finite output range recorded")
    lo, hi, simplex, zeros = lo[ok], hi[ok], np.nan_to_num(simplex[ok]), np.nan_to_num(zeros[ok])
    raw = _from_layer(ctx, steps[ok])
    kinds = {"softmax": (simplex >= th["convergence.outputs.simplex_frac"]) & ~raw,
             "relu": (lo >= 0) & (zeros >= th["convergence.outputs.zero_frac"]) & ~raw,
             "sigmoid": (lo >= 0) & (hi <= 1) & (zeros < th["convergence.outputs.zero_frac"]) & ~raw}
    kind, mask = max(kinds.items(), key=lambda kv: float(kv[1].mean()))
    identity: dict[str, float] = {}
    shares: dict[str, np.ndarray] = {}
    id_steps = np.zeros(0, dtype=np.int64)
    if ctx.view.has("output_loss_identity"):
        g = ctx.view.by_entity("output_loss_identity")
        id_steps = g.steps
        saturable = _saturable(ctx, g.steps, steps[ok], hi - lo)
        for i, name in enumerate(g.labels):
            row = np.where(saturable, np.nan, g.values[i]) if str(name) in GATED else g.values[i]
            if np.isfinite(row).any():
                identity[str(name)] = float(np.nanmedian(row))
                shares[str(name)] = row
    return Outputs(steps[ok], kind, mask, lo, hi, simplex, zeros, identity, id_steps, shares)


def _from_layer(ctx: Context, steps: np.ndarray) -> np.ndarray:
    """Per sampled step: whether the model's output was the last weight layer's own tensor on most forwards
    (``output_from_layer_frac``). Such outputs are real values whatever their range: logits that a slow learner
    keeps within (0, 1) look like a sigmoid's by their range alone, and no activation ran after the layer."""
    if not ctx.view.has("output_from_layer_frac"):
        return np.zeros(steps.size, dtype=bool)
    at, frac = ctx.view.series("output_from_layer_frac")
    return _on_steps(at, np.nan_to_num(frac) > 0.5, steps, default=False)


def _saturable(ctx: Context, at: np.ndarray, steps: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Per step of ``at``: whether the outputs spanned enough for a softmax or sigmoid to round some probabilities
    to exactly 0 or 1 (``convergence.loss_identity.saturation_span``). The exact zero gradients a ReLU hypothesis
    takes for its own are then also those of a saturated loss on logits (a learning rate far too high drives the
    logits apart by hundreds), so the ReLU hypotheses are not judged on such steps (nor where the span is unknown)."""
    return _on_steps(steps, span > ctx.th["convergence.loss_identity.saturation_span"], at, default=True)


def _on_steps(steps: np.ndarray, flags: np.ndarray, at: np.ndarray, *, default: bool) -> np.ndarray:
    """``flags`` (one per step of ``steps``) read at the steps ``at``; ``default`` where a step has none."""
    known = dict(zip(steps.tolist(), flags.tolist(), strict=True))
    return np.array([known.get(int(s), default) for s in at], dtype=bool)


def _verdict(o: Outputs, squashed: bool) -> tuple[str, float, str, float]:
    """(best wrong hypothesis, its share, best right hypothesis, its share) given what the outputs are:
    squashed outputs are right under a loss built for probabilities and wrong under one that squashes again;
    real-valued outputs are right under a loss on logits and wrong under an activation in the loss code."""
    wrong, right = (ON_LOGITS, BOUNDED) if squashed else (SQUASHED_IN_LOSS, ON_REAL)

    def best(names: tuple[str, ...]) -> tuple[str, float]:
        return max(((n, o.identity.get(n, 0.0)) for n in names), key=lambda kv: kv[1])

    return (*best(wrong), *best(right))


def output_range(ctx: Context, data: Outputs, out: Emit) -> None:
    """The model's outputs are probabilities or rectified values rather than logits: a softmax (rows on the
    simplex), a ReLU (non-negative with many exact zeros) or a sigmoid (all within (0, 1)) inside the model.
    In front of a loss that expects logits this squashes the error signal; with a loss that expects
    probabilities it is correct, so this is a set-up fact that needs harm in the run before a cause is named.
    Where the output gradient shows a loss built for probabilities (``convergence.loss_identity.share``), the
    outputs are what that loss wants and nothing is reported; samples whose output was a weight layer's own tensor
    (``output_from_layer_frac``) are real values and never count as squashed."""
    th = ctx.th
    o = data
    need = th["convergence.outputs.share"]
    if o.squashed < need:
        return
    if o.identity:
        _, wrong, _, right = _verdict(o, squashed=True)
        if right >= th["convergence.loss_identity.share"] and right >= wrong:
            out.note("the model's outputs are squashed and the output gradient is that of a loss built for "
                     "probabilities: correct as wired")
            return
    out.add(make_finding(
        "OutputsNotLogits", "convergence", "", o.steps, 0, o.steps.size - 1, severity(o.squashed, need, 1.0),
        {"kind": o.kind, "share_of_samples": o.squashed, "output_min": float(np.median(o.lo)),
         "output_max": float(np.median(o.hi)), "simplex_frac": float(np.median(o.simplex)),
         "zero_frac": float(np.median(o.zeros))},
        "convergence.outputs", 0), (o.steps, o.mask.astype(float)))


def loss_identity(ctx: Context, data: Outputs, out: Emit) -> None:
    """The gradient at the model's output is exactly that of a loss applying its own sigmoid or softmax to
    values that were already squashed: by an activation at the end of the model (its outputs show it) or in the
    loss code before the loss (the outputs are real-valued, the gradient carries the activation's derivative).
    Fires when such a hypothesis explains at least ``convergence.loss_identity.share`` of the gradient elements
    and more than any loss that fits the outputs as they are."""
    th = ctx.th
    o = data
    if not o.identity:
        raise NotJudged("output_loss_identity has no finite sample")
    squashed = o.squashed >= th["convergence.outputs.share"]
    seen, wrong, fits, right = _verdict(o, squashed)
    limit = th["convergence.loss_identity.share"]
    if wrong < limit or wrong <= right:
        return
    series = o.identity_shares[seen]
    ok = np.flatnonzero(np.isfinite(series))
    gated = [o.identity.get(h, 0.0) for h in GATED]
    if seen in GATED and max(gated) - min(gated) < 0.01:
        seen = "relu"  # the zeros on the negative outputs explain it, not the loss after the ReLU
    out.add(make_finding(
        "SquashBeforeLogitLoss", "convergence", "", o.identity_steps, int(ok[0]), int(ok[-1]),
        severity(wrong, limit, 1.0),
        {"loss_seen": seen, "share": wrong, "best_fitting_loss": fits, "fitting_share": right,
         "outputs": o.kind if squashed else "real-valued"},
        "convergence.loss_identity", int(ok[0])), (o.identity_steps, np.nan_to_num(series)))


def explained_share(ctx: Context, data: Outputs, out: Emit) -> None:
    """Late in the run, the model's predictions barely vary from one example to the next against the error they
    leave: it predicts about the same for every input. Under a squared error at its least-squares fit the residual
    is uncorrelated with the prediction, so ``var(prediction) / (var(prediction) + loss)`` is the share of the
    targets' variance explained (R²); below ``convergence.explained.max_share`` the model has learnt almost
    nothing of its inputs, whatever the loss did on the way (a regression falls to the targets' mean and stalls).

    Judged only where that reading holds: the outputs are real values (not squashed), the output gradient is
    measured and no loss on logits or probabilities explains it (a classifier's logits and cross-entropy are on
    other scales), and the loss is a supervised one (engine.diagnose.objective)."""
    th = ctx.th
    if not data.identity:
        raise NotJudged("which loss produced the output gradient was not measured (output_loss_identity)")
    if max(data.identity.values()) >= th["convergence.loss_identity.share"]:
        raise NotJudged("the output gradient is that of a classification loss: the outputs' spread and the loss "
                        "are on different scales")
    if data.squashed >= th["convergence.outputs.share"]:
        raise NotJudged("the outputs are squashed")
    reason = not_supervised(ctx.view.metrics, ctx.view.series("loss")[1], th["convergence.objective.negative_share"])
    if reason is not None:
        raise NotJudged(reason)
    steps, std = ctx.view.series("output_std")
    loss_steps, loss = ctx.view.series("loss")
    at = dict(zip(loss_steps.tolist(), loss.tolist(), strict=True))
    paired = np.array([at.get(int(s), np.nan) for s in steps])
    share = std**2 / (std**2 + paired)
    ok = np.isfinite(share) & (paired > 0)
    steps, share = steps[ok], share[ok]
    if steps.size < th.as_int("diagnose.min_samples"):
        raise NotJudged(f"{steps.size} steps with both the output spread and the loss")
    first = int(steps.size * th["convergence.explained.judge_from_frac"])
    level = float(np.median(share[first:]))
    limit = th["convergence.explained.max_share"]
    if level >= limit:
        return
    out.add(make_finding(
        "PredictionsNearConstant", "convergence", "", steps, first, steps.size - 1,
        severity(limit / max(level, 1e-6), 1.0, limit / 1e-3),
        {"explained_share": level, "threshold": limit, "output_std": float(np.median(std[ok][first:])),
         "steps_judged": int(steps.size - first)},
        "convergence.explained", steps.size - 1), (steps, share))
