"""Statistics across the ranks of one step, computed on a step window (steps × ranks, one row per step).

Every function here reads one row (one step) at a time along the contiguous axis, so its result for a step does
not depend on which other steps share the window: a run cut into windows (out of core, on Ray, or one window in
memory) gives bit-identical per-step results. A median of the others of a member is read from the order
statistics around the middle of its step (``order_stats``) and the member's own value, which replaces one median
per member (O(n²) per step) by one partition (O(n)).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MIN, LO, MID, HI, MAX = range(5)
"""Columns of :func:`order_stats`: the least, s[h−1], s[h], s[h+1] and the largest value (h = n // 2)."""


def order_stats(v: np.ndarray) -> np.ndarray:
    """Per row of ``v`` (steps × n, no NaN): the order statistics :data:`MIN`, :data:`LO`, :data:`MID`,
    :data:`HI`, :data:`MAX` (steps × 5): enough for the median, the lower median and the median of the others of
    any member."""
    n = v.shape[1]
    h = n // 2
    pos = [0, max(h - 1, 0), h, min(h + 1, n - 1), n - 1]
    part = np.partition(v, sorted(set(pos)), axis=1)
    return np.ascontiguousarray(part[:, pos])


def median(os: np.ndarray, n: int) -> np.ndarray:
    """Per row, the median of the n values whose :func:`order_stats` are ``os`` (as ``np.median`` computes it)."""
    return os[:, MID].copy() if n % 2 else (os[:, LO] + os[:, MID]) / 2


def lower_median(os: np.ndarray, n: int) -> np.ndarray:
    """Per row, the value at sorted position (n − 1) // 2."""
    return os[:, MID].copy() if n % 2 else os[:, LO].copy()


def peer_median(v: np.ndarray, os: np.ndarray, n: int) -> np.ndarray:
    """Per row and member, the median of the other members of a group of ``n`` (``np.median`` of the row without
    the member), from the group's :func:`order_stats` ``os``; a member alone is its own peer. ``v``: steps × members
    (any subset of the group), or one member's series (steps)."""
    if n == 1:
        return v.astype(np.float64, copy=True)
    col = v.ndim == 1
    x = v.reshape(-1, 1) if col else v
    lo, mid, hi = os[:, LO:LO + 1], os[:, MID:MID + 1], os[:, HI:HI + 1]
    if n % 2 == 0:  # n − 1 others: one middle value, s[h] unless the member is above the lower half
        out = np.where(x <= lo, mid, lo)
    else:
        out = np.where(x < mid, (mid + hi) / 2, np.where(x == mid, (lo + hi) / 2, (lo + mid) / 2))
    return out[:, 0] if col else out


def dixon_low(mat: np.ndarray, critical: Mapping[int, float]) -> np.ndarray:
    """Per row of ``mat`` (instances × ranks): column of the low outlier by Dixon's test, or −1.

    Ratio variants as msprof-analyze's slow_rank recipe: r10 for n ≤ 7, r11 for n ≤ 10, r21 for
    n ≤ 13, r22 above; the critical value for n comes from ``critical``. Rows with ≤ 3 distinct
    values are not judged.
    """
    n = mat.shape[1]
    out = np.full(mat.shape[0], -1, dtype=np.int64)
    if n < 3 or n not in critical or mat.shape[0] == 0:
        return out
    order = np.argsort(mat, axis=1, kind="stable")
    s = np.take_along_axis(mat, order, axis=1)
    lo2, hi = (1, n - 1) if n <= 7 else (1, n - 2) if n <= 10 else (2, n - 2) if n <= 13 else (2, n - 3)
    den = s[:, hi] - s[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(den > 0, (s[:, lo2] - s[:, 0]) / den, 0.0)
    distinct = 1 + np.count_nonzero(np.diff(s, axis=1) > 0, axis=1)
    hit = (ratio > critical[n]) & (distinct > 3)
    out[hit] = order[hit, 0]
    return out


def sigma_low(mat: np.ndarray, k: float) -> np.ndarray:
    """Per row (instances × ranks): the lowest column when it lies below mean − k·σ, or when some column exceeds
    mean + k·σ; else −1."""
    mean, std = mat.mean(axis=1), mat.std(axis=1)
    lo, hi = mat.min(axis=1), mat.max(axis=1)
    hit = (std > 0) & ((lo < mean - k * std) | (hi > mean + k * std))
    out = np.full(mat.shape[0], -1, dtype=np.int64)
    out[hit] = np.argmin(mat, axis=1)[hit]
    return out


def top_values(v: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` largest values in descending order and their columns (steps × k each)."""
    k = min(k, v.shape[1])
    idx = np.argpartition(v, v.shape[1] - k, axis=1)[:, v.shape[1] - k:]
    vals = np.take_along_axis(v, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(idx, order, axis=1).astype(np.int32)
