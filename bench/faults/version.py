"""The code version of a benchmark training: a hash of everything that decides what a cached run holds.

A cached run is reused only when its label carries the same version. The version covers the scenario
programs and the fault catalogue (``debugtune/scenarios/**/*.py``), the live probe that writes the telemetry
(``engine/capture/*.py``, the native wrapper and kernels ``native/*.py``, ``native/src/*``), the probe's
knowledge-base settings (``cases/thresholds/probe.ttl``: e.g. the detail cadence) and the matrix's own
version number. Diagnosis code is not in it: the benchmark diagnoses every run afresh.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("debugtune/scenarios/**/*.py", "engine/capture/*.py", "native/*.py", "native/src/*.cpp", "native/src/*.h",
           "cases/thresholds/probe.ttl")


def source_files(root: Path = ROOT) -> list[Path]:
    """The files the version hashes, in a stable order."""
    return sorted({p for pattern in SOURCES for p in root.glob(pattern) if p.is_file()})


@cache
def code_version(root: Path = ROOT) -> str:
    """A short hash of the sources (path and content) and of the matrix version."""
    from bench.faults.matrix import MATRIX_VERSION

    h = hashlib.sha256(f"matrix:{MATRIX_VERSION}\n".encode())
    for path in source_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
