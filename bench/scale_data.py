"""The scale bench's synthetic run, written rank batch by rank batch so that 1,024 ranks × 100,000 steps (307 M
rows) never sit in memory at once.

Shaped like a data-parallel job: every rank records its compute time, its all-reduce time (which includes waiting
for the slowest rank) and its step time; rank 0 records the loss and the learning rate. Rank ``ranks // 3``
computes 15% slower from step 30% on (the straggler the others wait for), and the loss carries a 128-step
oscillation of amplitude 0.35. Each rank's noise comes from its own random stream, so a rank's series can be
generated twice (once for the slowest rank of every step, once to write it) and a run can be written in parts
(``first``/``last`` steps: a run that grows, for ``--follow``).
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

PERIOD, AMPLITUDE, SLOWDOWN = 128, 0.35, 0.15
BATCH = 32


def straggler(ranks: int, steps: int) -> tuple[int, int]:
    """(the slow rank, the step it turns slow)."""
    return ranks // 3, int(0.3 * steps)


def _compute(ranks: range, steps: int, total_ranks: int, seed: int) -> tuple[np.ndarray, list[np.random.Generator]]:
    rngs = [np.random.default_rng([seed, r]) for r in ranks]
    compute = np.stack([100.0 * (1 + 0.02 * g.standard_normal(steps)) for g in rngs])
    slow, onset = straggler(total_ranks, steps)
    if slow in ranks:
        compute[slow - ranks.start, onset:] *= 1 + SLOWDOWN
    return compute, rngs


def _slowest_of(args: tuple[int, int, int, int, int]) -> np.ndarray:
    first, last, steps, ranks, seed = args
    out = np.full(steps, -np.inf)
    for a in range(first, last, BATCH):
        compute, _ = _compute(range(a, min(a + BATCH, last)), steps, ranks, seed)
        out = np.maximum(out, compute.max(axis=0))
    return out


def loss(steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 1 << 30])
    t = np.arange(steps)
    return 3.0 * np.exp(-t / (steps / 5)) + 1.5 + AMPLITUDE * np.sin(2 * np.pi * t / PERIOD) \
        + 0.05 * rng.standard_normal(steps)


def _write(args: tuple[str, int, int, int, int, int, int, int, np.ndarray]) -> int:
    from debugtune.engine.telemetry import TelemetryWriter

    run_dir, first_rank, last_rank, steps, ranks, seed, lo, hi, slowest = args
    s = np.arange(lo, hi, dtype=np.int64)
    for a in range(first_rank, last_rank, BATCH):
        batch = range(a, min(a + BATCH, last_rank))
        compute, rngs = _compute(batch, steps, ranks, seed)
        for i, rank in enumerate(batch):
            transfer = 5.0 * (1 + 0.05 * rngs[i].standard_normal(steps))
            jitter = 1.0 * rngs[i].random(steps)
            collective = slowest - compute[i] + transfer
            step_time = slowest + transfer + jitter
            with TelemetryWriter(run_dir, "scale", rank=rank, flush_rows=1 << 22) as w:
                w.add_columns(s, "communication", "compute_ms", "", compute[i, lo:hi])
                w.add_columns(s, "communication", "collective_ms", "allreduce", collective[lo:hi])
                w.add_columns(s, "communication", "step_time_ms", "", step_time[lo:hi])
                if rank == 0:
                    w.add_columns(s, "convergence", "loss", "", loss(steps, seed)[lo:hi])
                    w.add_columns(s, "convergence", "lr", "", np.full(hi - lo, 1e-4))
    return last_rank - first_rank


def write(run_dir: Path, ranks: int, steps: int, workers: int = 2, seed: int = 0, first: int = 0,
          last: int | None = None) -> int:
    """Write steps [first, last) of the run (run.json too); returns the rows written."""
    from debugtune.engine.telemetry import write_run_json

    last = steps if last is None else last
    write_run_json(run_dir, {"run_id": "scale", "world_size": ranks, "steps": steps, "framework": "synthetic"})
    bounds = np.linspace(0, ranks, workers * 4 + 1).astype(int)
    spans = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    with ProcessPoolExecutor(max(workers, 1)) as pool:
        slowest = np.max(list(pool.map(_slowest_of, [(a, b, steps, ranks, seed) for a, b in spans])), axis=0)
        list(pool.map(_write, [(str(run_dir), a, b, steps, ranks, seed, first, last, slowest) for a, b in spans]))
    return 3 * ranks * (last - first) + 2 * (last - first)
