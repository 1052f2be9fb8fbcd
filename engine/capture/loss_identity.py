"""Which loss produced the gradient at the model's output (``output_loss_identity``, detail steps).

The output hook can see that a model ends in a softmax, sigmoid or ReLU, but not whether the loss behind it
expects probabilities (``nn.BCELoss``, ``NLLLoss`` of the log) or applies its own normaliser
(``CrossEntropyLoss``, ``BCEWithLogitsLoss``): the first is correct, the second a mismatch. The gradient tells
them apart exactly. Every standard loss with a hard target has a closed-form derivative in which, for each
output element, the gradient divided by a known function of the output is the same constant ``c`` (the
reduction's scale): for ``BCEWithLogitsLoss`` on ``y`` with target 0, ``dL/dy = c·sigmoid(y)``; with target 1,
``dL/dy = -c·sigmoid(-y)``. So for each hypothesis the probe divides the gradient by that function (separately
for positive and negative gradients, which may carry different weights such as ``pos_weight``) and counts the
elements in the densest window of relative width ``probe.loss_identity_tol``: under the loss that produced the
gradient every element with a hard target lands in it; under any other only coincidences do (about one per
sign). The share of non-zero gradient elements in the windows, per hypothesis, is the metric (entity = the
hypothesis). Soft targets (label smoothing, continuous pixels) land only where they are exactly 0 or 1.

A ReLU in the loss code leaves an exact zero gradient on every negative output, which a ratio cannot see (and
on positive outputs ``relu_sigmoid`` is ``sigmoid_logits``): negative outputs with a zero gradient, in rows
where some positive output has a gradient, are counted as elements, and as hits of a ReLU hypothesis
(``GATED``) only when that hypothesis also explains most (half or more) of the positive outputs' gradients.
Under a loss on logits there are none (softmax and sigmoid are never 0); NLL of ``log_softmax`` outputs (all
negative, one gradient per row) has no positive output, and a hinge loss's zeros come with positive-output
gradients no ReLU hypothesis explains.

| hypothesis | loss the gradient is exactly that of | ratio for g > 0 / g < 0 |
|---|---|---|
| sigmoid_logits | BCEWithLogits on the outputs | g / σ(y), −g / σ(−y) |
| softmax_logits | cross-entropy on the outputs (softmax over the classes) | g / s, −g / (1 − s), s = softmax(y) |
| bce_probs | BCE on outputs in [0, 1] | g·(1 − y), −g·y |
| mse | squared error on outputs in [0, 1] with 0/1 targets | g / y, −g / (1 − y) |
| nll_probs | NLL of log(y) (only the target has a gradient) | —, −g·y (rows with one gradient) |
| nll_logprobs | NLL of log-probabilities (``log_softmax`` then ``NLLLoss``) | —, −g (rows with one gradient) |
| sigmoid_twice | a sigmoid, then BCEWithLogits (p = σ(y)) | g / (p(1−p)σ(p)), −g / (p(1−p)σ(−p)) |
| relu_softmax | a ReLU, then cross-entropy (y > 0 only) | g / r, −g / (1 − r), r = softmax(relu(y)) |
| sigmoid_softmax | a sigmoid, then cross-entropy | g / (p(1−p)s), −g / (p(1−p)(1 − s)), s = softmax(p) |
| relu_sigmoid | a ReLU, then BCEWithLogits (y > 0 only) | g / σ(y), −g / σ(−y) |
| softmax_twice | a softmax, then cross-entropy | g / ĝ, ĝ the gradient for the row's target guessed as argmin g/p |

A row is the softmax's unit: the last dimension of the output, or for an output of three dimensions or more
(a segmentation map ``(N, C, H, W)``, a 1-D convolution's ``(N, C, L)``) possibly dimension 1, which is where
``cross_entropy`` normalises such an input. Both layouts are measured there, and the one whose best hypothesis
explains the larger share of the gradient is the loss's: its rows go to the readers (labels, output reach).
Before, a segmentation network's per-pixel loss matched no hypothesis and its labels were never read.

The hook reads the gradient and returns nothing, so the gradient the training uses is untouched. Cost: the
ratios on ``probe.loss_identity_max_elements`` elements in whole rows, at least 8 rows (every k-th row; a row
is the softmax's unit), then at most that many elements per sign (every m-th) in one sort per hypothesis and
sign, on detail steps only: 3–6 ms for a 10-class batch, 13 ms for 5,000 tokens, 0.1 s for 32,000 (one
core; twice that for an output of three dimensions or more).

Under mixed precision (``torch.autocast`` to bfloat16 or float16) the output and its gradient are 16-bit: the
loss computes in float32 from the upcast output (exact) and its gradient is rounded once to 16 bits, which moves
each ratio by at most half a unit in the last place (2^-8 relative in bfloat16). Those gradients are measured
in a window of ``probe.loss_identity_tol_half`` instead, about two bfloat16 ulps, where a wrong hypothesis's
ratios, spread over orders of magnitude, still put under 1% of themselves by chance. Without that key they are
not measured (as before it was added).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from debugtune.engine.capture.label_agreement import LabelAgreement
from debugtune.engine.capture.output_reach import OutputReach

TOL_KEY = "probe.loss_identity_tol"
HALF_KEY = "probe.loss_identity_tol_half"
MIN_KEY = "probe.loss_identity_min_elements"
MAX_KEY = "probe.loss_identity_max_elements"
KEYS = (TOL_KEY, MIN_KEY, MAX_KEY)

Ratio = Callable[[Any, Any], Any]


def _sign(g: Any, pos: Any, neg: Any) -> Any:
    import torch

    return torch.where(g > 0, pos, neg)


def _only(mask: Any, r: Any) -> Any:
    """``r`` where ``mask`` holds, NaN (no claim) elsewhere."""
    import torch

    return torch.where(mask, r, torch.full_like(r, math.nan))


def _sigmoid_logits(y: Any, g: Any) -> Any:
    return _sign(g, g / y.sigmoid(), -g / (-y).sigmoid())


def _softmax_logits(y: Any, g: Any) -> Any:
    s = y.softmax(dim=-1)
    return _sign(g, g / s, -g / (1 - s))


def _bce_probs(y: Any, g: Any) -> Any:
    return _sign(g, g * (1 - y), -g * y)


def _mse(y: Any, g: Any) -> Any:
    return _sign(g, g / y, -g / (1 - y))


def _one_target(g: Any) -> Any:
    """Elements whose row has a gradient at this one element only: NLL's shape (the target alone), never that of
    an L1 or Huber loss, whose sign-only gradient is on every element of the row."""
    return (g < 0) & ((g != 0).sum(dim=-1, keepdim=True) == 1)


def _nll_probs(y: Any, g: Any) -> Any:
    return _only(_one_target(g), -g * y)


def _nll_logprobs(y: Any, g: Any) -> Any:
    return _only(_one_target(g), -g)


def _sigmoid_twice(y: Any, g: Any) -> Any:
    p = y.sigmoid()
    d = p * (1 - p)
    return _sign(g, g / (d * p.sigmoid()), -g / (d * (-p).sigmoid()))


def _relu_softmax(y: Any, g: Any) -> Any:
    r = y.clamp_min(0).softmax(dim=-1)
    return _only(y > 0, _sign(g, g / r, -g / (1 - r)))


def _relu_sigmoid(y: Any, g: Any) -> Any:
    return _only(y > 0, _sigmoid_logits(y, g))


def _sigmoid_softmax(y: Any, g: Any) -> Any:
    p = y.sigmoid()
    d, s = p * (1 - p), p.softmax(dim=-1)
    return _sign(g, g / (d * s), -g / (d * (1 - s)))


def _softmax_twice(y: Any, g: Any) -> Any:
    import torch

    p = y.softmax(dim=-1)
    target = (g / p).argmin(dim=-1, keepdim=True)
    v = p.softmax(dim=-1) - torch.zeros_like(p).scatter_(-1, target, 1.0)
    predicted = p * (v - (p * v).sum(dim=-1, keepdim=True))
    return g / predicted


BOUNDED = ("bce_probs", "mse", "nll_probs")
"""Hypotheses that only make sense for outputs within [0, 1] (probabilities)."""
HYPOTHESES: dict[str, Ratio] = {
    "sigmoid_logits": _sigmoid_logits, "softmax_logits": _softmax_logits, "bce_probs": _bce_probs,
    "mse": _mse, "nll_probs": _nll_probs, "nll_logprobs": _nll_logprobs, "sigmoid_twice": _sigmoid_twice,
    "relu_softmax": _relu_softmax,
    "sigmoid_softmax": _sigmoid_softmax, "relu_sigmoid": _relu_sigmoid, "softmax_twice": _softmax_twice,
}
ROW_WISE = ("softmax_logits", "nll_probs", "nll_logprobs", "relu_softmax", "sigmoid_softmax", "softmax_twice")
"""Hypotheses of a loss over the classes of a row: an output one class wide has none. Over one column a softmax
is 1 and its ratio is finite on positive gradients only, so the sign-only gradient of an L1 or Huber loss on a
single regression output put every positive element in one window (a third of the elements: a softmax named).
NLL's hypotheses claim only rows with a gradient at one element (``_one_target``): the same sign-only gradient
on wider outputs had every negative element in NLL's window."""
GATED = ("relu_softmax", "relu_sigmoid")
"""Hypotheses with a ReLU in the loss code: negative outputs with a zero gradient are theirs."""
MIN_ROWS = 8
"""Rows measured whatever their width (a softmax needs whole rows): 8 rows of a 32,000-token vocabulary cost
about 70 ms on one CPU core. With NLL only one element per row has a gradient, so over a vocabulary wider than
``max_elements / 8`` it stays under ``min_elements`` and is not recorded."""


