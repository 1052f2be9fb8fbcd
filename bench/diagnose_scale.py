"""Scale benchmark of diagnosis: 1,024 ranks × 10,000 steps with a planted straggler and a planted oscillation.

    python bench/diagnose_scale.py [--ranks 1024] [--steps 10000] [--keep DIR]

Synthetic but shaped like a data-parallel job: every rank records its compute time, its all-reduce
time (which includes waiting for the slowest rank) and its step time; rank 0 records the loss.
Rank ``ranks // 3`` computes 15% slower from step 30% on (the straggler the others wait for), and
the loss carries a 128-step oscillation of amplitude 0.35. The telemetry is written with the real
writer (one Parquet partition per rank), read back with the real reader and diagnosed end to end
(detectors, correlation graph, SPARQL rules, causal scoring) through ``debugtune.diagnose``.
Prints the time of every stage, the findings, and whether both planted faults were found; the goal
is ≤ 60 s from read to hypotheses on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PERIOD, AMPLITUDE, SLOWDOWN = 128, 0.35, 0.15


def generate(ranks: int, steps: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Per-rank compute/collective/step times (ranks × steps, ms) and the loss of rank 0."""
    rng = np.random.default_rng(seed)
    compute = 100.0 * (1 + 0.02 * rng.standard_normal((ranks, steps)))
    straggler, onset = ranks // 3, int(0.3 * steps)
    compute[straggler, onset:] *= 1 + SLOWDOWN
    transfer = 5.0 * (1 + 0.05 * rng.standard_normal((ranks, steps)))
    slowest = compute.max(axis=0)
    collective = slowest - compute + transfer          # everyone waits for the slowest rank
    step_time = slowest + transfer + 1.0 * rng.random((ranks, steps))
    t = np.arange(steps)
    loss = 3.0 * np.exp(-t / (steps / 5)) + 1.5 + AMPLITUDE * np.sin(2 * np.pi * t / PERIOD) \
        + 0.05 * rng.standard_normal(steps)
    return {"compute_ms": compute, "collective_ms": collective, "step_time_ms": step_time, "loss": loss,
            "straggler": np.array([straggler, onset])}


def _write_ranks(args: tuple[str, int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]) -> int:
    from debugtune.engine.telemetry import TelemetryWriter

    run_dir, first, steps, compute, collective, step_time, loss = args
    s = np.arange(steps, dtype=np.int64)
    for i in range(compute.shape[0]):
        with TelemetryWriter(run_dir, "scale", rank=first + i, flush_rows=1 << 22) as w:
            w.add_columns(s, "communication", "compute_ms", "", compute[i])
            w.add_columns(s, "communication", "collective_ms", "allreduce", collective[i])
            w.add_columns(s, "communication", "step_time_ms", "", step_time[i])
            if loss is not None and first + i == 0:
                w.add_columns(s, "convergence", "loss", "", loss)
                w.add_columns(s, "convergence", "lr", "", np.full(steps, 1e-4))
    return compute.shape[0]


def write(run_dir: Path, data: dict[str, np.ndarray], workers: int) -> None:
    from debugtune.engine.telemetry import write_run_json

    ranks, steps = data["compute_ms"].shape
    write_run_json(run_dir, {"run_id": "scale", "world_size": ranks, "framework": "synthetic"})
    bounds = np.linspace(0, ranks, workers * 4 + 1).astype(int)
    jobs = [(str(run_dir), int(a), steps, data["compute_ms"][a:b], data["collective_ms"][a:b],
             data["step_time_ms"][a:b], data["loss"] if a == 0 else None)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_write_ranks, jobs))
    else:
        for job in jobs:
            _write_ranks(job)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2, help="processes used to write the telemetry")
    ap.add_argument("--keep", type=Path, help="write the run here and keep it (default: a temporary folder)")
    args = ap.parse_args(argv)

    from debugtune.api import diagnose

    times: dict[str, float] = {}
    t0 = time.perf_counter()
    data = generate(args.ranks, args.steps)
    times["generate"] = time.perf_counter() - t0
    straggler, onset = (int(x) for x in data["straggler"])
    root = args.keep or Path(tempfile.mkdtemp(prefix="dt-scale-"))
    run_dir = root / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    write(run_dir, data, args.workers)
    times["write"] = time.perf_counter() - t0
    rows = 3 * args.ranks * args.steps + 2 * args.steps
    del data
    try:
        t0 = time.perf_counter()
        report = diagnose(run_dir)
        total = time.perf_counter() - t0
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    stages = {**times, **report.timing_s}
    print(f"diagnose_scale: {args.ranks} ranks × {args.steps} steps = {rows / 1e6:.1f} M telemetry rows "
          f"(shared 2-core machine: figures are noisy)")
    for name, sec in stages.items():
        print(f"  {name:<24} {sec:8.2f} s")
    print(f"  {'diagnose (end to end)':<24} {total:8.2f} s   goal ≤ 60 s → {'met' if total <= 60 else 'MISSED'}")
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    for f in report.findings:
        ev = f.evidence_text(digits=3, limit=4)
        print(f"  finding {f.symptom:<22} {f.entity or '(run)':<14} steps {f.onset_step}-{f.end_step}  {ev}")
    slow = next((f for f in report.findings if f.symptom == "SlowRank"), None)
    osc = next((f for f in report.findings if f.symptom == "LossOscillation"), None)
    found_slow = slow is not None and slow.entity == f"rank:{straggler}"
    found_osc = osc is not None and abs(osc.evidence.get("period_steps", 0) - PERIOD) <= 0.05 * PERIOD
    print(f"  planted straggler rank {straggler} from step {onset}: "
          f"{'found' if found_slow else 'NOT found'}" + (f" (onset {slow.onset_step})" if slow else ""))
    print(f"  planted oscillation period {PERIOD}, amplitude ±{AMPLITUDE}: {'found' if found_osc else 'NOT found'}"
          + (f" (period {osc.evidence.get('period_steps', 0):.1f}, amplitude ±{osc.evidence.get('amplitude', 0):.2f})"
             if osc else ""))
    if report.hypotheses:
        print(f"  top hypothesis: {report.hypotheses[0].cause} ({report.hypotheses[0].confidence:.2f})")
    return 0 if found_slow and found_osc and total <= 60 else 1


if __name__ == "__main__":
    sys.exit(main())
