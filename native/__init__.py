"""Native C++ probes (nanobind): fused tensor statistics, streaming detectors, hardware sampler.

- ``tensor_stats(x, eps)`` / ``tensor_stats_many(tensors, eps)`` / ``update_norms(after, before)``
  (``debugtune.native.stats``),
- ``StreamDetectors(DetectorParams(...))`` (``debugtune.native.detectors``),
- ``HardwareSampler(interval)`` (``debugtune.native.sampler``).

See docs/native.md.
"""

from debugtune.native import _native
from debugtune.native.detectors import Detection, DetectionArrays, DetectorParams, StreamDetectors
from debugtune.native.sampler import BackendStatus, HardwareSampler, HardwareSamples
from debugtune.native.stats import (
    HIST_BINS,
    HIST_HI,
    HIST_LABELS,
    HIST_LO,
    STAT_FIELDS,
    Pending,
    StatsBatch,
    TensorStats,
    copy_into,
    tensor_stats,
    tensor_stats_many,
    tensor_stats_start,
    update_norms,
    update_norms_start,
)

compiler = _native.compiler
hardware_threads = _native.hardware_threads

__all__ = [
    "HIST_BINS", "HIST_HI", "HIST_LABELS", "HIST_LO", "STAT_FIELDS", "BackendStatus", "Detection", "DetectionArrays",
    "DetectorParams", "HardwareSampler", "HardwareSamples", "Pending", "StatsBatch", "StreamDetectors", "TensorStats",
    "compiler", "copy_into", "hardware_threads", "tensor_stats", "tensor_stats_many", "tensor_stats_start",
    "update_norms", "update_norms_start",
]
