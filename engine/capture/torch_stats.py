"""The fused statistics of ``debugtune.native`` computed with torch operations, for tensors the native
kernel cannot read (accelerator memory). Same fields, bins and comparison rules as the native kernel;
one host transfer per call. Also the torch peer of ``bench/probe_bench.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from debugtune.native import HIST_BINS, HIST_LO, STAT_FIELDS

_RAW_BINS: dict[int, np.ndarray] = {}


def _raw_bins(bits: int) -> np.ndarray:
    """Exponent field → raw bin for IEEE floats of ``bits`` (32 or 64), as the native kernel bins them."""
    if bits not in _RAW_BINS:
        emask, bias = (0xFF, 127) if bits == 32 else (0x7FF, 1023)
        e = np.arange(emask + 1) - bias
        table = np.clip(e - HIST_LO + 2, 1, HIST_BINS - 2)
        table[0], table[emask] = 0, HIST_BINS - 1
        _RAW_BINS[bits] = table
    return _RAW_BINS[bits]


def _one(x: Any, eps: float, large: float, with_hist: bool) -> tuple[Any, Any]:
    import torch

    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    inf = math.inf
    a = x.abs()
    fin = torch.isfinite(x)
    nan = torch.isnan(x).sum()
    infs = torch.isinf(x).sum()
    zeros = (x == 0).sum()
    xf = torch.where(fin, x, 0.0)
    any_fin = fin.any()
    mn = torch.where(fin, x, inf).min() if x.numel() else x.new_tensor(inf)
    mx = torch.where(fin, x, -inf).max() if x.numel() else x.new_tensor(-inf)
    nanv = x.new_tensor(math.nan)
    sumsq = torch.linalg.vector_norm(xf, dtype=torch.float64) ** 2
    hist = _hist(x, zeros, infs) if with_hist else None
    row = torch.stack([
        x.new_tensor(float(x.numel()), dtype=torch.float64), xf.sum(dtype=torch.float64), sumsq, sumsq.sqrt(),
        torch.where(any_fin, torch.maximum(-mn, mx), nanv).double(), torch.where(any_fin, mn, nanv).double(),
        torch.where(any_fin, mx, nanv).double(), zeros.double(), (a < eps).sum().double(),
        (fin & (a >= large)).sum().double(), nan.double(), infs.double(),
    ])
    return row, hist


def _hist(x: Any, zeros: Any, infs: Any) -> Any:
    """Log2 histogram from the exponent bits (subnormals → "under", Inf and NaN share the top raw bin)."""
    import torch

    if x.dtype == torch.float64:
        field = (x.reshape(-1).view(torch.int64) >> 52) & 0x7FF
        table = torch.as_tensor(_raw_bins(64), device=x.device)
    else:
        field = (x.reshape(-1).view(torch.int32) >> 23) & 0xFF
        table = torch.as_tensor(_raw_bins(32), device=x.device)
    raw = torch.bincount(table[field.long()], minlength=HIST_BINS)
    return torch.cat([zeros.reshape(1), (raw[0] - zeros + raw[1]).reshape(1), raw[2:-1], infs.reshape(1)])


def torch_stats_many(tensors: Sequence[Any], eps: float, *, large: float = math.inf,
                     hist: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """``(values[n, len(STAT_FIELDS)], hist[n, HIST_BINS] or None)`` like ``debugtune.native.tensor_stats_many``."""
    import torch

    if not tensors:
        return np.zeros((0, len(STAT_FIELDS))), (np.zeros((0, HIST_BINS), dtype=np.int64) if hist else None)
    with torch.no_grad():
        rows, hists = zip(*(_one(t.detach(), eps, large, hist) for t in tensors), strict=True)
        values = torch.stack([r.to("cpu", non_blocking=False) for r in rows]).numpy()
        counts = torch.stack([h.to("cpu") for h in hists]).numpy().astype(np.int64) if hist else None
    return values, counts


def torch_update_norms(after: Sequence[Any], before: Sequence[Any]) -> np.ndarray:
    """``[[||after - before||, ||after||], ...]`` in float64, like ``debugtune.native.update_norms``."""
    import torch

    if not after:
        return np.zeros((0, 2))
    with torch.no_grad():
        out = [torch.stack([torch.linalg.vector_norm(a.double() - b.double()),
                            torch.linalg.vector_norm(a, dtype=torch.float64)])
               for a, b in zip(after, before, strict=True)]
        return torch.stack(out).cpu().numpy()
