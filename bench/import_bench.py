"""PyTorch-trace import speed: debugtune's streamed importer against Holistic Trace Analysis, side by side.

Both load the same trace files: ours with ``import_path`` (streamed parse, per-step analysis, Parquet written),
HTA with ``TraceAnalysis(trace_dir=...)`` (its default loader). Speed is MB of uncompressed trace JSON per second
of wall time; the ratio is ours / HTA (goal ≥ 5×). The shared fixtures are small, so a larger trace made by
repeating the real events of ``nccl_allreduce_rank0.json.gz`` (timestamps, step numbers and correlation ids
shifted) is timed too; its rows say "synthetic".

Run: ``python bench/import_bench.py [--fixtures ../shared/fixtures] [--repeat 8] [--rounds 3]``
(needs ``traceinsight`` or ``HolisticTraceAnalysis`` for the HTA column; without it only our figures print).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from debugtune.engine.capture.importers import import_path

REPO = Path(__file__).resolve().parent.parent


def _json_mb(files: list[Path]) -> float:
    total = 0
    for f in files:
        with gzip.open(f, "rb") if f.name.endswith(".gz") else open(f, "rb") as fh:
            while chunk := fh.read(1 << 22):
                total += len(chunk)
    return total / 1e6


def _synthetic(src: Path, repeat: int, out: Path) -> Path:
    """A trace of ``repeat`` copies of the real events of ``src``, shifted so that they follow each other."""
    with gzip.open(src, "rt") as fh:
        trace = json.load(fh)
    events = trace.pop("traceEvents")
    times = [e["ts"] for e in events if isinstance(e.get("ts"), int | float)]
    span = max(times) - min(times) + 1000.0
    steps = [int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    step_span = max(steps) - min(steps) + 1 if steps else 0
    corr_span = 1 + max((e.get("args", {}).get("correlation", 0) for e in events
                         if isinstance(e.get("args", {}).get("correlation"), int)), default=0)
    path = out / "rank0.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write(json.dumps(trace)[:-1] + ', "traceEvents": [')
        first = True
        for k in range(repeat):
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), int | float):
                    e2["ts"] = e["ts"] + k * span
                if str(e2.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + k * step_span}"
                args = e.get("args")
                if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                    e2["args"] = {**args, "correlation": args["correlation"] + k * corr_span}
                fh.write(("" if first else ",\n") + json.dumps(e2))
                first = False
        fh.write("]}")
    return path


def _time_ours(trace_dir: Path, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            import_path(trace_dir, Path(tmp) / "run")
            best = min(best, time.perf_counter() - t0)
    return best


def _time_hta(trace_dir: Path, rounds: int) -> float | None:
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    logging.getLogger("hta").setLevel(logging.ERROR)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            TraceAnalysis(trace_dir=str(trace_dir))
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--repeat", type=int, default=8, help="copies of the real events in the synthetic trace")
    parser.add_argument("--rounds", type=int, default=3, help="best of N timings per side")
    args = parser.parse_args()
    traces = args.fixtures / "pytorch-profiler"
    if not traces.is_dir():
        raise SystemExit(f"no traces at {traces}")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    work = Path(tempfile.mkdtemp(prefix="import-bench-"))
    cases = []
    try:
        for name, files in (("nccl_allreduce_rank0 (real)", ["nccl_allreduce_rank0.json.gz"]),
                            ("sampled_rank-0/1 (real, 2 ranks)", ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"])):
            d = work / name.split()[0].replace("/", "_")
            d.mkdir()
            for f in files:
                (d / f).symlink_to(traces / f)
            cases.append((name, d))
        synth = work / "synthetic"
        synth.mkdir()
        _synthetic(traces / "nccl_allreduce_rank0.json.gz", args.repeat, synth)
        cases.append((f"synthetic: nccl_allreduce events x{args.repeat}", synth))
        print(f"{'trace':<40} {'JSON MB':>8} {'ours s':>8} {'ours MB/s':>10} {'HTA s':>8} {'HTA MB/s':>9} {'ratio':>7}")
        for name, d in cases:
            mb = _json_mb(sorted(p for p in d.iterdir()))
            ours = _time_ours(d, args.rounds)
            hta = _time_hta(d, args.rounds)
            hta_cols = (f"{hta:>8.2f} {mb / hta:>9.1f} {hta / ours:>6.1f}x" if hta else
                        f"{'—':>8} {'—':>9} {'—':>7}")
            print(f"{name:<40} {mb:>8.1f} {ours:>8.3f} {mb / ours:>10.1f} {hta_cols}")
        print("times: best of", args.rounds, "runs, wall clock; machine shared with other work, so figures are noisy")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
