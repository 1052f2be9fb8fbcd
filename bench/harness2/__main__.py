"""``python -m bench.harness2 [--out DIR] [--seeds 0,1,2] [--jobs 2] [--programs a,b] [--retrain]``: train the second
harness's catalogue (cached by code version), judge manifestation, and write ``labels/``, ``runs/``,
``results.json``. ``python -m bench.faults`` then scores leave-one-harness-out over it."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import shutil
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from bench.faults.version import code_version
from bench.harness2.catalogue import PROGRAMS, SEEDS, Cell, cells
from bench.harness2.manifest import judge, summary
from debugtune.engine.telemetry.atomic import atomic_write_bytes

DEFAULT_OUT = Path(__file__).with_name("out")


def version() -> str:
    """The probe's code version (``bench.faults.version``) and this harness's own sources."""
    h = hashlib.sha256(code_version().encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _cached(out: Path, cell: Cell, ver: str) -> dict[str, Any] | None:
    try:
        lab = json.loads((out / "labels" / f"{cell.run_id}.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    ok = lab.get("code_version") == ver and (out / "runs" / cell.run_id / "run.json").exists()
    return lab if ok else None


def _train(out: Path, cell: Cell, ver: str) -> dict[str, Any]:
    """Train one cell (one CPU thread, the frameworks' chatter silenced) and write its label."""
    import torch

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    for name in ("lightning", "lightning.pytorch", "transformers"):
        logging.getLogger(name).setLevel(logging.ERROR)
    run = out / "runs" / cell.run_id
    shutil.rmtree(run, ignore_errors=True)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        outcome = PROGRAMS[cell.program](run, cell.seed, **cell.knobs)
    lab = {**cell.label(), "code_version": ver, "train_s": round(time.perf_counter() - t0, 3),
           "summary": summary(outcome.losses, outcome.learned, outcome.extra, outcome.final())}
    atomic_write_bytes(out / "labels" / f"{cell.run_id}.json", json.dumps(lab, indent=1, default=float).encode())
    return lab


def run(out: Path = DEFAULT_OUT, seeds: tuple[int, ...] = SEEDS, jobs: int = 2, programs: list[str] | None = None,
        retrain: bool = False, say: Any = print) -> list[dict[str, Any]]:
    """Train what is not cached, then judge every cell; returns the results' run records."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "labels").mkdir(exist_ok=True)
    ver, todo, labels = version(), [], {}
    for cell in cells(seeds, programs):
        lab = None if retrain else _cached(out, cell, ver)
        if lab is None:
            todo.append(cell)
        else:
            labels[cell.run_id] = lab
    say(f"harness 2: {len(labels) + len(todo)} cells, {len(todo)} to train, {len(labels)} cached in {out}")
    t0 = time.perf_counter()
    if todo:
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {pool.submit(_train, out, c, ver): c for c in todo}
            for n, fut in enumerate(as_completed(futures), 1):
                c = futures[fut]
                try:
                    labels[c.run_id] = fut.result()
                except Exception as err:  # noqa: BLE001 — a program that fails is reported, not fatal
                    say(f"  FAILED {c.program}:{c.name}:{c.variant}:{c.seed}: {type(err).__name__}: {err}")
                    continue
                if n % 10 == 0 or n == len(todo):
                    say(f"  trained {n}/{len(todo)} ({time.perf_counter() - t0:.0f} s)")
    healthy = {(lab["program"], lab["seed"]): lab for lab in labels.values() if lab["kind"] == "control"}
    records = []
    for lab in labels.values():
        ok, why = judge(lab, None if lab["kind"] == "control" else healthy.get((lab["program"], lab["seed"])))
        records.append({"run_id": lab["run_id"], "program": lab["program"], "name": lab["name"],
                        "severity": lab["severity"], "seed": lab["seed"], "manifested": ok, "why": why})
    atomic_write_bytes(out / "results.json", json.dumps({"version": ver, "runs": records}, indent=1).encode())
    faults = [r for r in records if r["name"] != "Healthy"]
    say(f"manifested: {sum(r['manifested'] for r in faults)}/{len(faults)} faults, "
        f"{sum(r['manifested'] for r in records if r['name'] == 'Healthy')}/{len(records) - len(faults)} "
        f"controls learn; training {time.perf_counter() - t0:.0f} s")
    return records


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.harness2", description=__doc__)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--programs", default=None, help="comma-separated program names (default: all)")
    ap.add_argument("--retrain", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="print every run's manifestation verdict")
    a = ap.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    records = run(a.out, tuple(int(s) for s in a.seeds.split(",")), a.jobs,
                  a.programs.split(",") if a.programs else None, a.retrain)
    if a.verbose:
        for r in sorted(records, key=lambda r: (r["program"], r["name"], r["severity"], r["seed"])):
            print(f"  {'yes' if r['manifested'] else 'no ':3} {r['program']}:{r['name']}:{r['severity']}:{r['seed']}"
                  f"  {r['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
