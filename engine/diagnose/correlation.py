"""The correlation graph: findings whose underlying series co-move, with the lag at which they do.

Each finding's series is binned onto one shared step grid (at most ``correlation.max_points`` bins,
so a 10,000-step run costs the same as a 500-step one), first-differenced and standardised; the
cross-correlation of every pair is taken with the FFT over lags up to ``correlation.max_lag_frac``
of the grid. An edge ``a → b`` means a's series leads b's by ``lag_steps`` (≥ 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import networkx as nx
import numpy as np

from debugtune.engine.diagnose.base import Series
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.kg.records import CorrelationEdge, Finding


def _binned(series: Mapping[str, Series], max_points: int) -> tuple[dict[str, np.ndarray], float]:
    lo = min(int(s[0].min()) for s in series.values())
    hi = max(int(s[0].max()) for s in series.values())
    span = hi - lo + 1
    bins = max(2, min(max_points, span))
    width = span / bins
    out = {}
    for key, (steps, values) in series.items():
        ok = np.isfinite(values)
        idx = np.minimum(((steps[ok] - lo) / width).astype(np.int64), bins - 1)
        cnt = np.bincount(idx, minlength=bins)
        tot = np.bincount(idx, weights=values[ok], minlength=bins)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[key] = np.where(cnt > 0, tot / cnt, np.nan)
    return out, width


def _xcorr(a: np.ndarray, b: np.ndarray, max_lag: int) -> tuple[int, float]:
    """(lag, r) maximising |r| where r(lag) = corr(a[t], b[t + lag]); positive lag: a leads b."""
    n = a.size
    size = 1 << int(np.ceil(np.log2(2 * n - 1)))
    r = np.fft.irfft(np.conj(np.fft.rfft(a, size)) * np.fft.rfft(b, size), size) / n
    lags = np.concatenate([np.arange(0, max_lag + 1), np.arange(-max_lag, 0)])
    vals = np.concatenate([r[: max_lag + 1], r[size - max_lag:]]) if max_lag else r[:1]
    k = int(np.argmax(np.abs(vals)))
    return int(lags[k]), float(vals[k])


def correlation_edges(findings: Sequence[Finding], series: Mapping[str, Series],
                      th: Thresholds) -> tuple[list[CorrelationEdge], nx.DiGraph]:
    """Edges between findings whose series co-move, and the graph (nodes = finding ids)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(f.id for f in findings)
    usable = {f.id: series[f.id] for f in findings if f.id in series and series[f.id][0].size >= 3}
    if len(usable) < 2:
        return [], graph
    binned, width = _binned(usable, th.as_int("correlation.max_points"))
    prepared: dict[str, np.ndarray] = {}
    for key, v in binned.items():
        d = np.diff(v)
        prepared[key] = d
    keys = sorted(prepared)
    min_overlap = th.as_int("correlation.min_overlap")
    z = th["correlation.z"]
    edges: list[CorrelationEdge] = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            both = np.isfinite(prepared[a]) & np.isfinite(prepared[b])
            m = int(both.sum())
            if m < min_overlap:
                continue
            x, y = prepared[a][both], prepared[b][both]
            sx, sy = x.std(), y.std()
            if sx == 0 or sy == 0:
                continue
            x, y = (x - x.mean()) / sx, (y - y.mean()) / sy
            lag, r = _xcorr(x, y, max(0, int(m * th["correlation.max_lag_frac"])))
            if abs(r) < max(th["correlation.min_abs"], z / np.sqrt(m)):
                continue
            lead, follow, lag = (a, b, lag) if lag >= 0 else (b, a, -lag)
            edge = CorrelationEdge(lead, follow, int(round(lag * width)), round(r, 4))
            edges.append(edge)
            graph.add_edge(lead, follow, lag_steps=edge.lag_steps, correlation=edge.correlation)
    return edges, graph
