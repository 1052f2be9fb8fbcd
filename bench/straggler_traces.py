"""Synthetic straggler traces of our own making: a 1F1B pipeline × data-parallel job simulated op by op, with one
cause planted per scenario, written in the two forms ByteDance's straggler study publishes its traces in (a
per-operation Parquet table and a Chrome/Perfetto timeline whose tracks are workers).

The simulation is a small discrete-event schedule, not a replay of anyone's trace: per step each data-parallel
replica runs Megatron's non-interleaved 1F1B schedule (``P − p − 1`` warm-up forwards on stage ``p``, then one
forward / one backward, then the cool-down backwards; backward = 2 × forward), a forward of microbatch ``mb`` on
stage ``p`` waits for the one on ``p − 1`` (a backward for the one on ``p + 1``) plus the point-to-point transfer;
the time a worker waits is a ``*-recv`` op. Then each stage's data-parallel group reduce-scatters its gradients
(every member leaves when the last arrives), the first and last stage of each replica all-reduce the tied
embedding's gradients (``embedding-grads-all-reduce``), all ranks all-reduce the gradient norm
(``optimizer-clip-main-grad``), step the optimizer and all-gather the parameters. Ranks are numbered in Megatron's
order (tp-cp-ep-dp-pp): ``rank = (stage × dp + dp_rank) × tp``; as in ByteDance's traces only tensor-parallel rank 0
of each worker is traced.

Scenarios (the cause planted, the symptom that must come first and where):

- ``slow-stage``: dp 2 × pp 4, the last stage computes 1.62 × (an uneven layer partition: every rank of stage 3);
- ``slow-rank``: dp 4 × pp 4 × tp 4 (16 traced workers of 64), the worker (dp 0, stage 0) computes 2.35 × (one
  slow GPU: rank 0 only);
- ``sequence-lengths``: dp 16 × pp 2, each replica's microbatches carry lengths drawn afresh per step (compute
  ∝ length, log-normal), so a different replica is slowest on each step and no rank persistently; the last stage
  also computes 1.2 × (it holds the loss, whose cost follows the lengths too);
- ``balanced``: dp 4 × pp 2, nothing planted (the control).

The sizes and factors follow what ByteDance's study reports of its three traces (ST dp 2 × pp 4, stage 3 at 1.62 ×;
AR dp 4 × pp 4 × tp 4, one worker at 2.35 ×; SE a long last stage besides the length imbalance), not their data.

Run: ``python -m bench.straggler_traces OUT [--steps 30] [--seed 0] [--no-timeline-steps]`` writes
``<scenario>/trace.parquet`` and ``<scenario>/timeline.json.gz`` per scenario; ``bench/trace_agreement.py``
diagnoses them in both forms.
"""

from __future__ import annotations

import argparse
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FORWARD_S = 0.010        # one microbatch's forward on a balanced stage
TRANSFER_S = 0.0008      # point-to-point activation / gradient transfer
SEND_S = 0.0003          # the sender's share of a transfer
REDUCE_S, EMBED_S, NORM_S, OPTIM_S, GATHER_S = 0.012, 0.002, 0.001, 0.008, 0.010
JITTER = 0.03            # per-op compute noise (relative)
TRACKS = ("compute", "pp-comm", "tp-comm", "dp-comm", "misc")  # ByteDance's timeline tracks per worker


@dataclass(frozen=True)
class Scenario:
    name: str
    dp: int
    pp: int
    cause: str | None                   # the planted root cause (None: the control)
    symptom: str | None                 # the finding that must come first
    where: tuple[int, ...]              # the ranks it is located on (empty: the whole run)
    stage_factor: dict[int, float] = field(default_factory=dict)          # stage → compute factor
    worker_factor: dict[tuple[int, int], float] = field(default_factory=dict)  # (dp, stage) → compute factor
    length_sigma: float = 0.0           # log-normal σ of the per-(replica, step) and per-microbatch lengths
    microbatches: int = 8
    tp: int = 1                         # tensor-parallel size (only tp rank 0 of each worker is traced)


