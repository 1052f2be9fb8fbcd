"""Convergence-flow detectors: loss spikes, divergence, plateau, oscillation (with its period),
overfitting, under-confident outputs, validation above training, and the learning-rate context.

Thresholds come from the knowledge base (keys ``convergence.*``); sources are in
``cases/thresholds/convergence.ttl``. Expert utilisation is ``experts.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from debugtune.engine.diagnose.base import Context, lr_schedule, make_finding, severity
from debugtune.engine.diagnose.objective import not_supervised
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import (
    MAD_TO_SIGMA,
    centred_median,
    debiased_ema,
    dominant_period,
    ffill,
    first_run,
    local_sinusoid_amplitude,
    robust_z,
    sinusoid_amplitude,
    smooth,
    trailing_median,
)

DIM = "convergence"


@dataclass(frozen=True)
class LossCurve:
    """The training loss and what the learning-rate schedule says about it."""

    steps: np.ndarray
    loss: np.ndarray          # non-finite values carried forward
    judge_from: int           # index after warm-up and the early transient
    lr: np.ndarray | None     # aligned to steps, or None
    lr_events: np.ndarray     # indices where the LR dropped by a scheduled step
    scale: float              # the loss level at the start (median |loss| of the first window)

    @property
    def n(self) -> int:
        return int(self.steps.size)


@dataclass
class ConvergenceData:
    """What the loss detectors share, computed on first use: the loss curve and the learning-rate context."""

    ctx: Context

    @cached_property
    def raw(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ctx.view.series("loss")

    @cached_property
    def _curve(self) -> LossCurve | str:
        steps, raw = self.raw
        minimum = self.ctx.th.as_int("diagnose.min_steps")
        if steps.size < minimum:
            return f"{steps.size} steps of loss recorded, at least {minimum} are needed"
        if not np.isfinite(raw).any():
            return "every recorded loss is NaN or Inf"
        return _curve(self.ctx, steps, raw)

    @cached_property
    def _objective(self) -> str | None:
        return not_supervised(self.ctx.view.metrics, self.raw[1], self.ctx.th["convergence.objective.negative_share"])

    @property
    def recorded(self) -> LossCurve:
        """The loss curve, or NotJudged when it is too short or never finite (whatever objective it is)."""
        if isinstance(self._curve, str):
            raise NotJudged(self._curve)
        return self._curve

    @property
    def curve(self) -> LossCurve:
        """The loss curve of a supervised loss, or NotJudged: too short, never finite, or an objective whose shape
        says nothing about convergence (engine.diagnose.objective)."""
        curve = self.recorded
        if self._objective is not None:
            raise NotJudged(self._objective)
        return curve


def convergence_data(ctx: Context) -> ConvergenceData:
    return ConvergenceData(ctx)


def _curve(ctx: Context, steps: np.ndarray, raw: np.ndarray) -> LossCurve:
    th = ctx.th
    loss = ffill(raw)
    n = loss.size
    sched = lr_schedule(ctx, steps)
    judge_from = max(int(n * th["convergence.judge_after_frac"]), sched.warmup_end)
    w = max(3, int(n * th["convergence.window_frac"]))
    scale = float(np.median(np.abs(loss[:w]))) or 1e-12
    return LossCurve(steps, loss, min(judge_from, n - 2), sched.lr, sched.drops, scale)


def nonfinite_loss(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    data.recorded  # noqa: B018 — judged only on a loss curve long enough to judge, whatever its objective
    steps, raw = data.raw
    bad = ~np.isfinite(raw)
    if bad.any():
        first = int(np.argmax(bad))
        out.add(make_finding("NaNOrInf", DIM, "loss", steps, first, int(np.flatnonzero(bad)[-1]), 1.0,
                             {"first_step": steps[first], "nonfinite_steps": int(bad.sum())},
                             "convergence.nonfinite_loss", first), (steps, bad.astype(float)))


def _mask_lr_events(ctx: Context, curve: LossCurve, mask: np.ndarray) -> np.ndarray:
    """``mask`` with the transient after each scheduled LR drop (and warm-up) cleared."""
    out = mask.copy()
    out[: curve.judge_from] = False
    w = ctx.th.as_int("convergence.lr_drop.window")
    for e in curve.lr_events:
        out[e: e + w] = False
    return out


def _early_window(ctx: Context, curve: LossCurve) -> int:
    """The first steps Megatron's spiky-loss rule takes as its reference (``convergence.spike.early_steps``, at
    most a quarter of the run): the spike rule judges what comes after, the early blow-up what lies inside."""
    return max(2, min(ctx.th.as_int("convergence.spike.early_steps"), curve.n // 4))


def spikes(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """Points far above the trailing median (OLMo 2's robust z) or far above the early window (Megatron's rule).

    Not reported when no point after the early window rose above the early window's own maximum and the loss
    was back halfway within ``convergence.spike.window`` steps: the run never lost what it had learnt beyond
    where it began, and recovered within the logbooks' monitor-only span (BLOOM-176B: ~30 steps). The
    recurring one-step blips of a healthy Adam autoencoder are such points; a corrupt batch rises above the
    untrained loss."""
    th, curve = ctx.th, data.curve
    window = th.as_int("convergence.spike.window")
    z = robust_z(curve.loss, window)
    jump = (curve.loss - trailing_median(curve.loss, window)) / curve.scale
    min_jump = th["convergence.spike.min_jump"]
    hit = _mask_lr_events(ctx, curve, (z > th["convergence.spike.z"]) & (jump >= min_jump))
    # Megatron's spiky-loss rule: |loss| ≥ factor × the largest |loss| of the early window.
    early = _early_window(ctx, curve)
    ref = float(np.max(np.abs(curve.loss[:early])))
    big = np.zeros(curve.n, dtype=bool)
    big[early:] = np.abs(curve.loss[early:]) >= th["convergence.spike.early_factor"] * ref
    hit |= big
    if not hit.any():
        return
    idx = np.flatnonzero(hit)
    episodes = 1 + int(np.count_nonzero(np.diff(idx) > 1))
    first, peak = int(idx[0]), int(idx[np.argmax(z[idx])])
    base = np.median(curve.loss[max(0, peak - window):peak]) if peak > 0 else curve.loss[0]
    after = curve.loss[peak + 1:]
    recovered = np.flatnonzero(after <= base + 0.5 * (curve.loss[peak] - base))
    rec_steps = float(recovered[0] + 1) if recovered.size else float("nan")
    early_ratio = float(np.max(np.abs(curve.loss[early:]))) / max(ref, 1e-30) if curve.n > early else 0.0
    if early_ratio < 1.0 and rec_steps <= window:
        return  # never above where the run began and recovered within the window: the logbooks' monitor-only case
    zmax = float(np.max(np.where(np.isfinite(z[idx]), z[idx], 0)))
    top_jump = float(np.max(np.where(np.isfinite(jump[idx]), jump[idx], 0)))
    out.add(make_finding(
        "LossSpike", DIM, "", curve.steps, first, int(idx[-1]),
        severity(max(top_jump, 1e-9), min_jump, min_jump * 20),
        {"spikes": float(episodes), "max_robust_z": zmax, "max_jump": top_jump, "peak_step": curve.steps[peak],
         "peak_loss": float(curve.loss[peak]), "baseline_loss": float(base), "recovery_steps": rec_steps,
         "early_max_ratio": early_ratio},
        "convergence.spike", first), (curve.steps, np.clip(z, -50, 50)))


def divergence(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    th, curve = ctx.th, data.curve
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    trend = centred_median(curve.loss, w)
    run_min = np.minimum.accumulate(trend)
    scale = np.maximum(np.abs(run_min), 1e-12)
    rise = (trend - run_min) / scale
    absolute = np.abs(curve.loss) >= th["convergence.divergence.abs_loss"]
    mask = (rise >= th["convergence.divergence.rise"]) | absolute
    mask[: curve.judge_from] = absolute[: curve.judge_from]
    persist = ctx.persist("convergence.persist_steps", curve.steps)
    start = first_run(mask, persist)
    if start is None or not mask[-w:].all():
        return  # a divergence does not come back
    gained = trend[0] - run_min[-1]
    if not absolute[-w:].all() and gained > 0 and \
            trend[-1] - run_min[-1] < th["convergence.divergence.progress_lost"] * gained:
        return  # still far below where it started: wandering up from a low point, not diverging
    # the centred trend looks half a window ahead: the onset is where the loss itself first crossed
    crossed = first_run(curve.loss[start:] >= run_min[start] + th["convergence.divergence.rise"] * scale[start],
                        persist)
    start += crossed or 0
    final_rise = float(rise[-1])
    out.add(make_finding(
        "LossDivergence", DIM, "", curve.steps, start, curve.n - 1,
        severity(max(final_rise, 1e-9), th["convergence.divergence.rise"], th["convergence.divergence.rise"] * 20),
        {"loss_min": float(run_min[-1]), "loss_end": float(trend[-1]), "relative_rise": final_rise,
         "loss_start": float(trend[0]), "loss_max": float(np.max(curve.loss))},
        "convergence.divergence", start + persist - 1), (curve.steps, trend))


def early_blowup(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The loss, smoothed as fastai's learning-rate finder smooths it (a debiased moving average), rises to
    ``convergence.early_blowup.factor`` times its best so far within the first steps: the window the spike rule
    takes as its reference and so cannot judge. The range test stops there because that learning rate diverged;
    in a training it says the first steps were too large for the loss's curvature. The smoothing keeps a noisy
    batch from counting: a healthy regression's per-batch MSE swings 3-5 times from one step to the next.
    Read on the finite values before the first NaN or Inf (NaNOrInf's business)."""
    th, curve = ctx.th, data.curve
    early = _early_window(ctx, curve)
    head = data.raw[1][:early]
    bad = ~np.isfinite(head)
    if bad.any():
        head = head[: int(np.argmax(bad))]
    if head.size < 2:
        return
    smoothed = debiased_ema(head, th["convergence.early_blowup.beta"])
    best = np.minimum.accumulate(smoothed)
    if best[-1] <= 0:
        return  # a loss that reaches zero or below has no scale to rise against
    ratio = smoothed / np.maximum(best, np.finfo(np.float64).tiny)
    factor = th["convergence.early_blowup.factor"]
    hit = np.flatnonzero(ratio >= factor)
    if hit.size == 0:
        return
    first, peak = int(hit[0]), int(np.argmax(ratio))
    above = np.flatnonzero(head >= factor * best)  # the raw loss: the average remembers the peak for long
    out.add(make_finding(
        "EarlyLossBlowup", DIM, "", curve.steps, first, int(above[-1]) if above.size else first,
        severity(float(ratio[peak]), factor, factor * 100),
        {"max_ratio": float(ratio[peak]), "threshold": factor, "peak_step": curve.steps[peak],
         "loss_first": float(head[0]), "loss_peak": float(np.max(head)), "window_steps": float(early)},
        "convergence.early_blowup", first), (curve.steps[: ratio.size], ratio))


