"""Background hardware sampler (C++ in ``native/src/sampler*.cpp``), typed.

A native thread, off the GIL, samples every ``interval`` seconds into a bounded ring buffer that
Python drains. Backends:

- ``cpu`` (always, on Linux): host CPU utilisation from /proc/stat deltas, host memory used/total from
  /proc/meminfo (MemTotal - MemAvailable), this process's resident set from /proc/self/statm.
- ``nvml``: ``libnvidia-ml.so.1`` loaded with dlopen: GPU utilisation, memory used/total, power and the
  enforced power limit, GPU temperature, SM clock, throttling (power cap, thermal, HW slowdown or power
  brake) and power throttling (power cap or power brake alone) per GPU.
- ``dcmi``: Ascend ``libdcmi.so`` loaded with dlopen: AI Core utilisation, HBM used/total, power,
  temperature and AI Core clock per NPU chip.

A backend that cannot open says why (``status()``); the others still run. Metric names are those of
the telemetry schema; entities are "" for the host and "device:gpu<i>" / "device:npu<i>" for devices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from debugtune.native import _native

METRICS: tuple[str, ...] = tuple(_native.HW_METRICS)
NVML_LIBS = ("libnvidia-ml.so.1", "libnvidia-ml.so")
DCMI_LIBS = ("libdcmi.so", "/usr/local/dcmi/libdcmi.so", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so")


@dataclass(frozen=True)
class BackendStatus:
    backend: str
    active: bool
    reason: str
    entities: tuple[str, ...]


@dataclass(frozen=True)
class HardwareSamples:
    """Drained samples: Unix time, entity index, metric index and value per sample (arrays of equal length)."""

    t: np.ndarray
    entity: np.ndarray
    metric: np.ndarray
    value: np.ndarray
    entities: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.t)

    def rows(self) -> Iterator[tuple[float, str, str, float]]:
        """(time, entity name, metric name, value) per sample."""
        for t, e, m, v in zip(self.t, self.entity, self.metric, self.value, strict=True):
            yield float(t), self.entities[e], METRICS[m], float(v)


class HardwareSampler:
    """Start/stop/drain a native sampling thread; also a context manager.

    The live probe samples at the knowledge base's ``hardware.sample_interval_s`` (0.25 s: 40 samples in a
    10 s run, so that a short run still has the ``hardware.min_samples`` its detectors need); a sampler made
    here without an interval uses ``DEFAULT_INTERVAL_S``, the probe's fallback when the key is absent.
    """

    DEFAULT_INTERVAL_S = 1.0

    def __init__(self, interval: float = DEFAULT_INTERVAL_S, *, capacity: int = 65536,
                 backends: Sequence[str] = ("cpu", "nvml", "dcmi"), nvml_libs: Sequence[str] = NVML_LIBS,
                 dcmi_libs: Sequence[str] = DCMI_LIBS) -> None:
        self._impl = _native.HardwareSampler(float(interval), int(capacity), list(backends), list(nvml_libs),
                                             list(dcmi_libs))
        self.entities: tuple[str, ...] = tuple(self._impl.entities)

    def start(self) -> None:
        self._impl.start()

    def stop(self) -> None:
        self._impl.stop()

    def sample_now(self) -> None:
        """Take one sample of every active backend on the calling thread (e.g. at the end of a run)."""
        self._impl.sample_now()

    def drain(self) -> HardwareSamples:
        """Every sample taken since the last drain, oldest first."""
        t, e, m, v = self._impl.drain()
        return HardwareSamples(t, e, m, v, self.entities)

    def status(self) -> list[BackendStatus]:
        return [BackendStatus(s["backend"], s["active"], s["reason"], tuple(s["entities"]))
                for s in self._impl.status()]

    @property
    def backend(self) -> str:
        """Active backends joined by '+', e.g. "cpu" or "cpu+nvml"."""
        return "+".join(s.backend for s in self.status() if s.active) or "none"

    @property
    def reasons(self) -> dict[str, str]:
        """Why each inactive backend is not used, e.g. {"nvml": "libnvidia-ml.so.1 not found (...)"}."""
        return {s.backend: s.reason for s in self.status() if not s.active}

    @property
    def dropped(self) -> int:
        """Samples overwritten because the ring buffer was full before a drain."""
        return int(self._impl.dropped)

    @property
    def interval(self) -> float:
        """Seconds between samples."""
        return float(self._impl.interval)

    @property
    def running(self) -> bool:
        return bool(self._impl.running)

    def __enter__(self) -> HardwareSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
