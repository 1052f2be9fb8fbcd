"""Scans: a kernel run over the step windows of one metric's ranks × steps grid, its partial results merged.

The detectors that compare ranks step by step (stragglers, step time, communication share, bandwidth) never hold a
whole ranks × steps grid. They describe what they need as a :class:`ScanJob`: the metric, the entity, whether only
the steps every rank recorded count (``complete``), and a kernel that turns one :class:`Block` (a window of steps
× ranks) into a :class:`Partial` — per-step results, and per-chunk results for each rank (chunks are
``chunk_steps`` step numbers wide, aligned at multiples of it, so a result per chunk does not depend on how the
run was cut into windows). The view that holds the telemetry runs the job: in memory over its grid, out of core
over DuckDB windows, or as Ray tasks; every way gives the same merged result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from debugtune.engine.diagnose.frame import Grid


@dataclass(frozen=True)
class ScanPlan:
    """How a scan cuts a run: chunks of ``chunk_steps`` step numbers, windows of at most ``window_cells`` cells
    (a whole number of chunks, at least one)."""

    chunk_steps: int
    window_cells: int

    def window_steps(self, n_labels: int) -> int:
        chunks = max(1, self.window_cells // max(n_labels, 1) // self.chunk_steps)
        return chunks * self.chunk_steps

    def windows(self, first: int, last: int, n_labels: int) -> list[tuple[int, int]]:
        """Half-open step ranges, aligned at multiples of the window, that cover ``first``..``last``."""
        w = self.window_steps(n_labels)
        start = (int(first) // w) * w
        return [(a, a + w) for a in range(start, int(last) + 1, w)]


@dataclass(frozen=True)
class Block:
    """One window: ``values[i, j]`` is the metric at ``steps[i]`` and rank ``labels[j]`` (steps × ranks,
    C-contiguous; NaN where absent); ``also`` holds the job's other metrics on the same steps and ranks."""

    steps: np.ndarray
    labels: np.ndarray
    values: np.ndarray
    also: dict[str, np.ndarray]
    chunk_steps: int

    def chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(chunk id, row indices) of every chunk with a step in the window."""
        ids = self.steps // self.chunk_steps
        if ids.size == 0:
            return
        cuts = np.flatnonzero(np.diff(ids)) + 1
        for rows in np.split(np.arange(ids.size), cuts):
            yield int(ids[rows[0]]), rows


@dataclass
class Partial:
    """What a kernel returns for its steps: per-step arrays (axis 0 = ``steps``), per-chunk arrays (axis 0 =
    ``chunk_ids``), and ``seen``: every step of the window with a row (complete or not)."""

    steps: np.ndarray
    per_step: dict[str, np.ndarray] = field(default_factory=dict)
    chunk_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    per_chunk: dict[str, np.ndarray] = field(default_factory=dict)
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def merge(parts: Iterable[Partial], labels: np.ndarray) -> Partial:
    """The partials of consecutive windows as one (in step order)."""
    parts = sorted(parts, key=lambda p: int(p.seen[0]) if p.seen.size else -1)
    parts = [p for p in parts if p.seen.size] or [Partial(np.zeros(0, dtype=np.int64))]

    def cat(key: str, attr: str) -> np.ndarray:
        arrays = [getattr(p, attr)[key] for p in parts if key in getattr(p, attr)]
        return np.concatenate(arrays, axis=0) if arrays else np.zeros(0)

    step_keys = dict.fromkeys(k for p in parts for k in p.per_step)
    chunk_keys = dict.fromkeys(k for p in parts for k in p.per_chunk)
    return Partial(np.concatenate([p.steps for p in parts]), {k: cat(k, "per_step") for k in step_keys},
                   np.concatenate([p.chunk_ids for p in parts]), {k: cat(k, "per_chunk") for k in chunk_keys},
                   np.concatenate([p.seen for p in parts]), labels)


Kernel = Callable[[Block, Any], Partial]


@dataclass(frozen=True)
class ScanJob:
    """A kernel over the windows of ``metric`` (one ``entity``, or all combined with ``reduce``), ranks × steps.

    ``complete``: the kernel sees only the steps where every rank that ever recorded the metric has a finite value
    (a collective instance all of them took part in). ``also``: other metrics of the same entity, aligned to the
    primary's ranks and steps. ``kernel`` and ``params`` must pickle (they run in Ray tasks)."""

    metric: str
    kernel: Kernel
    params: Any = None
    entity: str | None = None
    reduce: str = "mean"
    complete: bool = True
    also: tuple[str, ...] = ()

    def key(self) -> tuple[Any, ...]:
        return (self.metric, self.entity, self.reduce, self.complete, self.also, self.kernel.__module__,
                self.kernel.__qualname__, repr(self.params))


def run_block(job: ScanJob, block: Block) -> Partial:
    """The kernel on one window, after dropping incomplete steps when the job asks for complete ones."""
    seen = block.steps
    if job.complete and block.steps.size:
        keep = np.isfinite(block.values).all(axis=1)
        if not keep.all():
            block = Block(block.steps[keep], block.labels, np.ascontiguousarray(block.values[keep]),
                          {k: np.ascontiguousarray(v[keep]) for k, v in block.also.items()}, block.chunk_steps)
    if block.steps.size == 0:
        return Partial(block.steps, seen=seen)
    part = job.kernel(block, job.params)
    part.seen = seen
    return part


def grid_blocks(grid: Grid, also: dict[str, np.ndarray], plan: ScanPlan) -> Iterator[Block]:
    """The windows of an in-memory grid (labels × steps) and its aligned companions."""
    if grid.steps.size == 0:
        return
    labels = np.asarray(grid.labels, dtype=np.int64)
    for a, b in plan.windows(int(grid.steps[0]), int(grid.steps[-1]), labels.size):
        lo, hi = np.searchsorted(grid.steps, [a, b])
        if hi > lo:
            yield Block(grid.steps[lo:hi], labels, np.ascontiguousarray(grid.values[:, lo:hi].T),
                        {k: np.ascontiguousarray(v[:, lo:hi].T) for k, v in also.items()}, plan.chunk_steps)
