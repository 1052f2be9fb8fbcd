"""Streaming anomaly detectors (C++ in ``native/src/detectors.cpp``), typed.

Per series, each point is scored against the state *before* it (so an alarm fires at the step of the
point) and then folded in:

- EWMA z-score: ``(x - mean) / sqrt(var)`` with West's exponentially weighted mean and variance
  (``alpha``); O(1).
- Robust z-score: ``(x - median) / (1.4826 * MAD)`` over the previous ``window`` points; a sorted copy
  of the window is kept (O(log w) search, O(w) memmove of at most w doubles) and the MAD is selected
  from two sorted deviation runs in O(log w). A zero scale gives z = 0 for x equal to the centre and
  ±Inf otherwise.
- Two-sided CUSUM on the EWMA z-score: ``S+ = max(0, S+ + z - k)``, ``S- = max(0, S- - z - k)``; an
  alarm when S > h, after which that side restarts at 0.
- Spike flags: |EWMA z| > ``z_threshold``, |robust z| > ``robust_threshold``.

Scores start once a series has ``max(1, warmup)`` finite points. A NaN/Inf point is flagged
``NONFINITE`` and does not enter the state. Every threshold is a parameter: the caller takes them
from the knowledge base (``DetectorParams.from_thresholds``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from debugtune.native import _native

SPIKE: int = _native.FLAG_SPIKE
ROBUST_SPIKE: int = _native.FLAG_ROBUST_SPIKE
DRIFT_UP: int = _native.FLAG_DRIFT_UP
DRIFT_DOWN: int = _native.FLAG_DRIFT_DOWN
NONFINITE: int = _native.FLAG_NONFINITE
MAD_TO_SIGMA: float = _native.MAD_TO_SIGMA
FLAG_NAMES = {SPIKE: "spike", ROBUST_SPIKE: "robust_spike", DRIFT_UP: "drift_up", DRIFT_DOWN: "drift_down",
              NONFINITE: "nonfinite"}

# Knowledge-base threshold key of each parameter (cases/thresholds/*.ttl). The robust spike score and the
# warm-up share their keys with the offline loss-spike detector, so live alarms and diagnosis agree.
THRESHOLD_KEYS = {
    "alpha": "stream.ewma_alpha", "z_threshold": "stream.ewma_z", "robust_threshold": "convergence.spike.z",
    "window": "convergence.spike.window", "cusum_k": "stream.cusum_k", "cusum_h": "stream.cusum_h",
    "warmup": "diagnose.min_steps",
}


@dataclass(frozen=True)
class DetectorParams:
    """Parameters of the streaming detectors (their knowledge-base keys: ``THRESHOLD_KEYS``)."""

    alpha: float
    z_threshold: float
    robust_threshold: float
    window: int
    cusum_k: float
    cusum_h: float
    warmup: int

    @classmethod
    def from_thresholds(cls, thresholds: Mapping[str, float],
                        keys: Mapping[str, str] = THRESHOLD_KEYS) -> DetectorParams:
        """The parameters from a knowledge-base threshold map (``kg.knowledge.thresholds``), field → key in ``keys``.

        Raises KeyError naming every missing key.
        """
        missing = [keys[f.name] for f in fields(cls) if keys[f.name] not in thresholds]
        if missing:
            raise KeyError(f"knowledge base lacks detector thresholds: {', '.join(missing)}")
        values: dict[str, Any] = {f.name: (int if f.name in ("window", "warmup") else float)(thresholds[keys[f.name]])
                                  for f in fields(cls)}
        return cls(**values)


@dataclass(frozen=True)
class Detection:
    """The scores and flags of one point."""

    series: str
    value: float
    ewma_z: float
    robust_z: float
    cusum_pos: float
    cusum_neg: float
    flags: int

    @property
    def alarms(self) -> tuple[str, ...]:
        """Names of the raised flags, e.g. ("spike", "drift_up")."""
        return tuple(name for bit, name in FLAG_NAMES.items() if self.flags & bit)


@dataclass(frozen=True)
class DetectionArrays:
    """Scores of a batch of points, one array per quantity (in input order)."""

    ewma_z: np.ndarray
    robust_z: np.ndarray
    cusum_pos: np.ndarray
    cusum_neg: np.ndarray
    flags: np.ndarray


class StreamDetectors:
    """All detectors for many named series; a batch of points crosses into C++ once."""

    def __init__(self, params: DetectorParams) -> None:
        self.params = params
        self._impl = _native.StreamDetectors(**{f.name: getattr(params, f.name) for f in fields(params)})

    def id(self, name: str) -> int:
        """The integer id of a series (created on first use); ids make ``update_arrays`` cheap."""
        return self._impl.id(name)

    def update_arrays(self, ids: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray) -> DetectionArrays:
        """Points in order (a series may repeat); returns their scores and flags."""
        out = self._impl.update_many(np.ascontiguousarray(ids, dtype=np.int64),
                                     np.ascontiguousarray(values, dtype=np.float64))
        return DetectionArrays(*out)

    def update(self, values: Mapping[str, float]) -> list[Detection]:
        """One point per named series (e.g. ``{"loss": 2.31, "grad_norm": 0.8}``)."""
        names = list(values)
        ids = [self._impl.id(n) for n in names]
        r = self.update_arrays(ids, [values[n] for n in names])
        return [Detection(n, float(values[n]), float(r.ewma_z[i]), float(r.robust_z[i]), float(r.cusum_pos[i]),
                          float(r.cusum_neg[i]), int(r.flags[i])) for i, n in enumerate(names)]

    def state(self, name: str) -> dict[str, Any]:
        """Internal state of a series (n, mean, var, cusum sides, window contents sorted)."""
        return self._impl.state(self._impl.id(name))

    @property
    def series(self) -> list[str]:
        return list(self._impl.names)