def plateau(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The loss barely improves over the run (AutoTrainer's slow convergence, on the loss curve)."""
    th, curve = ctx.th, data.curve
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    head = float(np.median(curve.loss[:w]))
    tail = float(np.median(curve.loss[-w:]))
    if not (np.isfinite(head) and head > 0):
        return
    improvement = (head - tail) / abs(head)
    if improvement >= th["convergence.plateau.min_improvement"]:
        return
    if tail > head * (1 + th["convergence.divergence.rise"]):
        return  # rising, not flat: divergence's business
    trend = centred_median(curve.loss, w)
    best = np.minimum.accumulate(trend)
    # onset: the first step after which the best-so-far loss improves by less than the limit
    gain_left = (best - best[-1]) / max(abs(head), 1e-12)
    onset = int(np.argmax(gain_left < th["convergence.plateau.min_improvement"]))
    evidence = {"relative_improvement": improvement, "loss_start": head, "loss_end": tail}
    best_acc = _best_accuracy(ctx, w)
    if best_acc is not None:
        evidence["accuracy_best"] = best_acc
    if curve.lr is not None:
        evidence["lr_median"] = float(np.median(curve.lr))
    sev = float(np.clip(1.0 - improvement / max(th["convergence.plateau.min_improvement"], 1e-9) * 0.5, 0.5, 1.0))
    out.add(make_finding("LossPlateau", DIM, "", curve.steps, onset, curve.n - 1, sev, evidence,
                         "convergence.plateau", max(onset, curve.judge_from, w)), (curve.steps, trend))


def fits_closely(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The loss ends at ``convergence.fits_closely.ratio`` of the untrained model's or below: two orders of
    magnitude, R² ≥ 0.99 for a mean-squared regression, a classifier's cross-entropy at a hundredth of chance.
    A sign of health, not of a fault: a run that fits its data this closely was held back neither by its step
    size nor by units stuck in their tails, so it speaks against the causes whose harm is a loss that cannot fall
    (an overshoot of the first steps it recovered from, tanh units a confident classifier drove to their bounds).
    Which causes it speaks against is knowledge (``dt:CounterEvidence``); the report lists it among the signs."""
    th, curve = ctx.th, data.curve
    start = float(np.min(curve.loss[: min(3, curve.n)]))  # not the median: a blow-up at step 1 is no untrained loss
    if not (np.isfinite(start) and start > 0):
        return
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    limit = th["convergence.fits_closely.ratio"]
    ratio = float(np.median(curve.loss[-w:])) / start
    if not ratio <= limit:
        return
    trend = centred_median(curve.loss, w) / start
    above = np.flatnonzero(trend > limit)  # onset: from where the trend stays at or under the limit
    onset = min(int(above[-1]) + 1 if above.size else 0, curve.n - 1)
    out.add(make_finding("LossFitsClosely", DIM, "", curve.steps, onset, curve.n - 1,
                         severity(limit / max(ratio, 1e-300), 1.0, 100.0),
                         {"loss_ratio": ratio, "threshold": limit, "loss_untrained": start,
                          "loss_end": ratio * start}, "convergence.fits_closely", max(onset, w)),
            (curve.steps, trend))


def lr_tiny(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The learning rate, logged or read from the optimizer, never reaches ``convergence.lr.min_peak``: below the
    smallest peak rate of the common recipes for training from scratch and supervised fine-tuning. A fact about
    the set-up; with a loss that does not fall it says the steps are too small to learn."""
    th = ctx.th
    steps, lr = ctx.view.series("lr")
    need_steps(ctx, steps, "lr")
    finite = lr[np.isfinite(lr)]
    if finite.size == 0:
        raise NotJudged("no finite learning rate recorded")
    peak, limit = float(finite.max()), th["convergence.lr.min_peak"]
    if peak >= limit or peak <= 0:
        return
    out.add(make_finding("LearningRateTiny", DIM, "", steps, 0, steps.size - 1,
                         severity(limit / peak, 1.0, 1e3), {"lr_peak": peak, "threshold": limit},
                         "convergence.lr_tiny", 0), (steps, np.log10(np.maximum(ffill(lr), 1e-30))))


def _fano_bound(acc: np.ndarray, classes: float) -> np.ndarray:
    """h(a) + (1 − a)·ln(K − 1): the cross-entropy of a calibrated classifier with accuracy ``a`` over K classes."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.clip(acc, 1e-9, 1 - 1e-9)
        return -(p * np.log(p) + (1 - p) * np.log1p(-p)) + (1 - acc) * np.log(max(classes - 1, 1.0))


def _squashed_floor(classes: float) -> float:
    """ln(1 + (K − 1)/e): the least cross-entropy over K classes when what reaches a from-logits loss lies in
    [0, 1] (a softmax or sigmoid applied first): the true class gets at most e/(e + K − 1). K, a count, is the
    estimate rounded down: the estimate errs high, and least for a squashed run (its first outputs are near
    uniform, its first loss ln K or a little above), so rounding down never puts the floor above such a run's."""
    return float(np.log1p((max(np.floor(classes), 2.0) - 1.0) / np.e))


def underconfident(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The loss stays above the cross-entropy of a calibrated classifier with the same accuracy.

    By Fano's inequality a classifier that outputs the true class posterior, with accuracy ``a`` over
    ``K`` classes, has a cross-entropy of at most h(a) + (1 − a)·ln(K − 1). ``K`` is taken from the loss
    at the first steps (an untrained model is no better than chance, so e^loss ≥ K: the bound errs high).
    A model that has learned (accuracy above chance, loss below its start) yet stays above that bound is
    under-confident: its outputs are squashed before the loss (a softmax fed to a from-logits loss).
    Without a training accuracy the evaluation's loss and accuracy are compared instead (``_underconfident_on_eval``).
    A model still learning is under-confident too (its logits have not grown yet), so a run whose loss trend fell
    below the least a squashed output can reach (``_squashed_floor``) is not flagged: its outputs are not squashed.
    """
    th, curve = ctx.th, data.curve
    if not ctx.view.has("accuracy"):
        return _underconfident_on_eval(ctx, curve, out)
    s, acc = ctx.view.series("accuracy")
    acc = ffill(acc)
    if not np.isfinite(acc).any():
        raise NotJudged("every recorded accuracy is NaN")
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    a = np.clip(smooth(np.interp(curve.steps, s, acc), w), 0.0, 1.0)
    loss = smooth(curve.loss, w)
    start = float(np.median(curve.loss[: min(3, curve.n)]))
    classes = _classes(curve)
    bound = _fano_bound(a, classes)
    learned = (loss < start) & (a > th["convergence.underconfident.chance_factor"] / classes)
    over = learned & (loss - bound >= th["convergence.underconfident.excess"]) & \
        (loss >= th["convergence.underconfident.ratio"] * bound)
    over[: curve.judge_from] = False
    tail_loss, tail_acc = float(np.median(curve.loss[-w:])), float(np.median(a[-w:]))
    tail_bound = float(np.median(bound[-w:]))
    if not (over[-w:].mean() >= 0.5 and tail_loss - tail_bound >= th["convergence.underconfident.excess"]):
        return
    if float(np.nanmin(loss)) < _squashed_floor(classes):
        return  # the loss fell below what squashed outputs can reach: a model still learning, not squashing
    persist = ctx.persist("convergence.persist_steps", curve.steps)
    flagged = first_run(over, persist)
    # the onset is where the loss first left the calibrated bound for good (at chance accuracy the bound
    # equals the starting loss, so the two part as soon as the model learns); the flag needs the full excess
    onset = first_run(learned & (loss > bound), persist)
    flagged = curve.judge_from if flagged is None else flagged
    onset = flagged if onset is None else min(onset, flagged)
    _emit_underconfident(ctx, curve, out, onset, flagged, tail_loss, tail_acc, tail_bound, classes,
                         {"accuracy_source": "training"}, (curve.steps, loss - bound))


def _underconfident_on_eval(ctx: Context, curve: LossCurve, out: Emit) -> None:
    """Fano's bound on the evaluation's own loss and accuracy, when no training accuracy is recorded.

    On held-out data a loss above the bound can also mean over-confidence (an over-fitted model is sure and
    sometimes wrong), and clean evaluation labels make a model trained on noisy ones look unsure. Two facts
    that need no tuning tell those apart from squashed outputs: a loss fed through a softmax or sigmoid never
    falls below ``_squashed_floor`` on any batch (an over-fitted model's training loss does), and squashing
    raises the training loss as much as the evaluation's (label noise raises the training loss above it).
    """
    th = ctx.th
    if not (ctx.view.has("eval_loss") and ctx.view.has("eval_accuracy")):
        raise NotJudged("no training accuracy, and no evaluation loss and accuracy to judge instead")
    es, eloss = ctx.view.series("eval_loss")
    as_, eacc = ctx.view.series("eval_accuracy")
    steps = np.intersect1d(es, as_)
    steps = steps[steps >= curve.steps[curve.judge_from]]
    if steps.size < 2:
        raise NotJudged(f"{steps.size} evaluations after the early transient, at least 2 are needed")
    el = eloss[np.searchsorted(es, steps)]
    ea = np.clip(eacc[np.searchsorted(as_, steps)], 0.0, 1.0)
    ok = np.isfinite(el) & np.isfinite(ea)
    steps, el, ea = steps[ok], el[ok], ea[ok]
    if steps.size < 2:
        raise NotJudged("fewer than 2 finite evaluations after the early transient")
    classes = _classes(curve)
    bound = _fano_bound(ea, classes)
    start = float(np.median(curve.loss[: min(3, curve.n)]))
    over = (el < start) & (ea > th["convergence.underconfident.chance_factor"] / classes) & \
        (el - bound >= th["convergence.underconfident.excess"]) & (el >= th["convergence.underconfident.ratio"] * bound)
    tail = max(2, int(np.ceil(steps.size * th["convergence.window_frac"])))
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    tail_loss, tail_eval = float(np.median(curve.loss[-w:])), float(np.median(el[-tail:]))
    floor = _squashed_floor(classes)
    finite = curve.loss[np.isfinite(curve.loss)]
    if not (over[-tail:].all() and float(finite.min()) >= floor and tail_loss <= tail_eval):
        return
    # the onset is the first evaluation of the trailing run that stays above the bound
    trailing = int(np.argmax(~over[::-1])) if (~over).any() else steps.size
    onset = min(int(np.searchsorted(curve.steps, steps[steps.size - trailing])), curve.n - 1)
    _emit_underconfident(ctx, curve, out, onset, onset, tail_eval, float(np.median(ea[-tail:])),
                         float(np.median(bound[-tail:])), classes,
                         {"accuracy_source": "evaluation", "training_loss_min": float(finite.min()),
                          "squashed_loss_floor": floor, "training_loss_end": tail_loss},
                         (steps, el - bound))


def _emit_underconfident(ctx: Context, curve: LossCurve, out: Emit, onset: int, flagged: int, tail_loss: float,
                         tail_acc: float, tail_bound: float, classes: float, extra: dict[str, float | str],
                         trace: tuple[np.ndarray, np.ndarray]) -> None:
    th = ctx.th
    ratio = tail_loss / max(tail_bound, 1e-9)
    out.add(make_finding(
        "UnderconfidentOutputs", DIM, "", curve.steps, onset, curve.n - 1,
        severity(ratio, th["convergence.underconfident.ratio"], th["convergence.underconfident.ratio"] * 4),
        {"loss_end": tail_loss, "accuracy_end": tail_acc, "calibrated_loss_bound": tail_bound,
         "excess_nats": tail_loss - tail_bound, "classes_estimate": classes, **extra},
        "convergence.underconfident", flagged), trace)


def _best_accuracy(ctx: Context, window: int) -> float | None:
    """The best training accuracy, averaged over ``window`` steps (None when not recorded)."""
    if not ctx.view.has("accuracy"):
        return None
    _, acc = ctx.view.series("accuracy")
    acc = ffill(acc)
    return float(np.max(smooth(acc, window))) if np.isfinite(acc).any() else None


def _accuracy_late_share(ctx: Context, curve: LossCurve, window: int) -> float | None:
    """Share of the accuracy gain made in the second half (None without a material accuracy gain)."""
    if not ctx.view.has("accuracy"):
        return None
    s, acc = ctx.view.series("accuracy")
    acc = smooth(ffill(np.interp(curve.steps, s, ffill(acc))), window)
    head, mid, tail = acc[window // 2], acc[curve.n // 2], acc[-1 - window // 2]
    if not np.isfinite(tail - head) or tail - head < ctx.th["convergence.slow.min_accuracy_gain"]:
        return None
    return float((tail - mid) / (tail - head))


def slow(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """The loss still falls steadily at the end of the run (a large share of its improvement came in the
    second half), or the accuracy never reaches AutoTrainer's convergence level."""
    th, curve = ctx.th, data.curve
    w = max(3, int(curve.n * th["convergence.window_frac"]))
    trend = centred_median(curve.loss, w)
    head, mid, tail = float(trend[w // 2]), float(trend[curve.n // 2]), float(trend[-1 - w // 2])
    total = head - tail
    if not (np.isfinite(total) and head > 0) or total / abs(head) < th["convergence.plateau.min_improvement"]:
        return  # no improvement at all is a plateau; a rise is a divergence
    late = (mid - tail) / total
    best_acc = _best_accuracy(ctx, w)
    unconverged = best_acc is not None and best_acc < th["convergence.slow.accuracy"]
    still = late >= th["convergence.slow.late_share"]
    acc_late = _accuracy_late_share(ctx, curve, w)
    if still and acc_late is not None and acc_late < th["convergence.slow.late_share_accuracy"]:
        still = False  # the loss creeps on, but the accuracy had already settled: a noisy task, not a slow run
    if not (still or unconverged):
        return
    ev = {"late_share": late, "relative_improvement": total / abs(head), "loss_start": head, "loss_end": tail}
    if acc_late is not None:
        ev["accuracy_late_share"] = acc_late
    if best_acc is not None:
        ev["accuracy_best"] = best_acc
    if curve.lr is not None:
        ev["lr_median"] = float(np.median(curve.lr))
    sev = max(severity(max(late, 1e-9), th["convergence.slow.late_share"], 1.0),
              0.5 + 0.5 * (1 - best_acc / th["convergence.slow.accuracy"]) if unconverged and best_acc is not None
              else 0.0)
    onset = curve.n // 2
    out.add(make_finding("SlowConvergence", DIM, "", curve.steps, curve.judge_from, curve.n - 1, sev, ev,
                         "convergence.slow", onset), (curve.steps, trend))


def oscillation(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """Periodic or bouncing loss: detrend, find the period by autocorrelation, measure the amplitude."""
    th, curve = ctx.th, data.curve
    seg = slice(curve.judge_from, curve.n)
    y = curve.loss[seg]
    if y.size < 4 * th.as_int("convergence.oscillation.min_period"):
        return
    trend = smooth(y, max(3, int(y.size * th["convergence.oscillation.trend_frac"])))
    resid = y - trend
    # winsorised at a few robust sigmas: one spike must not pass for a period (its echo fills the ACF)
    centre = float(np.median(resid))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(resid - centre)))
    clip = th["convergence.oscillation.clip_sigma"] * spread
    if clip > 0:
        resid = np.clip(resid, centre - clip, centre + clip)
    level = curve.scale  # amplitudes are judged against the loss scale, not a level that may near zero
    period, peak = dominant_period(resid, th.as_int("convergence.oscillation.min_period"),
                                   int(y.size * th["convergence.oscillation.max_period_frac"]))
    periodic = period > 0 and peak >= th["convergence.oscillation.min_acf"]
    amp = 0.0
    if periodic:
        cands = np.unique(np.round(np.linspace(0.85 * period, 1.15 * period, 31), 1))
        amps = [sinusoid_amplitude(resid, p) for p in cands]
        k = int(np.argmax(amps))
        period_f, amp = float(cands[k]), float(amps[k])
        periodic = amp / level >= th["convergence.oscillation.min_rel_amplitude"]
    # bouncing without a clean period: mid-frequency swings after removing step-to-step noise
    mid = smooth(y, th.as_int("convergence.oscillation.noise_window")) - trend
    # robust spread (MAD): one spike must not pass for an oscillation
    bounce = MAD_TO_SIGMA * float(np.median(np.abs(mid - np.median(mid)))) * np.sqrt(2) / level
    bouncing = bounce >= th["convergence.oscillation.bounce_rel_amplitude"]
    if not (periodic or bouncing):
        return
    ev = {"relative_amplitude": (amp if periodic else bounce * level) / level, "loss_scale": level,
          "bounce_rel_amplitude": bounce}
    if periodic:
        ev.update(period_steps=period_f * ctx.spacing(curve.steps), amplitude=amp, acf_peak=peak)
    else:
        ev.update(amplitude=bounce * level)
    rel = ev["relative_amplitude"]
    limit = th["convergence.oscillation.min_rel_amplitude"] if periodic else \
        th["convergence.oscillation.bounce_rel_amplitude"]
    # onset: where the swing's local amplitude first reaches half its level; a periodic swing's is its component
    # at the period over two periods (an RMS envelope of the residual reaches it wherever per-step noise does)
    if periodic:
        env = local_sinusoid_amplitude(resid, period_f, int(round(2 * period_f)))
    else:
        env = np.sqrt(2 * smooth(mid ** 2, 2 * th.as_int("convergence.oscillation.noise_window")))
    onset = curve.judge_from + int(np.argmax(env >= 0.5 * rel * level))
    det = onset + int(2 * (period_f if periodic else th.as_int("convergence.oscillation.noise_window")))
    out.add(make_finding(
        "LossOscillation", DIM, "", curve.steps, onset, curve.n - 1, severity(rel, limit, limit * 10), ev,
        "convergence.oscillation.acf" if periodic else "convergence.oscillation.bounce", det),
        (curve.steps[seg], resid))


def overfitting(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    th, curve = ctx.th, data.curve
    es, ev = _evaluations(ctx, "eval_loss")
    best = int(np.argmin(ev))
    rise = (ev[-1] - ev[best]) / max(abs(ev[best]), 1e-12)
    train_at = np.interp(es, curve.steps, smooth(curve.loss, max(3, curve.n // 20)))
    train_falls = train_at[-1] < train_at[best]
    gap = (ev[-1] - train_at[-1]) / max(abs(train_at[-1]), 1e-12)
    if rise < th["convergence.overfit.rise"] or not train_falls or best == es.size - 1:
        return
    out.add(make_finding(
        "Overfitting", DIM, "", es, best, es.size - 1, severity(rise, th["convergence.overfit.rise"],
                                                                th["convergence.overfit.rise"] * 10),
        {"eval_loss_min": float(ev[best]), "eval_loss_end": float(ev[-1]), "relative_rise": float(rise),
         "train_loss_end": float(train_at[-1]), "generalisation_gap": float(gap)},
        "convergence.overfit", int(np.argmax((ev - ev[best]) / max(abs(ev[best]), 1e-12)
                                              >= th["convergence.overfit.rise"]))), (es, ev))


def _evaluations(ctx: Context, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The finite evaluations of ``name``; NotJudged when there are fewer than the held-out checks need."""
    es, ev = ctx.view.series(name)
    ok = np.isfinite(ev)
    es, ev = es[ok], ev[ok]
    need = ctx.th.as_int("convergence.overfit.min_evals")
    if es.size < need:
        raise NotJudged(f"{es.size} evaluations recorded, at least {need} are needed")
    return es, ev


def _train_at(ctx: Context, curve: LossCurve, es: np.ndarray, steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A training series smoothed over ``convergence.window_frac`` of the run (centred), read at the evaluations."""
    w = max(3, int(curve.n * ctx.th["convergence.window_frac"]))
    return np.interp(es, steps, smooth(ffill(values), w))


def _lasting_gap(ctx: Context, curve: LossCurve, es: np.ndarray,
                 gap: np.ndarray) -> tuple[np.ndarray, float, float] | None:
    """Over the evaluations after the early transient (None when too few): which they are, the mean gap and its
    one-sample t-statistic (``convergence.val_gap.z`` asks for a lasting gap, not a few evaluations)."""
    judged = (es >= curve.steps[curve.judge_from]) & np.isfinite(gap)
    if judged.sum() < ctx.th.as_int("convergence.overfit.min_evals"):
        return None
    g = gap[judged]
    level = float(np.mean(g))
    spread = float(np.std(g, ddof=1))
    t = level / (spread / np.sqrt(g.size)) if spread > 0 else (np.inf if level > 0 else 0.0)
    return judged, level, t


def _emit_gap(ctx: Context, out: Emit, es: np.ndarray, gap: np.ndarray, judged: np.ndarray, level: float,
              evidence: dict[str, float], detector: str) -> None:
    limit = ctx.th["convergence.val_gap.min"]
    onset = first_run((gap >= limit) & judged, 2)
    onset = int(np.argmax(judged)) if onset is None else onset
    out.add(make_finding("ValidationAboveTraining", DIM, "", es, onset, es.size - 1, severity(level, limit, 0.5),
                         evidence, detector, onset), (es, gap))


def validation_above_training(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """Held-out accuracy above training accuracy (UMLAUT's check): the training labels or inputs are harder
    than the held-out ones — noisy or corrupted labels, or train-only augmentation and regularisation.

    Judged over the evaluations after the early transient: the mean gap must reach the minimum and be
    significant (its t-statistic over the evaluations, ``convergence.val_gap.z``), and the held-out accuracy
    must be above chance by the same minimum (a model that learned nothing predicts the majority class, whose
    share may differ between the splits)."""
    th, view, curve = ctx.th, ctx.view, data.curve
    es, ev = _evaluations(ctx, "eval_accuracy")
    train_at = _train_at(ctx, curve, es, *view.series("accuracy"))
    gap = ev - train_at
    limit = th["convergence.val_gap.min"]
    lasting = _lasting_gap(ctx, curve, es, gap)
    if lasting is None:
        return
    judged, level, t = lasting
    chance = 1.0 / _classes(curve)
    if level < limit or t < th["convergence.val_gap.z"] or float(np.mean(ev[judged])) < chance + limit:
        return
    _emit_gap(ctx, out, es, gap, judged, level,
              {"gap": level, "t_statistic": float(min(t, 1e3)), "eval_accuracy": float(ev[-1]),
               "train_accuracy": float(train_at[-1]), "chance_accuracy": chance}, "convergence.val_gap")


def validation_loss_below_training(ctx: Context, data: ConvergenceData, out: Emit) -> None:
    """ValidationAboveTraining read from the losses, for runs that log no training accuracy (language models,
    regression, most Trainer logs).

    With a share f of the training targets replaced uniformly over K classes, the training loss exceeds the
    held-out loss by at least f·(ln K − held-out loss): the mean of −log q over the K classes is at least ln K
    (Jensen). With L0 the untrained loss of the first steps (ln K at chance), g = (training − held-out) /
    (L0 − held-out) is thus a lower bound of f, as the accuracy gap over (accuracy − chance) is; the same
    minimum and significance apply (``convergence.val_gap.*``), and the held-out loss must have fallen below L0
    by that share (a model that learned nothing has no gap to read). Not judged when the model has dropout or
    batch norm (its training-mode loss is above the evaluation-mode loss whatever the labels) or when the run
    does not record whether it has."""
    th, view, curve = ctx.th, ctx.view, data.curve
    if np.isfinite(view.series("accuracy")[1]).any() and np.isfinite(view.series("eval_accuracy")[1]).any():
        raise NotJudged("judged on the accuracies (convergence.val_gap)")
    modes = (ctx.meta.get("probe") or {}).get("mode_dependent")
    if not isinstance(modes, dict):
        raise NotJudged("the run does not record whether the model has dropout or batch norm (the probe records "
                        "it at attach)")
    if modes.get("dropout") or modes.get("batch_norm"):
        raise NotJudged(f"the model has {modes.get('dropout', 0)} dropout and {modes.get('batch_norm', 0)} "
                        "batch-norm modules: its training-mode loss is above its held-out loss whatever the labels "
                        "(a training loss measured in evaluation mode would decide)")
    es, ev = _evaluations(ctx, "eval_loss")
    train_at = _train_at(ctx, curve, es, curve.steps, curve.loss)
    start = _untrained_loss(curve)
    learned = start - ev
    gap = np.full(ev.shape, np.nan)
    fell = learned > 0
    gap[fell] = (train_at[fell] - ev[fell]) / learned[fell]
    limit = th["convergence.val_gap.min"]
    lasting = _lasting_gap(ctx, curve, es, gap)
    if lasting is None:
        return
    judged, level, t = lasting
    learned_share = float(np.mean(learned[judged])) / max(abs(start), 1e-12)
    if level < limit or t < th["convergence.val_gap.z"] or learned_share < limit:
        return
    _emit_gap(ctx, out, es, gap, judged, level,
              {"gap": level, "t_statistic": float(min(t, 1e3)), "eval_loss": float(ev[-1]),
               "train_loss": float(train_at[-1]), "untrained_loss": start, "learned_share": learned_share},
              "convergence.val_loss_gap")


def _classes(curve: LossCurve) -> float:
    """The number of classes K implied by the loss of the first steps (an untrained classifier is near chance,
    cross-entropy ln K; the estimate errs high, so 1/K errs low)."""
    return max(2.0, float(np.exp(min(_untrained_loss(curve), 30.0))))


def _untrained_loss(curve: LossCurve) -> float:
    """The loss of the first steps (the median of three): an untrained model's, ln K for a classifier at chance."""
    return float(np.median(curve.loss[: min(3, curve.n)]))
