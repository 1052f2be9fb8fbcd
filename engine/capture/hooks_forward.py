"""What the forward pass shows directly: the model's input and output, each weight layer's signal, the layer order.

- **Model input** (every recorded step): mean, std and abs-max of the first floating-point tensor in the
  model's forward arguments, over the step's training forwards (``input_*``); on detail steps also
  ``input_feature_scale_ratio``, max over median of the per-feature std over the batch (features: last dim
  of a 2-D input, dim 1 of a 3-D or larger one; zero-std features skipped). For integer inputs (token ids)
  instead ``input_token_distinct_frac`` (every recorded step): among the first ``probe.token_distinct_max_ids``
  ids of the step's first training forward, the distinct ids other than the most frequent one (a padded batch's
  padding) over the ids that are not it; the token analogue of a batch's scale (a batch of one repeated id has
  none). run.json says what the input was.
- **Model output** (detail steps): std, min, max, exact-zero fraction and the fraction of rows (last dim)
  that are probability vectors (non-negative, summing to 1 within ``probe.simplex_tol``) of the first floating
  tensor of the output (``.logits`` of an HF-style output).
- **Output gradient** (detail steps): which loss produced the gradient at the output
  (``output_loss_identity``, entity = the hypothesis, value = the share of gradient elements it explains;
  see ``loss_identity``), from a hook on the output tensor that reads its gradient and returns nothing; where
  that loss is cross-entropy or BCE on logits or NLL of (log-)probabilities, the labels it used against the
  model's predictions (``output_label_kappa``, ``output_label_error_rank``; see ``label_agreement``); where it
  is a loss on continuous targets, whether the output can reach them (``output_bound_push``, ``output_gated_frac``; see
  ``output_reach``).
- **Weight layers** (detail steps, forward hooks): ``act_out_std`` of the output (the first tensor of a tuple
  output: LSTM, GRU, attention); ``act_in_dead_frac``, the fraction of input features (Linear: last dim;
  ConvNd: the channel dim) exactly zero for every sample; ``act_in_sat_frac`` when the whole input lies in
  [-1, 1] with fewer exact zeros than ``probe.bounded_max_zero_frac`` (a sigmoid/tanh output, not a ReLU): the
  share within ``probe.bounded_sat_band`` of the bounds (±1 when it has negative values, else 0 and 1), and
  ``act_in_slope``, the mean slope of the activation that made it (1 - y² with negative values, else y(1 - y)),
  from the same moments. These see activations applied functionally (``F.relu``, ``torch.sigmoid``) that hooks
  on activation modules miss.
- **Forward order**: the layer entities in the order their forward first ran (until the first optimizer step).
  Over the same forwards, which bounded activation modules feed a weight layer: their output tensor (or a view
  of it) is a weight layer's input, directly or through modules that only drop, pool or reshape it
  (``PASS_THROUGH``). Those are hidden units (run.json ``probe.hidden_bounded``); a bounded module whose output
  only ever multiplies another tensor (a squeeze-excitation or GLU gate, an LSTM cell's gates) is a gate
  (``probe.gates``): it switches a signal that flows past it, and its slope and saturation say nothing about
  the network's hidden activations.

Only forwards with autograd enabled count (evaluation under ``no_grad`` is not the training's signal); values
accumulate over the forwards of a step (micro-batches, a GAN's real and fake passes). The hooks read their
tensors under ``no_grad`` and never write them; every sum is in float64 (the native kernel on CPU tensors).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from debugtune.engine.capture.hooks_activations import activation_modules
from debugtune.engine.capture.label_agreement import KEYS as LABEL_KEYS
from debugtune.engine.capture.label_agreement import MIN_ROWS_KEY, SHARE_KEY, LabelAgreement
from debugtune.engine.capture.loss_identity import HALF_KEY, MAX_KEY, MIN_KEY, TOL_KEY, LossIdentity
from debugtune.engine.capture.loss_identity import KEYS as IDENTITY_KEYS
from debugtune.engine.capture.output_reach import KEYS as REACH_KEYS
from debugtune.engine.capture.output_reach import OutputReach
from debugtune.engine.capture.probe_errors import ProbeErrors
from debugtune.engine.capture.probe_measure import StepRows, start_stats
from debugtune.native import STAT_FIELDS

BAND_KEY = "probe.bounded_sat_band"
ZERO_KEY = "probe.bounded_max_zero_frac"
SIMPLEX_KEY = "probe.simplex_tol"
TOKENS_KEY = "probe.token_distinct_max_ids"
_COL = {name: i for i, name in enumerate(STAT_FIELDS)}


def first_float(value: Any, *, min_dim: int = 0) -> Any:
    """The first floating-point tensor in a value: itself, ``.logits``, or the first one in a tuple/list/dict;
    with ``min_dim`` 1, scalars are passed over (a model input is never one: the HF Trainer passes the batch's
    token count ``num_items_in_batch`` beside ``input_ids``)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() and value.dim() >= min_dim else None
    logits = getattr(value, "logits", None)
    if isinstance(logits, torch.Tensor) and logits.is_floating_point():
        return logits
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, tuple | list) else ()
    for item in items:
        found = first_float(item, min_dim=min_dim)
        if found is not None:
            return found
    return None


