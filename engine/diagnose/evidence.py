"""How much a finding rests on: steps (or collective instances) judged, how many showed the condition, and the
evidence weight that scales its severity and its strength in the causal engine.

The weight is the lower ``diagnose.evidence.quantile`` bound of the rate at which the condition held, under a
Jeffreys Beta(hits + ½, misses + ½) posterior over the independent trials (steps; instances inside one step are
not independent, a rank late for the first collective of a step is late for the others). One step that shows a
condition gives 0.35, three of three 0.66, ten of ten 0.88: thin evidence is a *suspected* finding, not a
confirmed one. The levels are ``diagnose.evidence.likely`` and ``diagnose.evidence.confirmed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy.special import betaincinv

from debugtune.engine.diagnose.base import Context

KEYS = ("diagnose.evidence.quantile", "diagnose.evidence.likely", "diagnose.evidence.confirmed")


def weight(ctx: Context, hits: int, trials: int) -> float:
    """Lower credible bound of the rate at which a condition held in ``hits`` of ``trials`` trials."""
    return lower_bound(hits, trials, ctx.th["diagnose.evidence.quantile"])


def lower_bound(hits: int, trials: int, quantile: float) -> float:
    """The ``quantile`` of the Jeffreys Beta(hits + ½, misses + ½) posterior of a rate seen in ``hits`` of
    ``trials`` independent trials (0 for none)."""
    if trials <= 0:
        return 0.0
    hits = min(max(int(hits), 0), int(trials))
    return float(betaincinv(hits + 0.5, trials - hits + 0.5, quantile))  # Beta ppf


def level(ctx: Context, w: float) -> str:
    if w >= ctx.th["diagnose.evidence.confirmed"]:
        return "confirmed"
    return "likely" if w >= ctx.th["diagnose.evidence.likely"] else "suspected"


def scaled(ctx: Context, severity: float, mask: np.ndarray | None = None, *, hits: int | None = None,
           trials: int | None = None, instances: int | None = None,
           extra: Mapping[str, Any] | None = None) -> tuple[float, dict[str, Any]]:
    """(severity × evidence weight, the evidence keys): ``steps_judged``, ``steps_shown``, ``instances_judged``,
    ``evidence_weight`` and ``confidence``. The trials are the entries of ``mask`` (True where the condition
    held) unless ``hits``/``trials`` are given."""
    if mask is not None:
        m = np.asarray(mask, dtype=bool)
        hits, trials = int(m.sum()), int(m.size)
    hits, trials = int(hits or 0), int(trials or 0)
    w = weight(ctx, hits, trials)
    ev: dict[str, Any] = dict(extra or {})  # what the detector measured first, then what it rests on
    ev.update({"steps_judged": float(trials), "steps_shown": float(hits), "evidence_weight": w,
               "confidence": level(ctx, w)})
    if instances is not None:
        ev["instances_judged"] = float(instances)
    return float(severity) * w, ev
