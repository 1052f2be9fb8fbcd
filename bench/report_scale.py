"""Scale benchmark of the HTML report: 1,024 ranks × 10,000 steps must render in under 10 MB.

    python bench/report_scale.py [--ranks 1024] [--steps 10000] [--keep DIR] [--no-diagnose]

The run is synthetic but shaped like a data-parallel MoE job and written with the real
``TelemetryWriter``: every rank records step and communication time (rank ``ranks // 3`` computes 15%
slower from 30% of the run on, and the others wait for it) and, every ``--hw-every`` steps, device
utilisation and temperature; rank 0 also records loss (a 128-step oscillation and one spike), learning
rate, gradient norms of 48 layers (the first ones vanishing) and tokens of 16 experts (one favoured).
The run is diagnosed end to end, then the report is built (gather + render) and written; the script
prints the size of the page, of the figure data alone, and the time of each stage. Numbers measured on
the shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

LIMIT_BYTES = 10_000_000
PERIOD, SLOWDOWN = 128, 0.15


def write_run(run_dir: str | Path, *, ranks: int, steps: int, run_id: str = "scale", layers: int = 48,
              experts: int = 16, hw_every: int = 10, seed: int = 0, entity_prefix: str = "layers") -> dict[str, int]:
    """Write the synthetic run described in the module docstring; returns where the faults were planted."""
    from debugtune.engine.telemetry import TelemetryWriter, write_run_json

    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    slow, onset = ranks // 3, int(0.3 * steps)
    s = np.arange(steps, dtype=np.int64)
    write_run_json(run_dir, {"run_id": run_id, "world_size": ranks, "framework": "synthetic",
                             "program": "report_scale"})
    compute = 100.0 * (1 + 0.02 * rng.standard_normal((ranks, steps)))
    compute[slow, onset:] *= 1 + SLOWDOWN
    slowest = compute.max(axis=0)
    transfer = 5.0 * (1 + 0.05 * rng.standard_normal((ranks, steps)))
    hw_steps = s[::hw_every]
    for r in range(ranks):
        with TelemetryWriter(run_dir, run_id, rank=r, flush_rows=1 << 22) as w:
            w.add_columns(s, "communication", "compute_ms", "", compute[r])
            w.add_columns(s, "communication", "comm_ms", "", slowest - compute[r] + transfer[r])
            w.add_columns(s, "communication", "step_time_ms", "", slowest + transfer[r] + rng.random(steps))
            util = 92 - (8 if r == slow else 0) + 2 * rng.standard_normal(len(hw_steps))
            w.add_columns(hw_steps, "hardware", "util_pct", f"device:{r}", util)
            w.add_columns(hw_steps, "hardware", "temp_c", f"device:{r}", 60 + 3 * rng.standard_normal(len(hw_steps)))
            if r == 0:
                _rank0(w, s, rng, layers, experts, entity_prefix)
    return {"slow_rank": slow, "slow_onset": onset}


def _rank0(w, s: np.ndarray, rng: np.random.Generator, layers: int, experts: int, prefix: str) -> None:
    steps = len(s)
    loss = (3.0 * np.exp(-s / (steps / 5)) + 1.5 + 0.35 * np.sin(2 * np.pi * s / PERIOD)
            + 0.05 * rng.standard_normal(steps))
    loss[steps // 2] += 4.0
    w.add_columns(s, "convergence", "loss", "", loss)
    warm = max(1, steps // 20)
    w.add_columns(s, "convergence", "lr", "", 3e-4 * np.minimum(1.0, (s + 1) / warm)
                  * (0.5 + 0.5 * np.cos(np.pi * s / steps)))
    depth = np.arange(layers)
    scale = 10.0 ** np.where(depth < layers // 4, -6.0 + depth * 0.1, -1.0 + 0.02 * depth)
    norms = scale[:, None] * np.exp(0.1 * rng.standard_normal((layers, steps)))
    for i in range(layers):
        w.add_columns(s, "gradient", "grad_norm", f"{prefix}.{i}", norms[i])
    w.add_columns(s, "gradient", "grad_norm", "", np.sqrt((norms ** 2).sum(axis=0)))
    p = np.full(experts, 1.0)
    p[1] = experts  # expert 1 gets half of the tokens
    tokens = rng.multinomial(4096, p / p.sum(), size=steps).T
    for e in range(experts):
        w.add_columns(s, "convergence", "expert_tokens", f"{prefix}.0.router/expert:{e}", tokens[e])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--hw-every", type=int, default=10, help="steps between hardware samples")
    ap.add_argument("--keep", type=Path, help="write the run and the report here and keep them")
    args = ap.parse_args(argv)

    from debugtune.api import diagnose
    from debugtune.engine.report import gather, render
    from debugtune.engine.report.page import plotly_js
    from debugtune.kg import open_store

    root = args.keep or Path(tempfile.mkdtemp(prefix="dt-report-scale-"))
    run_dir = root / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    times: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        planted = write_run(run_dir, ranks=args.ranks, steps=args.steps, hw_every=args.hw_every)
        times["write telemetry"] = time.perf_counter() - t0
        store = open_store(None)
        t0 = time.perf_counter()
        diag = diagnose(run_dir, store=store)
        times["diagnose"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        data = gather(store, diag.run, run_dir=run_dir)
        times["report: gather"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = render(data)
        times["report: render"] = time.perf_counter() - t0
        out = report.write(root / "report.html")
        size = out.stat().st_size
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    bundle = len(plotly_js().encode())
    print(f"report_scale: {args.ranks} ranks × {args.steps} steps (shared 2-core machine: times are noisy)")
    for name, sec in times.items():
        print(f"  {name:<18} {sec:8.2f} s")
    print(f"  page size          {size / 1e6:8.2f} MB  (limit {LIMIT_BYTES / 1e6:.2f} MB → "
          f"{'met' if size < LIMIT_BYTES else 'MISSED'}); plotly.js {bundle / 1e6:.2f} MB, "
          f"everything else {(size - bundle) / 1e6:.2f} MB")
    print(f"  plots {report.plots}, sections: " + ", ".join(f"{k}={v['state']}" for k, v in report.sections.items()))
    slow = [f for f in diag.findings if f.symptom == "SlowRank"]
    print(f"  planted slow rank {planted['slow_rank']}: "
          + (f"found as {slow[0].entity}" if slow else "not found by the diagnosis"))
    if args.keep is not None:
        print(f"  report: {root / 'report.html'}")
    return 0 if size < LIMIT_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
