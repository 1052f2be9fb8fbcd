"""RunSink: where an importer puts its rows (one TelemetryWriter per rank) and run metadata, with counts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.telemetry import TelemetryWriter, dimension_of

# Dimension of metrics that importers add beyond the schema's known names (e.g. free-form log scalars).
DEFAULT_DIMENSION = "convergence"


class RunSink:
    """Collects the telemetry of one imported run inside a staging directory.

    ``meta`` is merged into run.json at the end; the counters feed the import summary.
    """

    def __init__(self, run_dir: Path, run_id: str, *, root: Path | None = None, flush_rows: int = 262144):
        self.run_dir = run_dir
        self.root = root
        self.run_id = run_id
        self.flush_rows = flush_rows
        self.meta: dict[str, Any] = {}
        self.files: list[str] = []
        self._writers: dict[int, TelemetryWriter] = {}
        self._metrics: set[str] = set()
        self._steps: set[int] = set()

    def writer(self, rank: int) -> TelemetryWriter:
        """The writer of ``rank`` (created on first use)."""
        w = self._writers.get(rank)
        if w is None:
            w = self._writers[rank] = TelemetryWriter(self.run_dir, self.run_id, rank=rank, flush_rows=self.flush_rows)
        return w

    def add(self, rank: int, step: int, metric: str, value: float, entity: str = "", *,
            dimension: str | None = None) -> None:
        """One row; the dimension comes from the schema's metric name unless given."""
        self.writer(rank).add(step, dimension or dimension_of(metric) or DEFAULT_DIMENSION, metric, entity, value)
        self._metrics.add(metric)
        self._steps.add(int(step))

    def add_columns(self, rank: int, steps: Sequence[int] | np.ndarray, metric: str,
                    entities: str | Sequence[str], values: Sequence[float] | np.ndarray, *,
                    dimension: str | None = None) -> None:
        """Many rows of one metric (vectorised)."""
        steps = np.asarray(steps, dtype=np.int64)
        if not len(steps):
            return
        self.writer(rank).add_columns(steps, dimension or dimension_of(metric) or DEFAULT_DIMENSION, metric,
                                      entities, values)
        self._metrics.add(metric)
        self._steps.update(np.unique(steps).tolist())

    def source(self, path: Path) -> None:
        """Record an input file, relative to the imported path (run.json holds no absolute paths)."""
        try:
            name = path.relative_to(self.root).as_posix() if self.root is not None else path.name
        except ValueError:
            name = path.name
        self.files.append(name or path.name)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()

    # -- summary ----------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        return sum(w.rows_written + w.pending_rows for w in self._writers.values())

    @property
    def ranks(self) -> list[int]:
        return sorted(self._writers)

    @property
    def steps(self) -> list[int]:
        return sorted(self._steps)

    @property
    def metrics(self) -> list[str]:
        return sorted(self._metrics)
