"""Trainable parameters the attached optimizer does not hold: ``in_optimizer`` and their updates.

A parameter that requires grad but is in no ``param_group`` of the attached optimizer is either left out by
mistake (it never changes: a frozen layer that was meant to train) or updated by another optimizer (a GAN's
generator and discriminator have one each). ``in_optimizer`` (step 0, per layer with trainable parameters) is
1 when all of them are in the attached optimizer, else 0; run.json lists the names. On detail steps those
parameters are copied at the optimizer's step pre-hook and compared at the next one, a whole iteration later,
so a change made by any other optimizer in between shows in ``update_norm`` / ``update_ratio`` /
``weight_norm`` of layers whose trainable parameters are all outside (0 when nothing changes them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from debugtune.engine.capture.probe_layout import ParamLayout
from debugtune.engine.capture.probe_measure import Snapshots, StepRows, start_updates, write_updates
from debugtune.engine.telemetry import TelemetryWriter


class OutsideOptimizer:
    """The trainable parameters outside the attached optimizer and the detail-step measurement of their change."""

    def __init__(self, layout: ParamLayout) -> None:
        inside = set(layout.optimized)
        self.layout = layout
        self.positions = [i for i in layout.trainable if i not in inside]
        trainable = np.zeros(len(layout.layer_names), dtype=bool)
        trainable[layout.layer_of[layout.trainable]] = True
        out = np.zeros(len(layout.layer_names), dtype=bool)
        out[layout.layer_of[self.positions]] = True
        inside_any = np.zeros(len(layout.layer_names), dtype=bool)
        inside_any[layout.layer_of[[i for i in layout.trainable if i in inside]]] = True
        self._trainable = trainable
        self._out = out
        self.layers = np.flatnonzero(out & ~inside_any)  # layers measured here (wholly outside)
        self._snaps = Snapshots()

    @property
    def names(self) -> list[str]:
        return [self.layout.names[i] for i in self.positions]

    def membership(self, rows: StepRows) -> None:
        """``in_optimizer`` of every layer with trainable parameters."""
        ids = np.flatnonzero(self._trainable)
        if len(ids):
            rows.add("gradient", "in_optimizer", self.layout.layer_names[ids], (~self._out[ids]).astype(float))

    def take(self, step: int) -> None:
        """Copy the wholly-outside layers' parameters (a detail step's pre-hook)."""
        if len(self.layers):
            keep = set(self.layers.tolist())
            self._snaps.take(self.layout, step, [i for i in self.positions if self.layout.layer_of[i] in keep])

    def finish(self, writer: TelemetryWriter) -> None:
        """Measure the change since ``take`` (the next pre-hook, or close) and write it at the snapshot's step."""
        if self._snaps.step is None:
            return
        job = start_updates(self.layout, self._snaps, self.positions)
        write_updates(job, self.layout, writer, layers=self.layers)

    @property
    def pending(self) -> bool:
        return self._snaps.step is not None

    def report(self) -> dict[str, Any]:
        return {"not_in_optimizer": len(self.positions), "not_in_optimizer_names": self.names[:100]}
