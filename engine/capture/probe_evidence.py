"""The probe's direct evidence: measurements that tell causes apart rather than the symptoms they share.

One object the probe calls at attach, at each optimizer step's pre- and post-hook, at ``watch_router`` and
at close; it owns the pieces (each in its own module, see there for what and why):

- ``probe_layers``: weight layers, ``init_weight_std`` / ``init_gain`` / ``init_norm_gain`` at attach, run.json
  ``layer_kinds`` and ``mode_dependent`` (dropout, batch norm);
- ``hooks_forward``: model input (every recorded step) and output, weight-layer signal and forward order;
- ``grad_cosine``: ``grad_cos_prev`` (every recorded step);
- ``hooks_stale``: ``grad_stale_frac`` (every recorded step);
- ``probe_outside``: ``in_optimizer`` (step 0) and updates of parameters outside the optimizer (detail steps);
- ``router_evidence``: a watched router's bias and weight (at watch) and logit spread (detail steps).

Every part counts its errors instead of raising and changes nothing it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from debugtune.engine.capture.grad_cosine import GradCosine
from debugtune.engine.capture.hooks_forward import SIMPLEX_KEY, ForwardEvidence
from debugtune.engine.capture.hooks_stale import StaleTracker
from debugtune.engine.capture.probe_errors import ProbeErrors
from debugtune.engine.capture.probe_layers import init_rows, layer_kinds, mode_dependent, norm_gains, weight_layers
from debugtune.engine.capture.probe_layout import ParamLayout
from debugtune.engine.capture.probe_measure import StepRows
from debugtune.engine.capture.probe_outside import OutsideOptimizer
from debugtune.engine.capture.router_evidence import RouterLogits, router_parameters
from debugtune.engine.telemetry import TelemetryWriter


class Evidence:
    """Direct-evidence measurements of one probe (see the module docstring)."""

    def __init__(self, model: Any, layout: ParamLayout, writer: TelemetryWriter, errors: ProbeErrors,
                 disabled: dict[str, str], thresholds: Mapping[str, float],
                 clock: Callable[[], tuple[int, bool, bool]], updates: bool) -> None:
        self.layout = layout
        self.writer = writer
        self.errors = errors
        self.updates = updates
        self.simplex_tol = thresholds.get(SIMPLEX_KEY)
        modules = dict(model.named_modules())
        layers = weight_layers(model)
        order = [(str(n), modules[str(n)]) for n in layout.layer_names if str(n) in modules and str(n)]
        self.forward = ForwardEvidence(model, layers, order, thresholds, errors, disabled, clock)
        self.stale = StaleTracker(layout.params, layout.trainable, errors)
        self.cosine = GradCosine(layout)
        self.outside = OutsideOptimizer(layout)
        self.kinds = layer_kinds(model, layout.layer_names)
        self.mode_dependent = self._guard("mode_dependent", mode_dependent, model)
        self._layers = layers
        self._model = model
        self._routers: list[RouterLogits] = []
        self._ordered = False

    def install(self, handles: list[Any]) -> None:
        """Register the hooks into ``handles`` (the probe removes them) and write the attach-time rows. A module
        that refuses a hook (a scripted one) loses that measurement, not the attach."""
        self._guard("install", self.forward.install, handles)
        self._guard("install", self.stale.install, handles)
        self._guard("init", self._attach_rows)

    def _guard(self, where: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 — the probe must never raise into the training loop
            self.errors.add(f"evidence_{where}", exc)
            return None

    def _attach_rows(self) -> None:
        rows = StepRows()
        names, stds, gains = init_rows(self._layers)
        if names:
            rows.add("gradient", "init_weight_std", names, stds)
            rows.add("gradient", "init_gain", names, gains)
        norms, norm_gain = norm_gains(self._model)
        if norms:
            rows.add("gradient", "init_norm_gain", norms, norm_gain)
        self.outside.membership(rows)
        rows.write(self.writer, 0)

    # -- optimizer steps ---------------------------------------------------------------------------
    def before_step(self, step: int, recording: bool, detail: bool) -> None:
        """The optimizer is about to step: gradients are final for this step."""
        if self.outside.pending:
            self._guard("outside", self.outside.finish, self.writer)
        if recording:
            self._guard("gradients", self._gradient_rows, step)
        if detail and self.updates:
            self._guard("outside", self.outside.take, step)

    def _gradient_rows(self, step: int) -> None:
        import torch

        rows = StepRows()
        lay = self.layout
        positions, stale = self.stale.stale()
        if len(positions):
            for group, names in ((lay.layer_of[positions], lay.layer_names),
                                 (lay.expert_of[positions], lay.expert_names)):
                keep = group >= 0
                if keep.any():
                    counts = np.bincount(group[keep], minlength=len(names))
                    sums = np.bincount(group[keep], weights=stale[keep], minlength=len(names))
                    has = counts > 0
                    rows.add("gradient", "grad_stale_frac", names[has], sums[has] / counts[has])
            rows.add("gradient", "grad_stale_frac", ("",), float(stale.mean()))
        grads = {}
        for i in lay.trainable:
            g = lay.params[i].grad
            if g is not None and g.layout == torch.strided and g.is_floating_point():
                grads[i] = g
        for metric, entities, values in self.cosine.measure(grads):
            rows.add("gradient", metric, entities, values)
        rows.write(self.writer, step)

    def after_step(self, step: int) -> None:
        """The optimizer stepped: note the gradients it left, write what the step's forwards showed."""
        self._guard("stale", self.stale.snapshot)
        self._guard("forward", self._forward_rows, step)
        if not self._ordered:
            self._ordered = True
            self._guard("forward", self.forward.stop_order)

    def _forward_rows(self, step: int) -> None:
        rows = StepRows()
        self.forward.take(rows)
        for r in self._routers:
            spread = r.take()
            if spread is not None:
                rows.add("convergence", "router_logit_spread", (r.name,), spread)
        rows.write(self.writer, step)

    def close(self, step: int) -> None:
        """Finish what is pending (the last detail step's outside updates, forwards after the last step)."""
        if self.outside.pending:
            self._guard("outside", self.outside.finish, self.writer)
        self._guard("forward", self._forward_rows, step)

    # -- routers -----------------------------------------------------------------------------------
    def watch_router(self, name: str, module: Any, num_experts: int, handles: list[Any], step: int) -> None:
        """The router's parameters now (at ``step``) and a hook for its logits on detail steps."""
        static = self._guard("router", router_parameters, module, num_experts) or {}
        rows = StepRows()
        for metric, value in static.items():
            rows.add("convergence", metric, (name,), value)
        rows.write(self.writer, step)
        if self.simplex_tol is None:
            return
        logits = RouterLogits(name, num_experts)
        self._routers.append(logits)
        handles.append(module.register_forward_hook(partial(self._on_router, logits)))

    def _on_router(self, logits: RouterLogits, module: Any, inputs: Any, output: Any) -> None:
        try:
            if self.forward.training()[1] and self.simplex_tol is not None:  # hooked only with it
                logits.observe(output, self.simplex_tol)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("router_logit_hook", exc)

    # -- run.json ----------------------------------------------------------------------------------
    @property
    def order(self) -> list[str]:
        """Layer entities in the order their forward first ran."""
        return list(self.forward.order)

    def report(self) -> dict[str, Any]:
        return {"layer_kinds": dict(self.kinds), **self.forward.report(),
                **({"mode_dependent": self.mode_dependent} if self.mode_dependent is not None else {})}

