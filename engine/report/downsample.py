"""Downsampling to a fixed pixel budget that keeps extremes: min/max per bucket, never every n-th point.

A line keeps, per bucket of consecutive points, its minimum and its maximum (in step order), so a spike
or a dip of one step survives. A heat-map cell covering several steps (or rows) shows whichever of the
bucket's minimum and maximum lies farther from a reference (the row's median along steps, the grid's
median across rows), so a slow rank among thousands or a one-step gradient spike still shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def bucket_edges(n: int, budget: int) -> np.ndarray:
    """Start indices of at most ``budget`` contiguous, near-equal buckets covering ``range(n)``, plus ``n``."""
    if n <= 0:
        return np.zeros(1, dtype=np.int64)
    k = max(1, min(int(budget), n))
    return np.unique(np.linspace(0, n, k + 1).round().astype(np.int64))


def _reduce(z: np.ndarray, edges: np.ndarray, axis: int, ref: np.ndarray | float) -> np.ndarray:
    """Per bucket along ``axis``: the min or the max, whichever is farther from ``ref`` (NaN-aware)."""
    starts = edges[:-1]
    with np.errstate(invalid="ignore"):
        hi = np.fmax.reduceat(z, starts, axis=axis)
        lo = np.fmin.reduceat(z, starts, axis=axis)
        take_hi = np.abs(np.nan_to_num(hi - ref, nan=-np.inf)) >= np.abs(np.nan_to_num(lo - ref, nan=-np.inf))
    return np.where(take_hi, hi, lo)


def _nanmedian(z: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """Median ignoring NaN; NaN (without a warning) where everything is NaN."""
    finite = np.isfinite(z)
    if axis is None:
        return float(np.median(z[finite])) if finite.any() else float("nan")
    out = np.full(z.shape[1 - axis], np.nan)
    has = finite.any(axis=axis)
    if has.any():
        sub = z[:, has] if axis == 0 else z[has, :]
        out[has] = np.nanmedian(np.where(np.isfinite(sub), sub, np.nan), axis=axis)
    return out


@dataclass(frozen=True)
class Grid:
    """A downsampled heat map: ``z[row, col]``, and the index ranges of the original rows and columns."""

    z: np.ndarray
    row_edges: np.ndarray
    col_edges: np.ndarray

    def row_span(self, i: int) -> tuple[int, int]:
        """First and last original row index in downsampled row ``i``."""
        return int(self.row_edges[i]), int(self.row_edges[i + 1]) - 1

    def col_span(self, j: int) -> tuple[int, int]:
        return int(self.col_edges[j]), int(self.col_edges[j + 1]) - 1

    def row_of(self, original: int) -> int:
        """The downsampled row holding original row ``original``."""
        return int(np.searchsorted(self.row_edges, original, side="right") - 1)


def downsample_grid(z: np.ndarray, max_rows: int, max_cols: int) -> Grid:
    """``z[rows, steps]`` reduced to at most ``max_rows`` x ``max_cols`` cells, keeping extremes (module doc)."""
    z = np.asarray(z, dtype=np.float64)
    z = np.where(np.isfinite(z), z, np.nan)
    rows, cols = z.shape
    col_edges = bucket_edges(cols, max_cols)
    if len(col_edges) - 1 < cols:
        z = _reduce(z, col_edges, axis=1, ref=np.asarray(_nanmedian(z, axis=1))[:, None])
    row_edges = bucket_edges(rows, max_rows)
    if len(row_edges) - 1 < rows:
        z = _reduce(z, row_edges, axis=0, ref=_nanmedian(z))
    return Grid(z, row_edges, col_edges)


def minmax_line(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points of the line (x, y): each bucket's min and max in x order.

    Non-finite values are kept where they are (a NaN loss is a finding, not noise): a bucket holding one
    contributes its first non-finite point in place of its min.
    """
    x, y = np.asarray(x), np.asarray(y, dtype=np.float64)
    n = len(x)
    if n <= max_points:
        return x, y
    edges = bucket_edges(n, max(1, max_points // 2))
    starts = edges[:-1]
    finite = np.isfinite(y)
    big = np.where(finite, y, -np.inf)
    small = np.where(finite, y, np.inf)
    bucket = np.repeat(np.arange(len(starts)), np.diff(edges))
    # index of the max and min of each bucket: sort by (bucket, value) and take the ends of each run
    order_hi = np.lexsort((big, bucket))
    order_lo = np.lexsort((small, bucket))
    last = edges[1:] - 1
    i_hi = order_hi[last]
    i_lo = order_lo[starts]
    bad = ~finite
    if bad.any():
        first_bad = np.full(len(starts), -1)
        idx = np.flatnonzero(bad)
        b = bucket[idx]
        first = np.unique(b, return_index=True)
        first_bad[first[0]] = idx[first[1]]
        i_lo = np.where(first_bad >= 0, first_bad, i_lo)
    keep = np.unique(np.concatenate([i_lo, i_hi]))
    return x[keep], y[keep]
