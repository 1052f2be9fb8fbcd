"""Gradients that were never cleared (``grad_stale_frac``): the signature of a missing ``zero_grad()``.

A parameter's gradient is *stale* at an optimizer step when it received a gradient since the previous step
but nothing cleared it in between: its ``.grad`` at every backward of the iteration was still the tensor
the previous step left (same object, same ``_version``) or what the last accumulation made of it. Clearing
is either ``zero_grad(set_to_none=True)`` (``.grad`` becomes None) or ``zero_grad(set_to_none=False)``
(``grad.zero_()`` bumps the version counter).

Mechanism, O(1) per parameter and no tensor read: a tensor hook (``param.register_hook``, which runs before
the incoming gradient is accumulated) compares ``.grad`` with the (weak reference, version) noted after the
previous optimizer step or the previous accumulation (``register_post_accumulate_grad_hook``); any
difference means it was cleared. So legitimate gradient accumulation (k backwards, then step, then
``zero_grad``), a GAN's two backward passes before one step, a generator's backward through the
discriminator after the discriminator's step (cleared before the discriminator's next backward), and a step
skipped by GradScaler all read 0; never zeroing reads 1; zeroing every 10th step reads 0.9 on average; and
parameters left out of the optimizer while ``optimizer.zero_grad()`` is called read 1 on those alone
(``zero_grad`` clears only the optimizer's parameters).
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any

import numpy as np

from debugtune.engine.capture.probe_errors import ProbeErrors


class StaleTracker:
    """Per parameter position: was its gradient cleared since the last optimizer step?"""

    def __init__(self, params: list[Any], positions: list[int], errors: ProbeErrors) -> None:
        self.params = params
        self.positions = list(positions)
        self.errors = errors
        self.seen: dict[int, tuple[Any, int] | None] = {}
        self.received: set[int] = set()
        self.cleared: set[int] = set()
        self.snapshot()

    def install(self, handles: list[Any]) -> None:
        for i in self.positions:
            p = self.params[i]
            handles.append(p.register_hook(partial(self._before_accumulate, i)))
            handles.append(p.register_post_accumulate_grad_hook(partial(self._after_accumulate, i)))

    @staticmethod
    def _state(grad: Any) -> tuple[Any, int] | None:
        return None if grad is None else (weakref.ref(grad), grad._version)

    def _before_accumulate(self, i: int, incoming: Any) -> None:
        try:
            if i in self.cleared:
                return
            self.received.add(i)
            grad = self.params[i].grad
            seen = self.seen.get(i)
            if grad is None or seen is None or seen[0]() is not grad or seen[1] != grad._version:
                self.cleared.add(i)
        except Exception as exc:  # noqa: BLE001 — the probe must never raise into the training loop
            self.errors.add("stale_hook", exc)

    def _after_accumulate(self, i: int, param: Any) -> None:
        try:
            self.seen[i] = self._state(param.grad)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("stale_hook", exc)

    def stale(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions that received a gradient since the last step, 1.0 where it was not cleared, else 0.0)."""
        got = np.array(sorted(self.received), dtype=np.int64)
        return got, np.array([0.0 if i in self.cleared else 1.0 for i in got.tolist()])

    def snapshot(self) -> None:
        """After an optimizer step: note every gradient as the step left it and start a new iteration."""
        params = self.params
        self.seen = {i: self._state(params[i].grad) for i in self.positions}
        self.received.clear()
        self.cleared.clear()
