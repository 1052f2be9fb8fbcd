"""Training the matrix's cells (cached) and deciding which faults manifested.

Output layout under ``--out`` (default ``bench/faults/out``):
  runs/<run_id>/          the run directory: only what the probe wrote (telemetry, run.json)
  labels/<run_id>.json    the cell (fault, severity, seed, onset), the program's summary figures
  outcomes/<run_id>.npz   the program's own per-step series (for the manifestation criteria)
A cell is retrained when its label or run directory is missing, when its label was written by another code
version (``bench.faults.version``: the scenarios, the probe and its settings changed since), or with ``retrain``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np

from bench.faults import criteria
from bench.faults.matrix import Cell, healthy_cell
from bench.faults.version import code_version
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.scenarios.programs import PROGRAMS, Outcome, run

DEFAULT_OUT = Path(__file__).with_name("out")


def run_dir(out: Path, cell: Cell) -> Path:
    return out / "runs" / cell.run_id


def _label_path(out: Path, cell: Cell) -> Path:
    return out / "labels" / f"{cell.run_id}.json"


def _outcome_path(out: Path, cell: Cell) -> Path:
    return out / "outcomes" / f"{cell.run_id}.npz"


def is_cached(out: Path, cell: Cell, probe: bool) -> bool:
    label = _label_path(out, cell)
    if not label.exists() or not _outcome_path(out, cell).exists():
        return False
    try:
        meta = json.loads(label.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    if meta.get("probe") != probe or meta.get("code_version") != code_version():
        return False
    return not probe or (run_dir(out, cell) / "run.json").exists()


def train_cell(out: Path, cell: Cell, probe: bool, version: str | None = None) -> dict[str, Any]:
    """Train one cell into its run directory and store its label (with the code ``version`` it was trained
    by, the current one by default) and outcome; returns the label."""
    rd = run_dir(out, cell)
    if rd.exists():
        shutil.rmtree(rd)
    if probe:
        rd.mkdir(parents=True)
    t0 = time.perf_counter()
    oc = run(cell.program, cell.overrides, seed=cell.seed, run_dir=rd if probe else None, probe=probe,
             run_id=cell.run_id)
    label = {**cell.label(), "probe": probe, "code_version": version or code_version(),
             "train_s": round(time.perf_counter() - t0, 3), "summary": oc.summary}
    _outcome_path(out, cell).parent.mkdir(parents=True, exist_ok=True)
    tmp = _outcome_path(out, cell).with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **oc.series)
    os.replace(tmp, _outcome_path(out, cell))
    atomic_write_bytes(_label_path(out, cell), json.dumps(label, indent=1, default=float).encode())
    return label


def load_outcome(out: Path, cell: Cell) -> Outcome:
    label = json.loads(_label_path(out, cell).read_text())
    with np.load(_outcome_path(out, cell)) as z:
        series = {k: z[k] for k in z.files}
    return Outcome(cell.program, series, label["summary"])


def _train_worker(args: tuple[str, Cell, bool, str]) -> tuple[Cell, dict[str, Any]]:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    out, cell, probe, version = args
    return cell, train_cell(Path(out), cell, probe, version)


def train_all(out: Path, cells: Iterable[Cell], *, probe: bool, retrain: bool, jobs: int,
              progress: Callable[[Cell, bool], None] | None = None) -> None:
    """Train every cell not cached (or all with ``retrain``); ``jobs`` worker processes for the single-process
    programs, the multi-process (gloo) ones one after another in this process."""
    version = code_version()
    todo = [c for c in cells if retrain or not is_cached(out, c, probe)]
    done = [c for c in cells if c not in todo]
    for c in done:
        if progress:
            progress(c, True)
    local = [c for c in todo if PROGRAMS[c.program].kind == "ddp" or jobs <= 1]
    pooled = [c for c in todo if c not in local]
    if pooled:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_train_worker, (str(out), c, probe, version)) for c in pooled]
            for fut in as_completed(futures):
                cell, _ = fut.result()
                if progress:
                    progress(cell, False)
    for c in local:
        train_cell(out, c, probe, version)
        if progress:
            progress(c, False)


def verdict(out: Path, cell: Cell) -> criteria.Verdict:
    """Whether the cell's fault (or look-alike) manifested, from its outcome and its healthy reference."""
    oc = load_outcome(out, cell)
    ref = load_outcome(out, healthy_cell(cell.program, cell.seed))
    return criteria.check(cell.name, oc, ref, cell.onset)
