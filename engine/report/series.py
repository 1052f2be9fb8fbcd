"""The telemetry a report draws, read lazily one metric group at a time (a run of 1,024 ranks x 10,000 steps
holds tens of millions of rows; a report needs a few small series and a few rank x step grids).

Per-layer and per-expert series and the loss come from the lowest rank (as ``Telemetry.series`` does);
rank x step grids read only ``rank, step, value`` of one metric; hardware series are keyed by
(rank, entity). Grids are built by direct indexing when steps and ranks are dense (the usual case).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from debugtune.engine.telemetry import Telemetry, TelemetryError, read_telemetry
from debugtune.engine.telemetry.schema import HARDWARE_METRICS
from debugtune.engine.telemetry.writer import TELEMETRY_DIR

CURVE_METRICS = ("loss", "eval_loss", "lr")
MOE_CURVES = ("aux_loss", "z_loss")  # what a log of an MoE run carries instead of tokens per expert
ROW_METRICS = (*CURVE_METRICS, "grad_norm", "expert_tokens", *MOE_CURVES)
TIME_METRICS = ("step_time_ms", "comm_ms")
GRID_METRICS = ("compute_ms",)  # the rank × stage heat map (grid_plot)
HARDWARE_ORDER = ("util_pct", "mem_used_bytes", "mem_used_pct", "temp_c", "power_w", "power_limit_w", "clock_mhz",
                  "throttle", "throttle_power", "mem_util_pct", "cube_util_pct", "cpu_util_pct", "host_mem_used_bytes",
                  "rss_bytes", "dataloader_wait_ms")
HARDWARE = tuple(m for m in HARDWARE_METRICS if m != "sample_time_s")

Pivot = tuple[np.ndarray, list[Any], np.ndarray]
_EMPTY: Pivot = (np.array([], dtype=np.int64), [], np.empty((0, 0)))


def dense_index(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, position of each element among them), O(n) when the values are dense ints."""
    a = np.asarray(a)
    if a.size == 0:
        return a, np.zeros(0, dtype=np.int64)
    lo, hi = int(a.min()), int(a.max())
    if hi - lo <= 4 * a.size + 1024:
        offset = a.astype(np.int64) - lo
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[offset] = True
        return np.flatnonzero(present) + lo, (np.cumsum(present) - 1)[offset]
    uniq, inverse = np.unique(a, return_inverse=True)
    return uniq, inverse.reshape(-1)


