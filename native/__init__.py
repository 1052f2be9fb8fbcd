"""Native C++ probes (nanobind): fused tensor statistics, streaming detectors, hardware sampler."""

from debugtune.native import _native

compiler = _native.compiler
hardware_threads = _native.hardware_threads

__all__ = ["compiler", "hardware_threads"]