def first_tensor(value: Any) -> Any:
    """The first tensor of any dtype (to say what a non-floating input was)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, tuple | list) else ()
    return next((t for t in (first_tensor(i) for i in items) if t is not None), None)


def _row(t: Any, eps: float = 0.0, large: float = math.inf) -> np.ndarray:
    values, _ = start_stats([t], eps, large, background=False).finish()
    row: np.ndarray = values[0]
    return row


@dataclass
class Moments:
    """Count, sum, sum of squares, min, max, exact zeros of values seen in a step."""

    n: float = 0.0
    s: float = 0.0
    ss: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf
    zeros: float = 0.0
    absmax: float = 0.0

    def add(self, row: np.ndarray) -> None:
        self.n += row[_COL["numel"]]
        self.s += row[_COL["sum"]]
        self.ss += row[_COL["sumsq"]]
        self.zeros += row[_COL["zeros"]]
        if row[_COL["numel"]] > 0 and not math.isnan(row[_COL["min"]]):
            self.lo = min(self.lo, row[_COL["min"]])
            self.hi = max(self.hi, row[_COL["max"]])
            self.absmax = max(self.absmax, row[_COL["absmax"]])

    @property
    def mean(self) -> float:
        return self.s / self.n

    @property
    def std(self) -> float:
        return math.sqrt(max(self.ss / self.n - self.mean ** 2, 0.0))


def feature_scale_ratio(x: Any) -> float | None:
    """Max over median of the per-feature std over the batch (None for 1-D inputs or < 1 varying feature)."""
    import torch

    if x.dim() < 2:
        return None
    with torch.no_grad():
        dims = (0,) if x.dim() == 2 else tuple(d for d in range(x.dim()) if d != 1)
        xd = x.detach().double()  # sums of x and x^2 in float64: ten times faster than torch.std over dim 0
        n = x.numel() / x.shape[-1 if x.dim() == 2 else 1]
        mean = xd.sum(dim=dims) / n
        var = ((xd * xd).sum(dim=dims) / n - mean * mean).clamp_min(0)
        std = var.sqrt().cpu().numpy()
    std = std[np.isfinite(std) & (std > 0)]
    return float(std.max() / np.median(std)) if len(std) else None


def distinct_share(t: Any, cap: int) -> float | None:
    """Among the first ``cap`` values of integer tensor ``t``, the distinct values other than the most frequent
    one over the number of values that are not it (0 when every value is the same; None below two values).
    Leaving the most frequent id out keeps a padded batch's padding from counting as a lack of diversity."""
    import torch

    with torch.no_grad():
        flat = t.detach().reshape(-1)[:cap]
        if flat.numel() < 2:
            return None
        values, counts = torch.unique(flat, return_counts=True)
        rest = flat.numel() - int(counts.max())
        return (values.numel() - 1) / rest if rest else 0.0


