"""Watching a live run (``cann-debug diagnose RUN --follow``): each pass re-judges only what was written since the
last one.

A scan's results per step and per chunk do not depend on how the run was cut (``scan``), so they are kept per
chunk of ``diagnose.scan.chunk_steps`` steps between passes (:class:`ScanCache`). The catalog is read again for
the new Parquet parts only (their footers); a chunk is scanned again only where a new part has rows of one of the
scan's metrics; everything else comes from the cache. What remains per pass is the small metrics (read whole,
they are small), the straggler's own series, the per-step reductions over the run and the inference: a pass costs
about (new rows) × the scan's cost per row, plus a part that grows with the steps only (not with the ranks), plus
a constant. A new rank, a changed part or a part that disappeared clears what depends on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.diagnose.errors import DiagnoseError
from debugtune.engine.diagnose.lazyview import Executor, LazyView
from debugtune.engine.diagnose.run import Diagnosis, check_dimensions, diagnose_out_of_core
from debugtune.engine.diagnose.scan import Partial, ScanJob, ScanPlan, merge
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.telemetry.catalog import Catalog, Part, new_parts, read_catalog
from debugtune.engine.telemetry.errors import TelemetryError


def split_by_chunk(part: Partial, chunk_steps: int) -> dict[int, Partial]:
    """A merged partial cut back into its chunks."""
    by_step = part.steps // chunk_steps
    seen = part.seen // chunk_steps
    out = {}
    for c in np.unique(np.concatenate([by_step, seen, part.chunk_ids])):
        s, k = by_step == c, part.chunk_ids == c
        out[int(c)] = Partial(part.steps[s], {n: v[s] for n, v in part.per_step.items()}, part.chunk_ids[k],
                              {n: v[k] for n, v in part.per_chunk.items()}, part.seen[seen == c], part.labels)
    return out


class ScanCache:
    """The per-chunk results of every scan of one run, and the chunks new parts touched since (``dirty``)."""

    def __init__(self) -> None:
        self.chunks: dict[tuple[Any, ...], dict[int, Partial]] = {}
        self.dirty: dict[str, set[int]] = {}
        self.scanned_rows = 0

    def clear(self) -> None:
        self.chunks.clear()
        self.dirty.clear()

    def touched(self, parts: Iterable[Part], plan: Any, chunk_steps: int) -> None:
        """Mark the chunks that ``parts`` hold rows of, per metric (as the view names it)."""
        for p in parts:
            for (metric, _, _), lo, hi in zip(p.keys, p.step_min, p.step_max, strict=True):
                self.dirty.setdefault(plan.output(metric), set()).update(
                    range(int(lo) // chunk_steps, int(hi) // chunk_steps + 1))

    def scan(self, view: LazyView, job: ScanJob, plan: ScanPlan) -> Partial:
        """``job`` on ``view``, scanning only the chunks not cached or touched since."""
        w = view.window(job, plan)
        if w.labels.size == 0:
            return merge([], w.labels)
        c = plan.chunk_steps
        key = (job.key(), w.labels.tobytes())
        store = self.chunks.setdefault(key, {})
        first, last = view.step_range(job.metric, job.entity)
        chunks = list(range(first // c, last // c + 1))
        dirty = set().union(*(self.dirty.get(m, set()) for m in (job.metric, *job.also)))
        todo = [k for k in chunks if k not in store or k in dirty]
        per = max(1, plan.window_steps(w.labels.size) // c)
        windows: list[tuple[int, int]] = []
        for k in todo:
            if windows and windows[-1][1] == k * c and (windows[-1][1] - windows[-1][0]) // c < per:
                windows[-1] = (windows[-1][0], (k + 1) * c)
            else:
                windows.append((k * c, (k + 1) * c))
        for part in view.executor(view.source, w, job, windows):
            self.scanned_rows += int(part.seen.size) * int(w.labels.size)
            store.update(split_by_chunk(part, c))
        for k in todo:
            store.setdefault(k, Partial(np.zeros(0, dtype=np.int64)))
        return merge([store[k] for k in chunks], w.labels)


@dataclass
class Pass:
    """One pass of a follow: what was new, what it cost, what it found (None when nothing was new)."""

    number: int
    new_parts: int
    new_rows: int
    new_steps: int
    seconds: float
    scanned_rows: int
    diagnosis: Diagnosis | None
    note: str = ""

    @property
    def seconds_per_new_step(self) -> float:
        return self.seconds / self.new_steps if self.new_steps else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {"pass": self.number, "new_parts": self.new_parts, "new_rows": self.new_rows,
                "new_steps": self.new_steps, "seconds": round(self.seconds, 3), "scanned_rows": self.scanned_rows,
                "seconds_per_new_step": None if not self.new_steps else self.seconds_per_new_step,
                **({"note": self.note} if self.note else {})}


class Follower:
    """Diagnoses a growing run pass after pass (out of core), re-judging only what each pass finds new."""

    def __init__(self, run_dir: str | Path, th: Thresholds, dimensions: Iterable[str] | None = None,
                 meta: dict[str, Any] | None = None, executor: Executor | None = None):
        self.run_dir, self.th, self.meta, self.executor = Path(run_dir), th, meta, executor
        self.dims = check_dimensions(dimensions)
        self.catalog: Catalog | None = None
        self.cache = ScanCache()
        self.passes = 0
        self._last_step = -1

    def step(self) -> Pass:
        """One pass: the new parts (footers only), then the diagnosis with the cached scans."""
        t0 = time.perf_counter()
        try:
            catalog = read_catalog(self.run_dir, self.catalog)
        except TelemetryError as err:
            self.passes += 1
            return Pass(self.passes, 0, 0, 0, time.perf_counter() - t0, 0, None, f"nothing to diagnose yet: {err}")
        new = new_parts(catalog, self.catalog)
        if self.catalog is not None and {p.path for p in self.catalog.parts} - {p.path for p in catalog.parts}:
            self.cache.clear()  # a part disappeared: nothing cached can be trusted
        self.passes += 1
        rows = int(sum(int(p.rows.sum()) for p in new))
        last = max((int(p.step_max.max()) for p in catalog.parts if p.rows.size), default=-1)
        new_steps = max(last - self._last_step, 0)
        if self.catalog is not None and not new:
            self.catalog = catalog
            return Pass(self.passes, 0, 0, 0, time.perf_counter() - t0, 0, None)
        plan = ScanPlan(self.th.as_int("diagnose.scan.chunk_steps"), self.th.as_int("diagnose.scan.window_cells"))
        if self.catalog is not None:
            from debugtune.engine.telemetry.aliases import AliasPlan

            stored: dict[str, int] = {}
            for p in catalog.parts:
                for (m, _, _), n in zip(p.keys, p.rows, strict=True):
                    stored[m] = stored.get(m, 0) + int(n)
            self.cache.touched(new, AliasPlan(stored), plan.chunk_steps)
        before = self.cache.scanned_rows
        try:
            result = diagnose_out_of_core(self.run_dir, self.th, self.dims, meta=self.meta, executor=self.executor,
                                          catalog=catalog, cache=self.cache)
        except DiagnoseError as err:
            self.catalog = catalog
            return Pass(self.passes, len(new), rows, new_steps, time.perf_counter() - t0,
                        self.cache.scanned_rows - before, None, str(err))
        finally:
            self.cache.dirty.clear()
        self.catalog, self._last_step = catalog, last
        return Pass(self.passes, len(new), rows, new_steps, time.perf_counter() - t0,
                    self.cache.scanned_rows - before, result)
