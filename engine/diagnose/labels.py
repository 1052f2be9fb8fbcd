"""Detector of the labels themselves: where they contradict a model that has learnt, do they name a class at
random (labels replaced independently of the input) or the model's runner-up (hard examples, a model still
learning)?

Reads the probe's ``output_label_kappa`` and ``output_label_error_rank`` (``engine/capture/label_agreement``:
the labels come from the output gradient under cross-entropy on logits). Thresholds: ``convergence.label_errors.*``.
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.registry import Emit, late_median

DIM = "convergence"


def label_errors(ctx: Context, data: object, out: Emit) -> None:
    """In the run's second half the model agrees with its labels well beyond chance, yet the labels that
    contradict it rank among its other classes as low as a class drawn at random.

    A label replaced at random (Angluin & Laird's random classification noise) is uniform over the classes the
    model did not predict, so its scaled rank averages 0.5; a hard example's label, or the error of a model
    still learning, is mostly the runner-up (rank 0). The agreement beyond chance must be clear first: the
    errors of a model that has learnt nothing are at random too. A model that memorises its wrong labels pulls
    them up the ranking (Arpit et al. 2017), so the finding fades as the training fits them; two classes leave
    no ranking and are not judged.

    A model that has learnt only a little contradicts its labels far from the runner-up too. What tells it
    apart is calibration: the probe's ``output_label_error_rank_expected`` is the rank a label drawn from the
    model's own probabilities over its other classes would have. A model trained on labels replaced at random
    learns the noise and spreads its probability over the other classes as the labels do, so the two ranks
    agree; a model still learning is flatter than its labels bear out, its expected rank well above theirs.
    Such a model is not judged (``convergence.label_errors.calibration_tol``).

    The medians decide whether it fires and how strongly; the judged steps on which both held (agreement beyond
    chance and the errors' rank: ``steps_shown`` of ``steps_judged``) decide whether it is more than suspected
    (``engine.infer.specific``). A model that learnt little on a task it can hardly tell apart (a per-pixel digit
    class from a few pixels around it) sits at both limits at once: half its steps hold them."""
    th, view = ctx.th, ctx.view
    _, _, cut, agreement = late_median(ctx, "output_label_kappa", "convergence.label_errors.judge_from_frac")
    rs, rank = view.series("output_label_error_rank")  # absent (not judged): two classes, BCE, or no error
    if agreement < th["convergence.label_errors.min_kappa"]:
        return
    errs = rs >= cut
    if errs.sum() < th.as_int("diagnose.min_samples"):
        return  # the model agrees with nearly every label of the second half: nothing contradicts it
    level = float(np.nanmedian(rank[errs]))
    limit = th["convergence.label_errors.rank"]
    es, exp = view.series("output_label_error_rank_expected")  # absent where an older probe recorded the run
    honest = float(np.nanmedian(exp[es >= cut])) if np.any(es >= cut) else 0.0
    if not (level >= limit and level >= honest - th["convergence.label_errors.calibration_tol"]):
        return  # far less sure than its labels bear out: a model still learning, its errors a learner's
    # the medians decide; how many of the judged steps held both is whether it can be more than suspected
    ks, kappa = view.series("output_label_kappa")
    held = (rank[errs] >= limit) & (np.interp(rs[errs], ks, kappa) >= th["convergence.label_errors.min_kappa"])
    first = int(np.searchsorted(rs, cut))
    out.add(make_finding(
        "LabelErrorsAtRandom", DIM, "", rs, first, rs.size - 1, severity(level, limit, 0.5),
        {"error_rank": level, "error_rank_expected": honest, "kappa": agreement,
         "random_share_of_errors": min(1.0, 2.0 * level), "threshold": limit, "steps_judged": int(held.size),
         "steps_shown": int(held.sum())},
        "convergence.label_errors", rs.size - 1), (rs, rank))
