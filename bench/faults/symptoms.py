"""``python -m bench.faults.symptoms [OUT]``: how often each symptom was reported, per injected cause and on the
healthy runs of each family — the table to read before changing a detector or a link.

Reads the runs the last ``python -m bench.faults`` diagnosed (``OUT/samples.pickle``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections import defaultdict
from pathlib import Path

from bench.faults.runner import DEFAULT_OUT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults.symptoms", description=__doc__)
    ap.add_argument("out", type=Path, nargs="?", default=DEFAULT_OUT)
    ap.add_argument("--symptom", default="", help="only this symptom, per family")
    args = ap.parse_args(argv)
    path = args.out / "samples.pickle"
    if not path.exists():
        print(f"error: {path} not found: run python -m bench.faults first", file=sys.stderr)
        return 2
    samples = pickle.loads(path.read_bytes())
    table: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for s in samples:
        row = s.truth or f"healthy:{s.family}"
        if args.symptom:
            row = f"{s.truth or 'healthy'}:{s.family}"
        seen = {f.symptom for f in s.findings}
        for sym in s.judged:
            if args.symptom and sym != args.symptom:
                continue
            table[row][sym][1] += 1
            table[row][sym][0] += sym in seen
    for row in sorted(table):
        cells = [f"{sym} {k}/{n}" for sym, (k, n) in sorted(table[row].items()) if k]
        print(f"{row:<40} " + ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