def simplex_rows(x: Any, tol: float) -> tuple[int, int]:
    """(rows along the last dim that are probability vectors, rows)."""
    import torch

    with torch.no_grad():
        rows = x.detach().reshape(-1, x.shape[-1]) if x.dim() else x.detach().reshape(1, 1)
        ok = (rows >= 0).all(dim=1) & ((rows.sum(dim=1, dtype=torch.float64) - 1).abs() <= tol)
        return int(ok.sum()), int(rows.shape[0])


@dataclass
class LayerSignal:
    """One weight layer's forward signal accumulated over a detail step."""

    feature_dim: Callable[[Any], int]
    out: Moments = field(default_factory=Moments)
    inp: Moments = field(default_factory=Moments)
    near: float = 0.0  # |x| >= 1 - band
    low: float = 0.0  # |x| < band
    alive: Any = None  # per input feature: nonzero for some sample

    def reset(self) -> None:
        self.out, self.inp, self.near, self.low, self.alive = Moments(), Moments(), 0.0, 0.0, None


def _feature_dim(is_conv: bool, kernel_dims: int) -> Callable[[Any], int]:
    if not is_conv:
        return lambda x: x.dim() - 1
    return lambda x: 1 if x.dim() == kernel_dims + 2 else 0


PASS_THROUGH = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "Identity",
                "Flatten", "Unflatten", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d",
                "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d",
                "AdaptiveMaxPool2d", "AdaptiveMaxPool3d")
"""Modules that pass an activation's output on to the next weight layer without mixing in another tensor."""


def _storage(x: Any) -> int | None:
    """The data pointer of a tensor's storage (shared by its views), or None for an empty or odd tensor."""
    try:
        return int(x.untyped_storage().data_ptr()) if x is not None and x.numel() else None
    except (RuntimeError, AttributeError, TypeError):
        return None


