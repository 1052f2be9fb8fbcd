"""Scan windows as Ray tasks (``--engine ray``): each task opens the run's Parquet parts in its own DuckDB, builds
its window and runs the kernel; the driver merges the partial results in step order, as the local path does, so
the findings are the same. Ray is the trial executor already (``engine.tune``); a cluster named by
``RAY_ADDRESS`` is used, else Ray starts a local one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from debugtune.engine.diagnose.errors import DiagnoseError
from debugtune.engine.diagnose.lazyview import Executor, Window, run_window
from debugtune.engine.diagnose.scan import Partial, ScanJob
from debugtune.engine.telemetry.duck import DuckSource, DuckSpec

_SOURCES: dict[DuckSpec, DuckSource] = {}
"""One DuckDB connection per worker process and run (a worker runs many windows)."""


def _window_task(spec: DuckSpec, w: Window, job: ScanJob, a: int, b: int) -> Partial:
    src = _SOURCES.get(spec)
    if src is None:
        for old in _SOURCES.values():
            old.close()
        _SOURCES.clear()
        src = _SOURCES[spec] = DuckSource(spec)
    return run_window(src, w, job, a, b)


def ray_executor() -> Executor:
    """An executor that runs each window as a Ray task (one core each; DuckDB single-threaded inside)."""
    try:
        import ray
    except ImportError:
        raise DiagnoseError("engine ray needs Ray: pip install 'debugtune[ray]'") from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    task = ray.remote(num_cpus=1)(_window_task)

    def run(src: Any, w: Window, job: ScanJob, windows: Sequence[tuple[int, int]]) -> list[Partial]:
        spec = DuckSpec(src.spec.run_dir, src.spec.files, threads=1, memory_mb=src.spec.memory_mb)
        spec_ref, w_ref, job_ref = ray.put(spec), ray.put(w), ray.put(job)
        parts: list[Partial] = ray.get([task.remote(spec_ref, w_ref, job_ref, a, b) for a, b in windows])
        return parts

    return run
