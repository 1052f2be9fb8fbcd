"""A share of a whole (idle, overlap, communication, a wait): always in [0, 1], or NaN — "not measured" — when the
whole is absent, not finite or not positive. Parts come from different clocks and streams (a device window, a CPU
annotation, a collective that began before its step), so a ratio can leave [0, 1] on real traces (an MTIA trace
once gave an overlap of −20,601%); every producer and reader of a share goes through here."""

from __future__ import annotations

import math

import numpy as np

NOT_MEASURED = "not measured"


def share(part: float | None, whole: float | None) -> float:
    """part / whole clipped to [0, 1]; NaN when either is missing or the whole is not positive."""
    if part is None or whole is None:
        return math.nan
    p, w = float(part), float(whole)
    if not (math.isfinite(p) and math.isfinite(w)) or w <= 0:
        return math.nan
    return min(max(p / w, 0.0), 1.0)


def shares(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Element-wise :func:`share` of two arrays (NaN where not measured)."""
    p, w = np.asarray(part, dtype=np.float64), np.asarray(whole, dtype=np.float64)
    ok = np.isfinite(p) & np.isfinite(w) & (w > 0)
    out = np.full(np.broadcast(p, w).shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        np.divide(p, w, out=out, where=ok)
    out = np.where(ok, np.clip(out, 0.0, 1.0), np.nan)
    return out


def percent(value: float) -> str:
    """A share as text: '12.3%' or 'not measured'."""
    return f"{100 * value:.1f}%" if isinstance(value, int | float) and math.isfinite(value) else NOT_MEASURED
