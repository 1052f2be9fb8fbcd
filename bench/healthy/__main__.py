"""Train every healthy program once and print steps, seconds (wall and CPU) and its learning figures.

``python -m bench.healthy [--probe] [--seed N] [--json] [NAME ...]``: the figures the
family notes quote (bench/faults/NOTES.md); with ``--probe`` each run writes telemetry into a
temporary run directory, as the fault benchmark's runs do.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from bench.healthy import HEALTHY


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.healthy", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"programs (default: all of {', '.join(HEALTHY)})")
    parser.add_argument("--probe", action="store_true", help="attach the live probe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object per program")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in HEALTHY]
    if unknown:
        parser.error(f"unknown program(s) {', '.join(unknown)}; expected one of {', '.join(HEALTHY)}")
    if args.probe:
        from debugtune.scenarios.common import knowledge_thresholds

        knowledge_thresholds()  # loaded once per process, outside the timings
    failed = 0
    for name in args.names or list(HEALTHY):
        prog = HEALTHY[name]
        with tempfile.TemporaryDirectory() as tmp:
            wall, cpu = time.perf_counter(), time.process_time()
            series, summary = prog.train(args.seed, tmp if args.probe else None, args.probe, name)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        failed += not summary["learned"]
        row = {"program": name, "family": prog.family, "steps": len(series["loss"]), "wall_s": round(wall, 2),
               "cpu_s": round(cpu, 2), "learned": summary["learned"], "why": summary["why"]}
        print(json.dumps(row) if args.json else
              f"{name:20} {prog.family:21} {row['steps']:4d} steps {wall:5.2f} s wall {cpu:5.2f} s cpu  "
              f"{'learned' if summary['learned'] else 'NOT LEARNED'}: {summary['why']}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
