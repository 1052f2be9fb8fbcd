"""Timing of ``torch.distributed`` collectives while the probe is attached.

The Python entry points (``all_reduce``, ``all_gather``, ``all_gather_into_tensor``, ``reduce_scatter``,
``reduce_scatter_tensor``, ``all_to_all``, ``all_to_all_single``, ``broadcast``) are wrapped in
``torch.distributed`` and ``torch.distributed.distributed_c10d`` and restored on ``uninstall``. The time
is the host wall time of the call: the whole collective for a synchronous call on a CPU backend (gloo),
the enqueue time for an asynchronous call or a device backend (NCCL/HCCL). Bytes follow nccl-tests'
size S: the per-rank buffer for all-reduce, broadcast and all-to-all, the whole gathered / scattered
array for all-gather and reduce-scatter. Collectives issued from C++ (DDP's bucketed all-reduce) do not
pass through these functions; import a profiler trace for those.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from debugtune.engine.capture.importers.collectives import normalize_kind
from debugtune.engine.capture.probe_errors import ProbeErrors


def _nbytes(t: Any) -> int:
    return int(t.numel()) * int(t.element_size())


def _sum_bytes(ts: Any) -> int:
    return sum(_nbytes(t) for t in ts)


#: bytes of a call from its (args, kwargs)
SizeOf = Callable[[tuple[Any, ...], dict[str, Any]], int]
# Function name → bytes of the call from its (args, kwargs).
_SIZE: dict[str, SizeOf] = {
    "all_reduce": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "broadcast": lambda a, k: _nbytes(a[0] if a else k["tensor"]),
    "all_gather": lambda a, k: _sum_bytes(a[0] if a else k["tensor_list"]),
    "all_gather_into_tensor": lambda a, k: _nbytes(a[0] if a else k["output_tensor"]),
    "reduce_scatter": lambda a, k: _sum_bytes(a[1] if len(a) > 1 else k["input_list"]),
    "reduce_scatter_tensor": lambda a, k: _nbytes(a[1] if len(a) > 1 else k["input"]),
    "all_to_all": lambda a, k: _sum_bytes(a[1] if len(a) > 1 else k["input_tensor_list"]),
    "all_to_all_single": lambda a, k: _nbytes(a[1] if len(a) > 1 else k["input"]),
}


class CollectiveTimer:
    """Wraps the collectives while installed; ``take()`` returns and resets {kind: [ms, bytes, calls]}."""

    def __init__(self, errors: ProbeErrors) -> None:
        self.errors = errors
        self.totals: dict[str, list[float]] = {}
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        for name, size in _SIZE.items():
            original = getattr(c10d, name, None)
            if original is None:
                continue
            wrapper = self._wrap(original, normalize_kind(name), size)
            for module in (dist, c10d):
                if getattr(module, name, None) is original:
                    self._saved.append((module, name, original))
                    setattr(module, name, wrapper)

    def uninstall(self) -> None:
        for module, name, original in reversed(self._saved):
            setattr(module, name, original)
        self._saved.clear()

    def _wrap(self, original: Callable[..., Any], kind: str, size: SizeOf) -> Callable[..., Any]:
        @wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._record(kind, size, args, kwargs, (time.perf_counter() - t0) * 1e3)

        return timed

    def _record(self, kind: str, size: SizeOf, args: tuple[Any, ...], kwargs: dict[str, Any], ms: float) -> None:
        try:
            entry = self.totals.setdefault(kind, [0.0, 0.0, 0.0])
            entry[0] += ms
            entry[1] += size(args, kwargs)
            entry[2] += 1
        except Exception as exc:  # noqa: BLE001 — never raise into the caller's collective
            self.errors.add(f"collective:{kind}", exc)

    def take(self) -> dict[str, list[float]]:
        out, self.totals = self.totals, {}
        return out