def _grid(steps: np.ndarray, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct steps, distinct keys, values[step, key]) with NaN where a pair is absent; the last row wins."""
    s, si = dense_index(steps)
    k, ki = dense_index(keys)
    grid = np.full((len(s), len(k)), np.nan)
    grid[si, ki] = values
    return s, k, grid


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Integer codes and their names of a (dictionary or string) column."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(arr.type):
        arr = pc.dictionary_encode(arr)
    return arr.indices.to_numpy(zero_copy_only=False).astype(np.int64), [str(x) for x in arr.dictionary.to_pylist()]


class RunSeries:
    """Lazy, cached access to the series of one run directory: at most two or three Parquet scans."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        root = self.run_dir / TELEMETRY_DIR
        if not root.is_dir():
            raise TelemetryError(root, "telemetry directory not found")
        self.ranks = sorted(int(p.name.split("=", 1)[1]) for p in root.glob("rank=*")
                            if p.is_dir() and p.name.split("=", 1)[1].isdigit())
        self._memo: dict[tuple[str, str], Pivot] = {}

    @functools.cached_property
    def rows(self) -> Telemetry:
        """Loss, learning rate, per-layer and per-expert series: of the lowest rank, else of the highest
        (where pipeline-parallel jobs log the loss); empty when neither has any."""
        for rank in dict.fromkeys(self.ranks[:1] + self.ranks[-1:]):
            tel = read_telemetry(self.run_dir, metrics=ROW_METRICS, ranks=rank)
            if len(tel):
                return tel
        return Telemetry(pa.table({}))

    @functools.cached_property
    def _row_metrics(self) -> set[str]:
        return set(self.rows.metrics()) if len(self.rows) else set()

    @functools.cached_property
    def _wide(self) -> dict[str, Any]:
        """Per-rank time and hardware rows of every rank (one scan), as numpy columns and name codes."""
        t = read_telemetry(self.run_dir, metrics=(*TIME_METRICS, *GRID_METRICS, *HARDWARE),
                           columns=("rank", "step", "metric", "entity", "value")).table
        if t.num_rows == 0:
            return {"metrics": []}
        mcodes, mnames = _codes(t.column("metric"))
        ecodes, enames = _codes(t.column("entity"))
        return {"rank": t.column("rank").to_numpy().astype(np.int64), "step": t.column("step").to_numpy(),
                "value": t.column("value").to_numpy(), "mcodes": mcodes, "metrics": mnames, "ecodes": ecodes,
                "entities": enames}

    def _rows_of(self, metric: str) -> np.ndarray | None:
        w = self._wide
        if metric not in w["metrics"]:
            return None
        return np.flatnonzero(w["mcodes"] == w["metrics"].index(metric))

    def has(self, metric: str) -> bool:
        if metric in ROW_METRICS:
            return metric in self._row_metrics
        return len(self.keyed(metric)[1] if metric in HARDWARE else self.by_rank(metric)[1]) > 0

    def curve(self, metric: str, entity: str = "") -> tuple[np.ndarray, np.ndarray]:
        if metric not in self._row_metrics:
            return np.array([], dtype=np.int64), np.array([])
        return self.rows.series(metric, entity)

    def by_entity(self, metric: str) -> Pivot:
        return self.rows.pivot(metric, by="entity") if metric in self._row_metrics else _EMPTY

    def entities(self, metric: str) -> list[str]:
        return self.rows.entities(metric) if metric in self._row_metrics else []

    def _once(self, kind: str, metric: str, make: Callable[[str], Pivot]) -> Pivot:
        key = (kind, metric)
        if key not in self._memo:
            self._memo[key] = make(metric)
        return self._memo[key]

    def by_rank(self, metric: str) -> Pivot:
        """(steps, ranks, values[step, rank]) of one per-rank metric (entity '')."""
        return self._once("rank", metric, self._by_rank)

    def _by_rank(self, metric: str) -> Pivot:
        rows = self._rows_of(metric)
        w = self._wide
        if rows is None or "" not in w["entities"]:
            return _EMPTY
        rows = rows[w["ecodes"][rows] == w["entities"].index("")]
        if not len(rows):
            return _EMPTY
        s, k, grid = _grid(w["step"][rows], w["rank"][rows], w["value"][rows])
        return s, [int(r) for r in k], grid

    def keyed(self, metric: str) -> Pivot:
        """(steps, keys, values[step, key]) of a hardware metric, one key per (rank, entity) pair."""
        return self._once("keyed", metric, self._keyed)

    def _keyed(self, metric: str) -> Pivot:
        rows = self._rows_of(metric)
        if rows is None or not len(rows):
            return _EMPTY
        w = self._wide
        names, ranks = w["entities"], w["rank"][rows]
        n = max(len(names), 1)
        s, k, grid = _grid(w["step"][rows], ranks * n + w["ecodes"][rows], w["value"][rows])
        many = len(np.unique(ranks)) > 1
        labels = [f"rank {int(x) // n} {names[int(x) % n]}".strip() if many else (names[int(x) % n] or "host")
                  for x in k]
        order = sorted(range(len(labels)), key=lambda i: _natural(labels[i]))
        return s, [labels[i] for i in order], grid[:, order]

    @functools.cached_property
    def last_step(self) -> int | None:
        """The last step any drawn series reaches."""
        ends = [int(self.rows.steps()[-1])] if len(self.rows) else []
        if "step" in self._wide and len(self._wide["step"]):
            ends.append(int(self._wide["step"].max()))
        return max(ends) if ends else None


def _natural(text: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]
