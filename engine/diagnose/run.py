"""Run the detector families over one run and collect findings, coverage and the correlation graph."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pyarrow as pa

from debugtune.engine.diagnose.base import Context
from debugtune.engine.diagnose.correlation import correlation_edges
from debugtune.engine.diagnose.detectors import DETECTORS
from debugtune.engine.diagnose.errors import DiagnoseError
from debugtune.engine.diagnose.frame import TelemetryView
from debugtune.engine.diagnose.lazyview import Executor, LazyView, OutOfCore, local_executor
from debugtune.engine.diagnose.model_kind import shows_experts
from debugtune.engine.diagnose.registry import run_detectors
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.telemetry import TelemetryError, read_run_json, read_telemetry
from debugtune.engine.telemetry.catalog import Catalog, count_rows, read_catalog
from debugtune.engine.telemetry.runmeta import RUN_JSON
from debugtune.kg.records import DIMENSIONS, CorrelationEdge, Finding

_COLUMNS = ("rank", "step", "dimension", "metric", "entity", "value")  # the run column is not needed

@dataclass
class Diagnosis:
    """Findings of one run, the correlation graph between them, and what was (not) diagnosed."""

    run: str
    meta: dict[str, Any]
    findings: list[Finding]
    edges: list[CorrelationEdge]
    graph: nx.DiGraph
    judged: set[str]
    coverage: dict[str, str]
    notes: list[str]
    timing_s: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    engine: str = "memory"
    rows: int = 0
    catalog: Catalog | None = None
    recorded: frozenset[str] = frozenset()
    """The metric names the run recorded (what a next run would need beyond them is in the report's blind spots)."""
    experts: bool | None = None
    """Whether the model is a mixture of experts (``model_kind.shows_experts``; None: nothing says)."""

    @property
    def diagnosed(self) -> list[str]:
        return [d for d, status in self.coverage.items() if status == "diagnosed"]


def check_dimensions(dimensions: Iterable[str] | None) -> list[str]:
    """The requested dimensions in canonical order (all when None); an unknown one is an error."""
    if dimensions is None:
        return list(DIMENSIONS)
    wanted = list(dimensions)
    unknown = [d for d in wanted if d not in DIMENSIONS]
    if unknown:
        raise DiagnoseError(f"unknown dimension {unknown[0]!r} (choose from {', '.join(DIMENSIONS)})")
    return [d for d in DIMENSIONS if d in wanted] or list(DIMENSIONS)


def diagnose_view(view: TelemetryView | LazyView, th: Thresholds, dimensions: Iterable[str] | None = None,
                  timing: dict[str, float] | None = None) -> Diagnosis:
    """Run the requested families over decoded telemetry; never guesses where data is missing."""
    dims = check_dimensions(dimensions)
    timing = {} if timing is None else timing
    ctx = Context(view, th)
    t0 = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # all-NaN slices (a layer missing on some steps) give NaN, which the detectors handle
        warnings.simplefilter("ignore", RuntimeWarning)
        results = run_detectors(ctx, DETECTORS, dims)
    timing["detect"] = time.perf_counter() - t0
    findings: list[Finding] = []
    series: dict = {}
    judged: set[str] = set()
    coverage: dict[str, str] = {}
    notes: list[str] = []
    for dim in DIMENSIONS:
        if dim not in dims:
            coverage[dim] = "not requested"
            continue
        res = results[dim]
        timing[f"detect.{dim}"] = res.seconds
        findings += res.findings
        series.update(res.series)
        judged |= res.judged
        notes += res.notes
        coverage[dim] = "diagnosed" if res.judged else "not diagnosed"
    steps = view.step_count()
    t0 = time.perf_counter()
    edges, graph = correlation_edges(findings, series, th)
    timing["correlation"] = time.perf_counter() - t0
    findings.sort(key=lambda f: (f.onset_step, f.id))
    return Diagnosis(view.run, view.meta, findings, edges, graph, judged, coverage, notes, timing, steps,
                     recorded=frozenset(view.metrics), experts=shows_experts(view.meta, view.metrics))


ENGINES = ("auto", "memory", "duckdb", "ray")
"""How a run is read: ``memory`` (every row decoded, grids in memory), ``duckdb`` (out of core: scans over DuckDB
windows, ``lazyview``), ``ray`` (the same, its windows as Ray tasks), ``auto`` (out of core above
``diagnose.out_of_core.rows`` rows)."""


def choose_engine(run_dir: str | Path, th: Thresholds, engine: str) -> str:
    """The engine ``auto`` stands for on this run (the row count from the Parquet footers)."""
    if engine not in ENGINES:
        raise DiagnoseError(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    if engine != "auto":
        return engine
    try:
        rows = count_rows(run_dir)
    except TelemetryError:
        return "memory"  # the in-memory reader names the bad part
    return "duckdb" if rows > th.as_int("diagnose.out_of_core.rows") else "memory"


def diagnose_run(run_dir: str | Path, th: Thresholds, dimensions: Iterable[str] | None = None,
                 run_id: str | None = None, meta: dict[str, Any] | None = None, engine: str = "auto",
                 catalog: Catalog | None = None) -> Diagnosis:
    """Read a run directory's telemetry and diagnose it (``meta`` overrides run.json facts, e.g. the device).

    ``engine``: one of :data:`ENGINES`; the findings do not depend on it. ``catalog``: the run's catalog from an
    earlier pass (out of core: only new parts are read). Raises :class:`DiagnoseError` when the folder cannot be
    read or when no requested dimension could be diagnosed at all (the message says, per dimension, why).
    """
    dims = check_dimensions(dimensions)
    chosen = choose_engine(run_dir, th, engine)
    if chosen != "memory":
        return diagnose_out_of_core(run_dir, th, dims, run_id, meta, executor=None if chosen == "duckdb" else
                                    ray_executor(), catalog=catalog)
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        tel = read_telemetry(run_dir, dimensions=dims, columns=_COLUMNS)
    except TelemetryError as err:
        raise DiagnoseError(f"nothing diagnosed: {err}") from None
    timing["read"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    view = TelemetryView.from_table(tel.table, {**tel.meta, **(meta or {})},
                                    run=run_id or tel.run_id or Path(run_dir).name)
    rows = tel.table.num_rows
    del tel  # the decoded columns are all the detectors need
    pa.default_memory_pool().release_unused()
    timing["decode"] = time.perf_counter() - t0
    return _judged(run_dir, view, th, dims, rows, timing, "memory")


def _judged(run_dir: str | Path, view: TelemetryView | LazyView, th: Thresholds, dims: list[str], rows: int,
            timing: dict[str, float], engine: str) -> Diagnosis:
    if rows == 0:
        raise DiagnoseError(f"nothing diagnosed in {run_dir}: the run has no telemetry rows for "
                            f"{', '.join(dims)}")
    result = diagnose_view(view, th, dims, timing)
    if not result.diagnosed:
        raise DiagnoseError(f"nothing diagnosed in {run_dir}: " + "; ".join(result.notes or ["no usable metrics"]))
    result.engine, result.rows = engine, rows
    return result


def ray_executor() -> Executor:
    from debugtune.engine.diagnose.ray_scan import ray_executor as make

    return make()


def diagnose_out_of_core(run_dir: str | Path, th: Thresholds, dims: list[str], run_id: str | None = None,
                         meta: dict[str, Any] | None = None, executor: Executor | None = None,
                         catalog: Catalog | None = None, cache: Any = None) -> Diagnosis:
    """Diagnose a run out of core (``lazyview``): the catalog from the Parquet footers, scans over DuckDB windows
    (on Ray when ``executor`` is Ray's), only small metrics in memory."""
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise TelemetryError(run_dir, "run directory not found")
        run_meta = read_run_json(run_dir) if (run_dir / RUN_JSON).exists() else {}
        cat = read_catalog(run_dir, catalog)
        timing["catalog"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        view = LazyView(run_dir, cat, {**run_meta, **(meta or {})}, run_id or str(run_meta.get("run_id") or "")
                        or run_dir.name, dims, OutOfCore.from_thresholds(th), executor or local_executor, cache)
    except TelemetryError as err:
        raise DiagnoseError(f"nothing diagnosed: {err}") from None
    timing["read"] = time.perf_counter() - t0
    try:
        result = _judged(run_dir, view, th, dims, view.rows_total, timing, "ray" if executor else "duckdb")
    except TelemetryError as err:
        raise DiagnoseError(f"nothing diagnosed: {err}") from None
    finally:
        view.close()
    result.catalog = cat
    return result