SCENARIOS = (
    Scenario("slow-stage", 2, 4, "PipelineStageImbalance", "SlowPipelineStage", (6, 7), stage_factor={3: 1.62}),
    Scenario("slow-rank", 4, 4, "StragglerRank", "SlowRank", (0,), worker_factor={(0, 0): 2.35}, tp=4),
    Scenario("sequence-lengths", 16, 2, "SequenceLengthImbalance", "ComputeImbalance", (), stage_factor={1: 1.2},
             length_sigma=0.3, microbatches=4),
    Scenario("balanced", 4, 2, None, None, ()),
)


def plan() -> dict[str, Scenario]:
    return {s.name: s for s in SCENARIOS}


class _Worker:
    """The ops one worker has recorded and the time it is free again."""

    def __init__(self, dp: int, stage: int, rank: int):
        self.dp, self.stage, self.rank, self.free = dp, stage, rank, 0.0
        self.ops: list[tuple[int, str, float, float, int]] = []  # step, optype, start, duration, microbatch

    def run(self, step: int, op: str, start: float, dur: float, mb: int = -1) -> float:
        self.ops.append((step, op, start, dur, mb))
        self.free = start + dur
        return self.free


def _order(stage: int, pp: int, m: int) -> list[tuple[str, int]]:
    """Megatron's non-interleaved 1F1B order of one stage: ('F' | 'B', microbatch)."""
    warm = min(pp - stage - 1, m)
    seq = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        seq += [("F", warm + i), ("B", i)]
    return seq + [("B", i) for i in range(m - warm, m)]


def _pipeline(step: int, workers: dict[tuple[int, int], _Worker], sc: Scenario, fwd: np.ndarray,
              t0: float) -> None:
    """One step's forward/backward of every replica, op by op in dependency order."""
    m = sc.microbatches
    for d in range(sc.dp):
        done: dict[tuple[str, int, int], float] = {}  # (F|B, stage, mb) → end
        queues = {p: _order(p, sc.pp, m) for p in range(sc.pp)}
        for p in range(sc.pp):
            workers[d, p].free = max(workers[d, p].free, t0)
        while any(queues.values()):
            progressed = False
            for p in range(sc.pp):
                if not queues[p]:
                    continue
                kind, mb = queues[p][0]
                dep = (kind, p - 1, mb) if kind == "F" else (kind, p + 1, mb)
                first, last = p == 0 and kind == "F", p == sc.pp - 1 and kind == "B"
                if not (first or last) and dep not in done:
                    continue
                w = workers[d, p]
                if not (first or last):
                    arrive = done[dep] + TRANSFER_S
                    wait = max(arrive - w.free, TRANSFER_S)
                    w.run(step, "forward-recv" if kind == "F" else "backward-recv", w.free, wait)
                dur = fwd[d, p, mb] * (1.0 if kind == "F" else 2.0)
                done[kind, p, mb] = w.run(step, "forward-compute" if kind == "F" else "backward-compute",
                                          w.free, dur, mb)
                if (kind == "F" and p < sc.pp - 1) or (kind == "B" and p > 0):
                    w.run(step, "forward-send" if kind == "F" else "backward-send", w.free, SEND_S)
                queues[p].pop(0)
                progressed = True
            assert progressed, "1F1B schedule deadlocked"


def _collective(step: int, group: list[_Worker], op: str, dur: float) -> None:
    """Every member enters when it is free and leaves when the last one has arrived plus ``dur``."""
    end = max(w.free for w in group) + dur
    for w in group:
        w.run(step, op, w.free, end - w.free)


