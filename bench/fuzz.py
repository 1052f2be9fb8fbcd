"""Fuzzing every reader of outside input: counts per reader of inputs read, refused cleanly, and escaped.

    python bench/fuzz.py [--cases 2000] [--only importers,lint,dsl,packages,sparql] [--start 0] [--json]

The targets and mutations are tests/fuzz_targets.py (the CI suite, tests/test_fuzz.py, runs a few
hundred of the same cases). "unhandled" counts any exception that is not the project's one-line error
(a traceback for the user, or exit 1 from `cann-debug lint`, which means "violations found"); the
goal is 0. The first examples of each kind are printed with the case number to replay.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from tests.fuzz_targets import TARGETS, run_cases

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="cases per reader")
    ap.add_argument("--start", type=int, default=0, help="first case number (seeds are case numbers)")
    ap.add_argument("--only", default=",".join(TARGETS), help="comma-separated readers")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    report = {}
    for target in args.only.split(","):
        t0 = time.perf_counter()
        outcomes = run_cases(target, range(args.start, args.start + args.cases))
        status = Counter(o.status for o in outcomes)
        kinds = Counter(o.kind for o in outcomes if o.status == "unhandled")
        examples = {}
        for case, o in zip(range(args.start, args.start + args.cases), outcomes, strict=True):
            if o.status == "unhandled" and o.kind not in examples:
                examples[o.kind] = {"case": case, "detail": o.detail}
        report[target] = {"cases": len(outcomes), "ok": status["ok"], "handled": status["handled"],
                          "unhandled": status["unhandled"], "unhandled_by_kind": dict(kinds),
                          "seconds": round(time.perf_counter() - t0, 1), "examples": examples}
        if not args.json:
            r = report[target]
            print(f"{target:10s} {r['cases']:6d} cases  ok {r['ok']:6d}  handled {r['handled']:6d}  "
                  f"unhandled {r['unhandled']:4d}  {r['seconds']:7.1f} s  {dict(kinds) or ''}", flush=True)
            for kind, ex in examples.items():
                print(f"    {kind} (case {ex['case']}):\n      " + ex["detail"].replace("\n", "\n      "))
    if args.json:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