def densest(r: Any, tol: float) -> int:
    """The most positive finite values of ``r`` within one window [v, v·(1 + tol)]."""
    import torch

    r = r[torch.isfinite(r) & (r > 0)]
    if r.numel() == 0:
        return 0
    s, _ = torch.sort(r)
    ends = torch.searchsorted(s, s * (1 + tol), right=True)
    return int((ends - torch.arange(s.numel(), device=s.device)).max())


def _every(mask: Any, cap: int) -> Any:
    """Flat indices of ``mask``'s true elements, every m-th so that at most ``cap`` remain."""
    idx = mask.reshape(-1).nonzero().squeeze(1)
    return idx[::max(1, math.ceil(idx.numel() / cap))]


def sampled_rows(y: Any, g: Any, max_elements: int, channels_first: bool = False,
                 dtypes: tuple[Any, ...] | None = None) -> tuple[Any, Any] | None:
    """Whole rows of output ``y`` and its gradient ``g`` (every k-th, about ``max_elements`` elements, at least
    ``MIN_ROWS`` rows) in double precision; None for a gradient of another precision than ``dtypes`` or
    mismatched shapes.

    A row is the last dimension, or with ``channels_first`` (outputs of three dimensions or more) dimension 1:
    ``cross_entropy`` on ``(N, C, d1, …)`` normalises over C, as a segmentation or a 1-D convolution's output
    has it. The positions are sampled before the classes are moved last, so a large map is never copied whole."""
    import torch

    if g.dtype not in (dtypes or (torch.float32, torch.float64)) or g.shape != y.shape or (channels_first
                                                                                           and y.dim() < 3):
        return None
    with torch.no_grad():
        if channels_first:
            k = y.shape[1]
            per_map = max(1, math.ceil(max(MIN_ROWS, max_elements // k) / y.shape[0]))
            stride = max(1, math.ceil(y[0, 0].numel() / per_map))
            pick = [t.detach().flatten(2)[:, :, ::stride].movedim(1, -1).reshape(-1, k) for t in (y, g)]
            return pick[0].double(), pick[1].double()
        k = y.shape[-1] if y.dim() > 1 else 1
        rows_y, rows_g = y.detach().reshape(-1, k), g.detach().reshape(-1, k)
        keep = max(MIN_ROWS, max_elements // k)
        stride = max(1, math.ceil(rows_y.shape[0] / keep))
        return rows_y[::stride].double(), rows_g[::stride].double()


def identity_hits(yd: Any, gd: Any, tol: float, max_elements: int) -> tuple[dict[str, int], int] | None:
    """(elements in each hypothesis's densest window, gradient elements looked at) for the sampled rows of an
    output and its gradient (``sampled_rows``); None when no gradient element is non-zero."""
    import torch

    with torch.no_grad():
        picks = [_every(gd > 0, max_elements), _every(gd < 0, max_elements)]
        live = ((yd > 0) & (gd != 0)).any(dim=1, keepdim=True)
        gated = int(_every((yd < 0) & (gd == 0) & live, max_elements).numel())
        n = sum(int(p.numel()) for p in picks)
        if n == 0:
            return None
        n += gated
        flat = yd.reshape(-1)
        positive = sum(int((flat[p] > 0).sum()) for p in picks)
        bounded = bool((yd >= 0).all() and (yd <= 1).all())
        hits = {}
        for name, ratio in HYPOTHESES.items():
            if (name in BOUNDED and not bounded) or (name in ROW_WISE and yd.shape[1] < 2):
                hits[name] = 0
                continue
            r = ratio(yd, gd).reshape(-1)
            own = sum(densest(r[p], tol) for p in picks)
            explains = name in GATED and positive > 0 and 2 * own >= positive
            hits[name] = own + (gated if explains else 0)
        return hits, n


def _best_share(got: tuple[dict[str, int], int]) -> float:
    """The share of the gradient elements the best hypothesis explains: which layout of the rows is the loss's."""
    hits, n = got
    return max(hits.values(), default=0) / max(n, 1)


class LossIdentity:
    """Accumulates the hits of a step's output gradients (several forwards pool) until the step is taken."""

    def __init__(self, tol: float, min_elements: int, max_elements: int, labels: LabelAgreement | None = None,
                 reach: OutputReach | None = None, tol_half: float | None = None) -> None:
        import torch

        self.min_elements, self.max_elements = min_elements, max_elements
        self.tols = {torch.float32: tol, torch.float64: tol}
        """The window per gradient precision: 16-bit gradients only where ``tol_half`` is known."""
        if tol_half is not None:
            self.tols.update({torch.bfloat16: tol_half, torch.float16: tol_half})
        self.dtypes = tuple(self.tols)
        self.readers = tuple(r for r in (labels, reach) if r is not None)
        """What else the sampled rows are read for, once the hits say which loss produced them."""
        self.hits: dict[str, int] = {}
        self.n = 0

    def observe(self, y: Any, g: Any) -> None:
        best: tuple[Any, Any, dict[str, int], int] | None = None
        tol = self.tols.get(g.dtype)
        if tol is None:
            return
        for channels_first in (False, True):  # an output of three dimensions or more: classes last, or at dim 1
            rows = sampled_rows(y, g, self.max_elements, channels_first, self.dtypes)
            if rows is None:
                continue
            got = identity_hits(rows[0], rows[1], tol, self.max_elements)
            if got is not None and (best is None or _best_share(got) > _best_share((best[2], best[3]))):
                best = (rows[0], rows[1], got[0], got[1])
        if best is None:
            return
        yd, gd, hits, n = best
        for reader in self.readers:
            reader.observe(yd, gd, hits, n)
        for name, h in hits.items():
            self.hits[name] = self.hits.get(name, 0) + h
        self.n += n

    def take(self) -> tuple[list[str], list[float]] | None:
        """(hypotheses, shares) of the step, or None below ``min_elements`` non-zero gradient elements; resets."""
        hits, n = self.hits, self.n
        self.hits, self.n = {}, 0
        if n < self.min_elements:
            return None
        names = sorted(hits)
        return names, [hits[h] / n for h in names]
