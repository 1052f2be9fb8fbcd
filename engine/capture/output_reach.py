"""Whether the model's output can reach the targets of a loss on continuous values (``output_bound_*``,
``output_gated_frac``; detail steps).

A sigmoid or ReLU at the end of a regression or reconstruction model bounds what it can predict. Under a loss
on continuous targets (MSE, L1, Huber) the output gradient points from the output towards its target, so a
target beyond the bound shows as an output held at the bound by a gradient that pushes it further out: at 0
with a positive gradient (the loss wants it lower), at 1 with a negative one. A target the bound merely touches
(black pixels under a sigmoid) has an error, and a gradient, that shrinks as the output approaches it; one
beyond it keeps its whole distance. Applied in the loss code instead, a ReLU leaves an exact zero gradient on
every negative output, which no loss on continuous targets does on its own.

- ``output_bound_push``: where the output lies in [0, ∞) or [0, 1], the share of the output gradient's mass
  (the sum of its absolute values) on elements within ``probe.bounded_sat_band`` of a bound whose gradient
  points past it; 0 for an unbounded output.
- ``output_gated_frac``: the share of negative outputs whose gradient is exactly zero, less that share among
  positive outputs (a loss that masks elements zeroes both alike); where both signs occur.

Judged only where ``loss_identity`` finds no loss with hard targets behind ``convergence.loss_identity.share``
of the gradient: under cross-entropy or BCE the gradient at a probability near 1 pushes outwards by design,
and the identity already reads a squashing function there. Under L1 or smooth L1 with errors beyond the
Huber knee the gradient has one magnitude everywhere, which the identity takes for a loss with hard targets
(softmax on logits for a one-column output, NLL of log-probabilities otherwise), so those runs are not judged
once their targets are out of reach: measured under MSE. The hook only reads the tensors it is handed;
cost: two comparisons and a masked sum over the identity's sampled rows.
"""

from __future__ import annotations

from typing import Any

SHARE_KEY = "convergence.loss_identity.share"
BAND_KEY = "probe.bounded_sat_band"
MIN_KEY = "probe.output_reach_min_elements"
KEYS = (SHARE_KEY, BAND_KEY, MIN_KEY)


class OutputReach:
    """Pools a step's outputs under a loss on continuous targets (several forwards) until the step is taken."""

    def __init__(self, share: float, band: float, min_elements: float) -> None:
        self.share, self.band, self.min_elements = share, band, int(min_elements)
        self._reset()

    def _reset(self) -> None:
        self.pushed = self.mass = 0.0
        self.elements = 0
        self.signs = [0, 0, 0, 0]  # negative outputs, of them with zero gradient, positive, of them zero

    def observe(self, yd: Any, gd: Any, hits: dict[str, int], n: int) -> None:
        """``yd``/``gd``: the identity's sampled rows (double); ``hits``/``n``: its counts for them."""
        if n <= 0 or max(hits.values(), default=0) >= self.share * n:
            return  # a loss with hard targets, or nothing to judge
        a = gd.abs()
        self.mass += float(a.sum())
        self.elements += int(yd.numel())
        if bool((yd >= 0).all()):
            out = (yd <= self.band) & (gd > 0)
            if bool((yd <= 1).all()):
                out |= (yd >= 1 - self.band) & (gd < 0)
            self.pushed += float(a[out].sum())
        neg, pos, zero = yd < 0, yd > 0, gd == 0
        for i, (side, count) in enumerate(((neg, int(neg.sum())), (pos, int(pos.sum())))):
            self.signs[2 * i] += count
            self.signs[2 * i + 1] += int((zero & side).sum())

    def take(self) -> dict[str, float] | None:
        """The step's metrics (those its outputs allow), or None under ``min_elements`` elements; resets."""
        pushed, mass, elements, signs = self.pushed, self.mass, self.elements, self.signs
        self._reset()
        if elements < self.min_elements or mass <= 0:
            return None
        out = {"output_bound_push": pushed / mass}
        if signs[0] and signs[2]:
            out["output_gated_frac"] = signs[1] / signs[0] - signs[3] / signs[2]
        return out