class ForwardEvidence:
    """Forward hooks on the model and its weight layers (see the module docstring)."""

    def __init__(self, model: Any, layers: list[tuple[str, Any]], order: list[tuple[str, Any]],
                 thresholds: Mapping[str, float], errors: ProbeErrors, disabled: dict[str, str],
                 clock: Callable[[], tuple[int, bool, bool]]) -> None:
        import torch

        self._torch = torch
        self.model = model
        self.errors = errors
        self.clock = clock
        self.band = thresholds.get(BAND_KEY)
        self.max_zero = thresholds.get(ZERO_KEY)
        self.simplex_tol = thresholds.get(SIMPLEX_KEY)
        self.token_cap = thresholds.get(TOKENS_KEY)
        for key, what in ((BAND_KEY, "act_in_sat_frac"), (ZERO_KEY, "act_in_sat_frac"),
                          (SIMPLEX_KEY, "output_simplex_frac"), (TOKENS_KEY, "input_token_distinct_frac")):
            if thresholds.get(key) is None:
                disabled[what] = f"no threshold {key!r}"
        self.identity: LossIdentity | None = None
        missing = [k for k in IDENTITY_KEYS if thresholds.get(k) is None]
        if missing:
            disabled["output_loss_identity"] = f"no threshold {missing[0]!r}"
        else:
            labels = None
            absent = [k for k in LABEL_KEYS if thresholds.get(k) is None]
            if absent:
                disabled["output_label_kappa"] = f"no threshold {absent[0]!r}"
            else:
                labels = LabelAgreement(float(thresholds[SHARE_KEY]), int(thresholds[MIN_ROWS_KEY]))
            reach = None
            absent = [k for k in REACH_KEYS if thresholds.get(k) is None]
            if absent:
                disabled["output_bound_push"] = f"no threshold {absent[0]!r}"
            else:
                reach = OutputReach(*(float(thresholds[k]) for k in REACH_KEYS))
            half = thresholds.get(HALF_KEY)
            self.identity = LossIdentity(float(thresholds[TOL_KEY]), int(thresholds[MIN_KEY]),
                                         int(thresholds[MAX_KEY]), labels, reach,
                                         None if half is None else float(half))
        conv = torch.nn.modules.conv._ConvNd
        self.layers = {name: LayerSignal(_feature_dim(isinstance(m, conv), len(getattr(m, "kernel_size", ()))))
                       for name, m in layers}
        self._layer_modules = layers
        self._order_modules = order
        self._bounded_modules = activation_modules(model, bounded_only=True)
        kinds = tuple(getattr(torch.nn, k) for k in PASS_THROUGH if hasattr(torch.nn, k))
        self._pass_modules = [(n, m) for n, m in model.named_modules() if isinstance(m, kinds)]
        self._marks: dict[int, tuple[str, Any]] = {}  # storage → (bounded module, weakref to its output)
        self.feeds: set[str] = set()  # bounded modules whose output reached a weight layer's input
        self.order: list[str] = []
        self.sequence: list[tuple[bool, str]] = []   # (is a weight layer, name) in first-call order
        self._order_handles: list[Any] = []
        self.input = Moments()
        self.input_ratio: float | None = None
        self.token_share: float | None = None
        self.input_kind: dict[str, Any] = {"floating": None, "dtype": None, "shape": None}
        self.output = Moments()
        self.simplex = [0, 0]
        self.raw = [0, 0]  # forwards whose output is the last weight layer's own tensor, forwards seen
        self._last_layer: tuple[int, int] | None = None  # (storage, version) of the last weight layer's output

    def install(self, handles: list[Any]) -> None:
        """Register the hooks (appended to ``handles``, which the probe removes at close)."""
        handles.append(self.model.register_forward_pre_hook(self._on_input, with_kwargs=True))
        handles.append(self.model.register_forward_hook(self._on_output))
        for name, module in self._layer_modules:
            handles.append(module.register_forward_hook(partial(self._on_layer, self.layers[name])))
        for name, module in self._order_modules:
            h = module.register_forward_pre_hook(partial(self._on_order, name))
            handles.append(h)
            self._order_handles.append(h)
        for name, module in self._bounded_modules:
            for h in (module.register_forward_pre_hook(partial(self._on_bounded, name)),
                      module.register_forward_hook(partial(self._on_bounded_out, name))):
                handles.append(h)
                self._order_handles.append(h)
        for _name, module in self._pass_modules:
            h = module.register_forward_hook(self._on_pass)
            handles.append(h)
            self._order_handles.append(h)

    def stop_order(self) -> None:
        """The first optimizer step is done: the order is known, its hooks go."""
        for h in self._order_handles:
            h.remove()
        self._order_handles.clear()
        self._marks.clear()

    # -- hooks -------------------------------------------------------------------------------------
    def training(self) -> tuple[bool, bool]:
        """(recording, detail) for a forward now: both False under ``no_grad``."""
        if not self._torch.is_grad_enabled():
            return False, False
        _, recording, detail = self.clock()
        return recording, detail and recording

    def _on_order(self, name: str, module: Any, args: Any) -> None:
        if name not in self.order:
            self.order.append(name)
            self.sequence.append((True, name))
        try:
            mark = self._mark_of(first_float(args))
            if mark is not None:
                self.feeds.add(mark)
        except Exception as exc:  # noqa: BLE001 — the probe must never raise into the training loop
            self.errors.add("order_hook", exc)

    def _on_bounded(self, name: str, module: Any, args: Any) -> None:
        if (False, name) not in self.sequence:
            self.sequence.append((False, name))

    def _mark_of(self, x: Any) -> str | None:
        """The bounded module whose output ``x`` is (or is a view of), while that output is still alive."""
        mark = self._marks.get(_storage(x) or 0)
        return mark[0] if mark is not None and mark[1]() is not None else None

    def _remember(self, name: str, y: Any) -> None:
        ptr = _storage(y)
        if ptr is not None:
            self._marks[ptr] = (name, weakref.ref(y))

    def _on_bounded_out(self, name: str, module: Any, args: Any, output: Any) -> None:
        try:
            self._remember(name, first_float(output))
        except Exception as exc:  # noqa: BLE001
            self.errors.add("order_hook", exc)

    def _on_pass(self, module: Any, args: Any, output: Any) -> None:
        """A dropout, pooling or reshaping module passes a bounded output's mark on to its own output."""
        try:
            mark = self._mark_of(first_float(args))
            if mark is not None:
                self._remember(mark, first_float(output))
        except Exception as exc:  # noqa: BLE001
            self.errors.add("order_hook", exc)

    def hidden_bounded(self) -> list[str]:
        """Bounded activations (sigmoid, tanh …) whose output a weight layer takes as its input: hidden units, not
        the model's squashed output nor a gate."""
        return [name for layer, name in self.sequence if not layer and name in self.feeds]

    def gates(self) -> list[str]:
        """Bounded activations that a weight layer follows in the forward pass but whose output no weight layer
        takes: gates that multiply another signal (squeeze-excitation, GLU, hand-written LSTM cells)."""
        last = max((i for i, (layer, _) in enumerate(self.sequence) if layer), default=-1)
        return [name for i, (layer, name) in enumerate(self.sequence)
                if not layer and i < last and name not in self.feeds]

    def _on_input(self, module: Any, args: Any, kwargs: Any) -> None:
        try:
            recording, detail = self.training()
            if not recording:
                return
            self._last_layer = None
            x = first_float((args, kwargs), min_dim=1)
            if x is None:
                t = first_tensor((args, kwargs))
                self.input_kind = {"floating": False, "dtype": None if t is None else str(t.dtype),
                                   "shape": None if t is None else list(t.shape)}
                if (t is not None and self.token_cap is not None and self.token_share is None
                        and not t.dtype.is_complex and t.dtype != self._torch.bool):
                    self.token_share = distinct_share(t, int(self.token_cap))
                return
            self.input_kind = {"floating": True, "dtype": str(x.dtype), "shape": list(x.shape)}
            self.input.add(_row(x))
            if detail and self.input_ratio is None:
                self.input_ratio = feature_scale_ratio(x)
        except Exception as exc:  # noqa: BLE001 — the probe must never raise into the training loop
            self.errors.add("input_hook", exc)

    def _on_output(self, module: Any, args: Any, output: Any) -> None:
        try:
            if not self.training()[1]:
                return
            y = first_float(output)
            if y is None:
                return
            self.output.add(_row(y))
            self.raw[1] += 1
            if self._last_layer is not None and self._last_layer == (_storage(y), y._version):
                self.raw[0] += 1
            if self.simplex_tol is not None and y.numel():
                hit, rows = simplex_rows(y, self.simplex_tol)
                self.simplex[0] += hit
                self.simplex[1] += rows
            if self.identity is not None and y.requires_grad and y.dtype in self.identity.tols:
                y.register_hook(partial(self._on_output_grad, y.detach()))
        except Exception as exc:  # noqa: BLE001
            self.errors.add("output_hook", exc)

    def _on_output_grad(self, y: Any, grad: Any) -> None:
        """Reads the output's gradient; returning None leaves the gradient the training uses as it was."""
        try:
            if self.identity is not None:
                self.identity.observe(y, grad)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("output_grad_hook", exc)

    def _on_layer(self, sig: LayerSignal, module: Any, args: Any, output: Any) -> None:
        try:
            if not self.training()[1]:
                return
            torch = self._torch
            y = first_float(output)
            if y is not None:
                sig.out.add(_row(y))
                ptr = _storage(y)  # and its version: an in-place activation after the layer bumps it
                self._last_layer = (ptr, y._version) if ptr is not None else None
            x = first_float(args)
            if x is None or x.dim() == 0:
                return
            band = self.band if self.band is not None else 0.0
            row = _row(x, band, 1.0 - band)
            sig.inp.add(row)
            sig.low += row[_COL["tiny"]]
            sig.near += row[_COL["large"]]
            with torch.no_grad():
                fdim = sig.feature_dim(x)
                dims = tuple(d for d in range(x.dim()) if d != fdim)
                alive = (x.detach() != 0).any(dim=dims) if dims else x.detach() != 0
            if sig.alive is None or sig.alive.shape != alive.shape:
                sig.alive = alive
            else:
                sig.alive = sig.alive | alive
        except Exception as exc:  # noqa: BLE001
            self.errors.add("layer_hook", exc)

    # -- rows ----------------------------------------------------------------------------------------
    def take(self, rows: StepRows) -> None:
        """Add what the step's forwards showed to ``rows`` and reset for the next step."""
        inp = self.input
        if inp.n > 0:
            rows.add("convergence", "input_mean", ("",), inp.mean)
            rows.add("convergence", "input_std", ("",), inp.std)
            rows.add("convergence", "input_absmax", ("",), inp.absmax)
        if self.input_ratio is not None:
            rows.add("convergence", "input_feature_scale_ratio", ("",), self.input_ratio)
        if self.token_share is not None:
            rows.add("convergence", "input_token_distinct_frac", ("",), self.token_share)
        out = self.output
        if out.n > 0:
            rows.add("convergence", "output_std", ("",), out.std)
            rows.add("convergence", "output_min", ("",), out.lo)
            rows.add("convergence", "output_max", ("",), out.hi)
            rows.add("convergence", "output_zero_frac", ("",), out.zeros / out.n)
        if self.simplex[1]:
            rows.add("convergence", "output_simplex_frac", ("",), self.simplex[0] / self.simplex[1])
        if self.raw[1]:
            rows.add("convergence", "output_from_layer_frac", ("",), self.raw[0] / self.raw[1])
        identity = self.identity.take() if self.identity is not None else None
        if identity is not None:
            rows.add("convergence", "output_loss_identity", identity[0], identity[1])
        for reader in self.identity.readers if self.identity is not None else ():
            for metric, value in (reader.take() or {}).items():
                rows.add("convergence", metric, ("",), value)
        self.input, self.input_ratio, self.token_share = Moments(), None, None
        self.output, self.simplex, self.raw = Moments(), [0, 0], [0, 0]
        self._take_layers(rows)

    def _take_layers(self, rows: StepRows) -> None:
        got: dict[str, tuple[list[str], list[float]]] = {m: ([], []) for m in
                                                         ("act_out_std", "act_in_dead_frac", "act_in_sat_frac",
                                                          "act_in_slope")}

        def put(metric: str, name: str, value: float | None) -> None:
            if value is not None:
                got[metric][0].append(name)
                got[metric][1].append(value)

        for name, sig in self.layers.items():
            if sig.out.n:
                put("act_out_std", name, sig.out.std)
            if sig.alive is not None and sig.alive.numel():
                put("act_in_dead_frac", name, 1.0 - float(sig.alive.double().mean()))
            put("act_in_sat_frac", name, self._saturation(sig))
            put("act_in_slope", name, self._slope(sig))
            sig.reset()
        for metric, (names, values) in got.items():
            if names:
                rows.add("gradient", metric, names, values)

    def _bounded(self, inp: Moments) -> bool:
        """Whether a layer's input looks like a sigmoid's or tanh's output: all within [-1, 1], few exact zeros."""
        if self.band is None or self.max_zero is None or inp.n == 0:
            return False
        return not (inp.lo < -1.0 or inp.hi > 1.0 or inp.zeros / inp.n >= self.max_zero)

    def _saturation(self, sig: LayerSignal) -> float | None:
        inp = sig.inp
        if not self._bounded(inp):
            return None
        near = sig.near if inp.lo < 0 else sig.near + sig.low
        return near / inp.n

    def _slope(self, sig: LayerSignal) -> float | None:
        """The mean slope of the activation that made a bounded input, from its moments alone: a tanh's 1 - y²
        where the input has negative values, else a sigmoid's y(1 - y) (as ``act_slope`` reads at modules)."""
        inp = sig.inp
        if not self._bounded(inp):
            return None
        mean_sq = inp.ss / inp.n
        return max(1.0 - mean_sq if inp.lo < 0 else inp.s / inp.n - mean_sq, 0.0)

    def report(self) -> dict[str, Any]:
        return {"input": dict(self.input_kind), "forward_order": list(self.order),
                "weight_layers": len(self.layers), "hidden_bounded": self.hidden_bounded(), "gates": self.gates()}