def simulate(sc: Scenario, steps: int = 30, seed: int = 0) -> pa.Table:
    """The per-operation table of the scenario (ByteDance's columns; times in seconds)."""
    rng = np.random.default_rng(seed)
    workers = {(d, p): _Worker(d, p, (p * sc.dp + d) * sc.tp) for d in range(sc.dp) for p in range(sc.pp)}
    stage = np.array([sc.stage_factor.get(p, 1.0) for p in range(sc.pp)])
    t = 0.0
    for step in range(steps):
        fwd = FORWARD_S * np.ones((sc.dp, sc.pp, sc.microbatches)) * stage[None, :, None]
        for (d, p), f in sc.worker_factor.items():
            fwd[d, p] *= f
        if sc.length_sigma:  # a microbatch's length is the same on every stage of its replica
            per_replica = np.exp(sc.length_sigma * rng.standard_normal((sc.dp, 1, 1)))
            per_mb = np.exp(0.5 * sc.length_sigma * rng.standard_normal((sc.dp, 1, sc.microbatches)))
            fwd *= per_replica * per_mb
        fwd *= 1 + JITTER * rng.standard_normal(fwd.shape)
        _pipeline(step, workers, sc, fwd, t)
        for p in range(sc.pp):
            _collective(step, [workers[d, p] for d in range(sc.dp)], "grads-reduce-scatter", REDUCE_S)
        if sc.pp > 1:  # the tied embedding lives on the first and the last stage of each replica
            for d in range(sc.dp):
                _collective(step, [workers[d, 0], workers[d, sc.pp - 1]], "embedding-grads-all-reduce", EMBED_S)
        everyone = list(workers.values())
        _collective(step, everyone, "optimizer-clip-main-grad", NORM_S)
        for w in everyone:
            w.run(step, "optimizer", w.free, OPTIM_S * (1 + JITTER * rng.standard_normal()))
        for p in range(sc.pp):
            _collective(step, [workers[d, p] for d in range(sc.dp)], "params-all-gather", GATHER_S)
        t = max(w.free for w in everyone) + 0.002
    cols: dict[str, list[Any]] = {k: [] for k in ("dp_rank", "stage", "rank", "tp_rank", "step", "optype",
                                                  "start_ts", "duration", "mb_id")}
    for w in workers.values():
        for step, op, start, dur, mb in w.ops:
            for k, v in zip(cols, (w.dp, w.stage, w.rank, 0, step, op, start, dur, mb), strict=True):
                cols[k].append(v)
    return pa.table(cols)


def _track(op: str) -> int:
    if "send" in op or "recv" in op:
        return TRACKS.index("pp-comm")
    if any(k in op for k in ("reduce-scatter", "all-gather", "all-reduce", "clip-main-grad")):
        return TRACKS.index("dp-comm")
    return TRACKS.index("compute")


def timeline(table: pa.Table, *, with_steps: bool = True) -> list[dict[str, Any]]:
    """The table as a Chrome/Perfetto timeline laid out as ByteDance's ``to_timeline`` does: one process per DP
    rank, one thread per (worker, stream) named "PP rank p, TP rank t, <stream>", ``ph: X`` events in µs. Without
    ``with_steps`` the events carry no step number (steps must be recovered from the op sequence)."""
    rows = table.to_pylist()
    events: list[dict[str, Any]] = []
    for r in rows:
        args: dict[str, Any] = {"step": r["step"], "mb_id": r["mb_id"] if r["mb_id"] >= 0 else None} \
            if with_steps else {}
        events.append({"name": r["optype"], "cat": r["optype"], "ph": "X", "pid": r["dp_rank"],
                       "tid": r["rank"] * len(TRACKS) + _track(r["optype"]), "ts": r["start_ts"] * 1e6,
                       "dur": r["duration"] * 1e6, "args": args})
    workers = sorted({(r["dp_rank"], r["stage"], r["rank"]) for r in rows})
    for d, p, rank in workers:
        for i, name in enumerate(TRACKS):
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": rank * len(TRACKS) + i,
                           "args": {"name": f"PP rank {p}, TP rank 0, {name}"}})
    for d in sorted({w[0] for w in workers}):
        events.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": f"DP rank [{d}]"}})
    return events


def write(sc: Scenario, out: Path, steps: int = 30, seed: int = 0, *, timeline_steps: bool = True) -> Path:
    """``out/<scenario>/trace.parquet`` and ``timeline.json.gz`` (its events without step numbers unless
    ``timeline_steps``); returns the folder."""
    folder = out / sc.name
    folder.mkdir(parents=True, exist_ok=True)
    table = simulate(sc, steps, seed)
    pq.write_table(table, folder / "trace.parquet")
    with gzip.open(folder / "timeline.json.gz", "wt", encoding="utf-8") as fh:
        json.dump(timeline(table, with_steps=timeline_steps), fh)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-timeline-steps", action="store_true", help="timeline events without step numbers")
    args = parser.parse_args()
    for sc in SCENARIOS:
        print(write(sc, args.out, args.steps, args.seed, timeline_steps=not args.no_timeline_steps))


if __name__ == "__main__":
    main()
