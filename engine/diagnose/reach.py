"""Detector of an output that cannot reach its targets: a sigmoid or ReLU at the end of a model trained with a
loss on continuous values (regression, reconstruction), in the model or in the loss code.

Reads the probe's ``output_bound_push`` and ``output_gated_frac`` (``engine/capture/output_reach``: measured
only where no loss with hard targets explains the output gradient). Thresholds: ``convergence.output_reach.*``.
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.registry import Emit, late_median

DIM = "convergence"


def output_reach(ctx: Context, data: object, out: Emit) -> None:
    """In the run's second half a material share of the output gradient pushes outputs against a bound of
    their range (a target beyond a sigmoid's 0 or 1, below a ReLU's 0), or the negative outputs' gradient is
    cut to exactly zero (a ReLU in the loss code). Neither happens under a loss on continuous targets with a
    linear output: a target the bound only touches (black pixels under a sigmoid) has an error that shrinks
    as the output nears it, so its share of the gradient does too."""
    th, view = ctx.th, ctx.view
    ps, push, cut, pushed = late_median(ctx, "output_bound_push", "convergence.output_reach.judge_from_frac")
    cut_share = 0.0  # not recorded where the outputs have one sign only
    if view.has("output_gated_frac"):
        gs, gated = view.series("output_gated_frac")
        late_g = gs >= cut
        if late_g.sum() >= th.as_int("diagnose.min_samples"):
            cut_share = float(np.nanmedian(gated[late_g]))
    push_limit, gate_limit = th["convergence.output_reach.push"], th["convergence.output_reach.gated"]
    if not (pushed >= push_limit or cut_share >= gate_limit):
        return
    level = max(severity(pushed, push_limit, 0.5) if pushed >= push_limit else 0.0,
                severity(cut_share, gate_limit, 1.0) if cut_share >= gate_limit else 0.0)
    how = "bound" if pushed >= push_limit else "gated"
    first = int(np.searchsorted(ps, cut))
    out.add(make_finding(
        "OutputCannotReachTargets", DIM, "", ps, first, ps.size - 1, level,
        {"how": how, "bound_push": pushed, "gated_share": cut_share, "push_threshold": push_limit,
         "gated_threshold": gate_limit, "steps_judged": int((ps >= cut).sum())},
        "convergence.output_reach", ps.size - 1), (ps, push))
