"""Did the injected fault manifest? Judged on the program's own record against the healthy run of the same
program and seed (never on what the probe wrote), so the bench does not grade the system with its own eyes.

- ``loss``: the run ends worse than healthy by ≥ 10% of healthy's improvement, or its mean loss over the run is
  ≥ 1.25 × healthy's (a start-up harm that training later repairs), or a loss was non-finite;
- ``balance``: the top-1 expert shares' CV over the last fifth is ≥ 1.5 × healthy's and ≥ 0.3;
- ``learned`` (controls): the program's own success test, or a final loss ≤ 0.8 × the first.
"""

from __future__ import annotations

import math
from typing import Any

LOSS_SHARE, AUC_RATIO, CV_RATIO, CV_FLOOR, LEARN_RATIO = 0.10, 1.25, 1.5, 0.3, 0.8


def summary(losses: list[float], learned: bool | None, extra: dict[str, float], final: float) -> dict[str, Any]:
    finite = [v for v in losses if math.isfinite(v)]
    head = finite[:5]
    return {"first": sum(head) / len(head) if head else math.nan, "final": final,
            "mean": sum(finite) / len(finite) if len(finite) == len(losses) and finite else math.inf,
            "learned": learned, "steps": len(losses), **extra}


def judge(label: dict[str, Any], healthy: dict[str, Any] | None) -> tuple[bool, str]:
    """(manifested, why) for one run; ``healthy`` is its reference's summary (None when it has none)."""
    s, crit = label["summary"], label["criterion"]
    if crit == "learned":
        ok = s["learned"] if s["learned"] is not None else s["final"] <= LEARN_RATIO * s["first"]
        return bool(ok), f"learns: final {s['final']:.4g} from {s['first']:.4g} (own test {s['learned']})"
    if healthy is None:
        return False, "no healthy reference"
    h = healthy["summary"]
    if crit == "balance":
        cv, ref = s.get("expert_cv", math.nan), h.get("expert_cv", math.nan)
        ok = cv >= max(CV_RATIO * ref, CV_FLOOR)
        return bool(ok), f"expert load CV {cv:.3f} vs healthy {ref:.3f}"
    if not math.isfinite(s["final"]):
        return True, "non-finite loss"
    bar = h["final"] + LOSS_SHARE * max(h["first"] - h["final"], 1e-3)
    worse_end, worse_mean = s["final"] >= bar, s["mean"] >= AUC_RATIO * h["mean"]
    return worse_end or worse_mean, (f"final {s['final']:.4g} vs bar {bar:.4g}; mean {s['mean']:.4g} vs healthy "
                                     f"{h['mean']:.4g}")
