"""What every scenario program shares: deterministic seeding, the probe hook-up and the step recorder.

A scenario trains a real small model on CPU. With ``probe=True`` it attaches the live probe
(`debugtune.attach`) into ``run_dir``, so the run directory holds only what the probe wrote:
telemetry and ``run.json``. Everything the program measures on its own (losses, held-out
statistics, per-rank timings) stays in the returned result object; the fault benchmark uses it to
decide whether an injected fault manifested, independently of the detectors.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from debugtune.kg.knowledge import Thresholds

PROBE_EVERY = 1


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch, and pin torch to one thread (the scenarios run on shared CPUs)."""
    import torch

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Recorder:
    """Forwards a program's per-step scalars to the probe when one is attached (a no-op otherwise)."""

    def __init__(self, probe: Any | None = None):
        self.probe = probe

    def log(self, **metrics: float | None) -> None:
        """Scalars of the step in progress (the probe files them under its current step)."""
        if self.probe is not None:
            self.probe.log(**{k: float(v) for k, v in metrics.items() if v is not None})


@contextmanager
def probe_session(model: Any, optimizer: Any, run_dir: str | Path | None, enabled: bool, *,
                  rank: int | None = None, activations: bool = False, run_id: str | None = None,
                  meta: Mapping[str, Any] | None = None) -> Iterator[Any | None]:
    """Attach the live probe for the body of the ``with`` (or yield None when disabled).

    ``meta`` is descriptive run metadata (program name, model size): never a fault label.
    """
    if not enabled:
        yield None
        return
    if run_dir is None:
        raise ValueError("probe=True needs a run_dir to write telemetry into")
    import debugtune

    kwargs: dict[str, Any] = {"every": PROBE_EVERY, "activations": activations, "thresholds": knowledge_thresholds()}
    if rank is not None:
        kwargs["rank"] = rank
    if run_id is not None:
        kwargs["run_id"] = run_id
    probe = debugtune.attach(model, optimizer, run_dir, **kwargs)
    try:
        probe.set_meta(**dict(meta or {}), layers=layer_order(model))
        yield probe
    finally:
        probe.close()


@lru_cache(maxsize=1)
def knowledge_thresholds() -> Thresholds:
    """The knowledge base's thresholds, loaded once per process (the probe would load them at every attach)."""
    from debugtune.kg.knowledge import load_knowledge, thresholds
    from debugtune.kg.open import open_store

    store = open_store(None)
    try:
        load_knowledge(store)
        return thresholds(store)
    finally:
        store.close()


def layer_order(model: Any) -> list[str]:
    """Module paths that own parameters, in registration order (input to output for these programs): the
    probe's layer entities, listed in run.json as ``layers`` so detectors know which layer is first."""
    seen: dict[str, None] = {}
    for name, _ in model.named_parameters():
        seen.setdefault(name.rpartition(".")[0] or name, None)
    return list(seen)


class StepTimer:
    """Wall-clock laps within a step, in milliseconds."""

    def __init__(self) -> None:
        self._t = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        ms = (now - self._t) * 1e3
        self._t = now
        return ms


def window_mean(x: np.ndarray, frac: float = 0.1, minimum: int = 5) -> float:
    """Mean of the last ``frac`` of a series (at least ``minimum`` points); NaN stays NaN."""
    if len(x) == 0:
        return float("nan")
    n = max(minimum, int(len(x) * frac))
    return float(np.mean(x[-n:]))
