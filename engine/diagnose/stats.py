"""Vectorised statistics the detectors share: robust z-scores, runs, trends, periods, outlier tests."""

from __future__ import annotations

import bisect
import math

import numpy as np
from scipy import ndimage, signal

MAD_TO_SIGMA = 1.4826
"""Scale that makes the median absolute deviation a consistent estimator of sigma for normal data."""


def ffill(x: np.ndarray) -> np.ndarray:
    """Non-finite values replaced by the last finite value before them (the first finite one at the start)."""
    x = np.asarray(x, dtype=np.float64)
    ok = np.isfinite(x)
    if ok.all() or not ok.any():
        return x.copy()
    idx = np.where(ok, np.arange(x.size), 0)
    np.maximum.accumulate(idx, out=idx)
    out = x[idx]
    first = np.argmax(ok)
    out[:first] = x[first]
    return out


def trailing_median(x: np.ndarray, window: int) -> np.ndarray:
    """Median of the ``window`` values before each point (excluding it); the first point uses itself."""
    window = max(1, min(int(window), x.size))
    shifted = np.concatenate([x[:1], x[:-1]])
    return ndimage.median_filter(shifted, size=window, mode="nearest", origin=(window - 1) // 2)


def trailing_mad(x: np.ndarray, med: np.ndarray, window: int) -> np.ndarray:
    """Median absolute deviation from ``med`` over the trailing window (excluding the point)."""
    window = max(1, min(int(window), x.size))
    dev = np.abs(x - med)
    shifted = np.concatenate([dev[:1], dev[:-1]])
    return ndimage.median_filter(shifted, size=window, mode="nearest", origin=(window - 1) // 2)


def robust_z(x: np.ndarray, window: int, floor: float = 1e-12) -> np.ndarray:
    """(x − trailing median) / (1.4826 · trailing MAD): how unusual each point is given what came before."""
    med = trailing_median(x, window)
    mad = trailing_mad(x, med, window)
    scale = np.maximum(MAD_TO_SIGMA * mad, np.maximum(floor, 1e-3 * np.abs(med)))
    return (x - med) / scale


def smooth(x: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average (edges use the nearest value)."""
    window = max(1, min(int(window), x.size))
    return ndimage.uniform_filter1d(x.astype(np.float64), size=window, mode="nearest")


def debiased_ema(x: np.ndarray, beta: float) -> np.ndarray:
    """Exponential moving average started at zero and divided by ``1 - beta**(t+1)`` (Adam's bias correction):
    the running mean at first, a moving average later. fastai smooths the loss this way before judging it."""
    x = np.asarray(x, dtype=np.float64)
    avg = signal.lfilter([1.0 - beta], [1.0, -beta], x)
    return avg / (1.0 - beta ** np.arange(1, x.size + 1))


def centred_median(x: np.ndarray, window: int) -> np.ndarray:
    window = max(1, min(int(window), x.size))
    return ndimage.median_filter(x.astype(np.float64), size=window, mode="nearest")


def trimmed_mean(x: np.ndarray, trim: float) -> float:
    """Mean after dropping ``max(1, round(trim · n))`` values at each end (none when that leaves nothing)."""
    v = np.sort(np.asarray(x, dtype=np.float64))
    k = max(1, round(trim * v.size))
    return float(np.mean(v[k:-k])) if v.size > 2 * k else float(np.mean(v))


def centred_trimmed_mean(x: np.ndarray, window: int, trim: float) -> np.ndarray:
    """:func:`trimmed_mean` over a centred window at each point (edges repeat the nearest value). Unlike a
    running median it follows a stall on a share of the steps (every other step, every third), which costs
    throughput in proportion; like one, it ignores a pause on one step of a window."""
    window = max(1, min(int(window), x.size))
    k = max(1, round(trim * window))
    if window <= 2 * k:
        return smooth(x, window)
    lo = window // 2
    padded = np.pad(np.asarray(x, dtype=np.float64), (lo, window - 1 - lo), mode="edge")
    if window > _SORTED_WINDOW:
        return _sliding_trimmed_mean(padded, x.size, window, k)
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)
    out = np.empty(x.size)
    rows = max(1, (1 << 22) // window)  # a block of windows at a time: memory does not grow with window × steps
    for a in range(0, x.size, rows):
        part = np.partition(windows[a:a + rows], (k, window - k - 1), axis=1)
        out[a:a + rows] = part[:, k:window - k].mean(axis=1)
    return out


_SORTED_WINDOW = 512
"""Above this window a sorted window slides (one removal and one insertion per point) instead of each window
being partitioned anew: O(n · window) memory moves in C instead of O(n · window) comparisons in numpy."""


def _sliding_trimmed_mean(padded: np.ndarray, n: int, window: int, k: int) -> np.ndarray:
    """The trimmed means of a sorted window sliding over ``padded``: the sums of its k smallest and k largest
    values follow each removal and insertion (one value crosses each boundary at most), recomputed exactly every
    1024 points so rounding does not drift."""
    values = padded.tolist()
    win = sorted(values[:window])
    out = np.empty(n)
    mid = window - 2 * k
    total, low, high = math.fsum(win), math.fsum(win[:k]), math.fsum(win[window - k:])
    out[0] = (total - low - high) / mid
    for i in range(1, n):
        gone, new = values[i - 1], values[i + window - 1]
        j = bisect.bisect_left(win, gone)
        del win[j]
        if j < k:
            low += win[k - 1] - gone
        if j >= window - k:
            high += win[window - k - 1] - gone
        j = bisect.bisect_right(win, new)
        win.insert(j, new)
        if j < k:
            low += new - win[k]
        if j >= window - k:
            high += new - win[window - k - 1]
        total += new - gone
        if i % 1024 == 0:
            total, low, high = math.fsum(win), math.fsum(win[:k]), math.fsum(win[window - k:])
        out[i] = (total - low - high) / mid
    return out


def runs_start(mask: np.ndarray, min_len: int) -> np.ndarray:
    """Indices i where mask[i : i + min_len] is all true."""
    min_len = max(1, int(min_len))
    if mask.size < min_len:
        return np.zeros(0, dtype=np.int64)
    c = np.concatenate([[0], np.cumsum(mask.astype(np.int64))])
    return np.flatnonzero(c[min_len:] - c[:-min_len] == min_len)


def first_run(mask: np.ndarray, min_len: int) -> int | None:
    """First index from which ``mask`` stays true for ``min_len`` points, or None."""
    starts = runs_start(mask, min_len)
    return int(starts[0]) if starts.size else None


def sustained_onset(mask: np.ndarray, min_len: int, frac: float) -> int | None:
    """First index from which ``mask`` stays true for ``min_len`` points and then holds on at least ``frac`` of
    the points to the end, or None: a condition that sets in late is found where it sets in, and an early
    excursion that ends does not hide one that comes later and stays."""
    starts = runs_start(mask, min_len)
    if not starts.size:
        return None
    tail = np.cumsum(mask[::-1].astype(np.int64))[::-1]  # true points from i to the end
    held = tail[starts] / (mask.size - starts)
    ok = np.flatnonzero(held >= frac)
    return int(starts[ok[0]]) if ok.size else None


def longest_run(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of true values; (0, 0) when none."""
    if not mask.any():
        return 0, 0
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    d = np.diff(m)
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    k = int(np.argmax(ends - starts))
    return int(starts[k]), int(ends[k] - starts[k])


def change_point(x: np.ndarray, z: float) -> int:
    """Start of a single upward shift in the mean of ``x``: the split after the lowest point of the cumulative
    deviation from the mean (CUSUM), kept when the shift is at least ``z`` standard errors; else 0."""
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n < 4 or not np.isfinite(x).all():
        return 0
    k = int(np.argmin(np.cumsum(x - x.mean())[:-1])) + 1
    a, b = x[:k], x[k:]
    if a.size < 2 or b.size < 2:
        return 0
    sd = np.sqrt((np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / (n - 2))
    se = sd * np.sqrt(1.0 / a.size + 1.0 / b.size)
    return k if b.mean() - a.mean() > z * max(se, 1e-12) else 0


def acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelation of ``x`` (mean removed) at lags 0..max_lag, computed with the FFT."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    n = x.size
    size = 1 << int(np.ceil(np.log2(2 * n - 1)))
    f = np.fft.rfft(x, size)
    r = np.fft.irfft(f * np.conj(f), size)[: max_lag + 1]
    return r / r[0] if r[0] > 0 else np.zeros(max_lag + 1)


def dominant_period(resid: np.ndarray, min_period: int, max_period: int) -> tuple[int, float]:
    """(period, autocorrelation at it): the highest local ACF peak with lag in [min_period, max_period], among the
    lags after the ACF first falls below zero (where it does): a slow wave keeps the ACF high over its first quarter
    period, and a noise wiggle on that shoulder is no period of its own."""
    max_period = min(int(max_period), resid.size // 2)
    if max_period <= min_period:
        return 0, 0.0
    r = acf(resid, max_period + 1)
    below = np.flatnonzero(r[1:max_period] < 0)
    first = max(min_period, int(below[0]) + 1) if below.size else min_period
    lags = np.arange(first, max_period + 1)
    peak = (r[lags] >= r[lags - 1]) & (r[lags] >= r[lags + 1]) & (r[lags] > 0)
    if not peak.any():
        return 0, 0.0
    cand = lags[peak]
    best = int(cand[np.argmax(r[cand])])
    return best, float(r[best])


def sinusoid_amplitude(resid: np.ndarray, period: float) -> float:
    """Amplitude of the component of ``resid`` at ``period`` (least-squares sine/cosine fit)."""
    t = np.arange(resid.size)
    w = 2 * np.pi / period
    c, s = np.cos(w * t), np.sin(w * t)
    a = np.linalg.lstsq(np.column_stack([c, s, np.ones_like(c)]), resid, rcond=None)[0]
    return float(np.hypot(a[0], a[1]))


def local_sinusoid_amplitude(resid: np.ndarray, period: float, window: int) -> np.ndarray:
    """Amplitude of the component at ``period`` in each ``window``-long stretch (a sine, cosine, level and slope
    fitted by least squares every quarter period), read at the stretch's centre and interpolated between.
    Unlike an RMS envelope, per-step noise adds only about sigma * sqrt(2 / window) to it, and a slow drift
    the detrending left adds little, so it says where a wave is, not where the noise is as large as half of it."""
    n = resid.size
    window = max(4, min(int(window), n))
    t = np.arange(window, dtype=np.float64)
    ph = 2 * np.pi * t / period  # the amplitude does not depend on the phase, so one design serves every stretch
    design = np.column_stack([np.cos(ph), np.sin(ph), np.ones(window), t / window])
    starts = np.unique(np.append(np.arange(0, n - window + 1, max(1, int(period // 4))), n - window))
    coef = np.linalg.lstsq(design, resid[starts[None, :] + np.arange(window)[:, None]], rcond=None)[0]
    amps = np.hypot(coef[0], coef[1])
    return np.interp(np.arange(n), starts + window / 2, amps)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (0 when either side is constant)."""
    if x.size < 3:
        return 0.0
    rx = np.argsort(np.argsort(x)).astype(np.float64)
    ry = np.argsort(np.argsort(y)).astype(np.float64)
    sx, sy = rx.std(), ry.std()
    if sx == 0 or sy == 0:
        return 0.0
    return float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy))


def downsample(steps: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Block means so that at most ``max_points`` remain."""
    n = values.size
    if n <= max_points:
        return steps, values
    k = int(np.ceil(n / max_points))
    m = (n // k) * k
    return steps[:m:k], values[:m].reshape(-1, k).mean(axis=1)
