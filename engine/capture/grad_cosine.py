"""Cosine between consecutive recorded gradients (``grad_cos_prev``) from a fixed strided sample.

Minibatch gradients of a healthy run point in loosely related directions from step to step; gradients that
are never zeroed are running sums, so each one is mostly the previous one plus a little (cosine near 1).
Each parameter tensor contributes at most ``SAMPLE`` coordinates, every ``ceil(numel / SAMPLE)``-th one in
memory order: the same coordinates at every step, no random numbers, a strided view rather than a copy of the
gradient. The cosine of a layer (or expert, or the model: entity "") is over the union of its parameters'
samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from debugtune.engine.capture.probe_layout import ParamLayout

SAMPLE = 4096  # coordinates per tensor: a cost bound (16 KB of float32 per tensor and step), not a judgement


def sample(g: Any) -> Any:
    """Every ``ceil(numel / SAMPLE)``-th element of ``g`` in memory order (a view when ``g`` is contiguous)."""
    import torch

    n = g.numel()
    stride = max(1, math.ceil(n / SAMPLE))
    if g.is_contiguous():
        return g.view(-1)[::stride]
    return torch.take(g, torch.arange(0, n, stride, device=g.device))


class GradCosine:
    """The previous recorded step's samples and the cosine of the current ones against them."""

    def __init__(self, layout: ParamLayout) -> None:
        self.layout = layout
        self.prev: tuple[tuple[int, ...], np.ndarray, np.ndarray] | None = None  # positions, bounds, values

    def measure(self, grads: dict[int, Any]) -> list[tuple[str, list[str], np.ndarray]]:
        """(metric, entities, values) rows for this step's gradients (position → tensor); keeps them for the next."""
        import torch

        positions = tuple(sorted(grads))
        if not positions:
            return []
        with torch.no_grad():
            parts = [sample(grads[i].detach()) for i in positions]
            try:  # one concatenation and one host transfer when the gradients share a device
                flat = torch.cat(parts).to("cpu", torch.float64).numpy()
            except RuntimeError:
                flat = torch.cat([p.to("cpu", torch.float64) for p in parts]).numpy()
        bounds = np.concatenate([[0], np.cumsum([p.numel() for p in parts])]).astype(np.int64)
        prev, self.prev = self.prev, (positions, bounds, flat)
        if prev is None:
            return []
        if prev[0] == positions and np.array_equal(prev[1], bounds):
            pos, a, b, starts = np.array(positions, dtype=np.int64), flat, prev[2], bounds[:-1]
        else:  # the parameters that had a gradient changed: pair those in both steps
            before = {i: prev[2][prev[1][k]:prev[1][k + 1]] for k, i in enumerate(prev[0])}
            pairs = [(i, flat[bounds[k]:bounds[k + 1]]) for k, i in enumerate(positions)
                     if i in before and len(before[i]) == bounds[k + 1] - bounds[k]]
            if not pairs:
                return []
            pos = np.array([i for i, _ in pairs], dtype=np.int64)
            a = np.concatenate([v for _, v in pairs])
            b = np.concatenate([before[i] for i, _ in pairs])
            starts = np.concatenate([[0], np.cumsum([len(v) for _, v in pairs])[:-1]]).astype(np.int64)
        dot, na, nb = (np.add.reduceat(v, starts) for v in (a * b, a * a, b * b))
        return self._rows(pos, dot, na, nb)

    def _rows(self, pos: np.ndarray, dot: np.ndarray, na: np.ndarray, nb: np.ndarray
              ) -> list[tuple[str, list[str], np.ndarray]]:
        lay = self.layout
        out = []
        for group, names in ((lay.layer_of[pos], lay.layer_names), (lay.expert_of[pos], lay.expert_names),
                             (np.zeros(len(pos), dtype=np.int64), np.array([""], dtype=object))):
            keep = group >= 0
            if not keep.any():
                continue
            g = group[keep]
            d, x, y = (np.bincount(g, weights=v[keep], minlength=len(names)) for v in (dot, na, nb))
            ok = (x > 0) & (y > 0)
            if ok.any():
                out.append(("grad_cos_prev", list(names[ok]), d[ok] / np.sqrt(x[ok] * y[ok])))
        return out
