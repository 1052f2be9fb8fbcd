"""Scoring: top-1 / top-3 root-cause accuracy (macro over fault types), healthy false-positive rate and the
median steps from fault onset to detection, per diagnoser."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.faults.diagnosis import Ranked
from bench.faults.matrix import Cell


@dataclass(frozen=True)
class Judged:
    """A cell with its manifestation verdict and each diagnoser's answer (None: not diagnosed)."""

    cell: Cell
    manifested: bool
    why: str
    answers: dict[str, Ranked]


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def _rate(hits: int, n: int) -> float | None:
    return hits / n if n else None


def score(judged: list[Judged], system: str) -> dict[str, Any]:
    """Figures of one diagnoser: per fault type and macro, and on the healthy controls."""
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"total": 0, "manifested": 0, "top1": 0, "top3": 0,
                                                        "delays": [], "errors": 0})
    controls = {"total": 0, "valid": 0, "false_positives": 0, "errors": 0, "flagged": []}
    for j in judged:
        if j.cell.is_fault:
            row = per[j.cell.name]
            row["total"] += 1
            if not j.manifested:
                continue
            row["manifested"] += 1
            ans = j.answers.get(system)
            if ans is None:
                continue
            row["errors"] += ans.error is not None
            if ans.causes[:1] == (j.cell.name,):
                row["top1"] += 1
                if j.cell.name in ans.detection:
                    row["delays"].append(ans.detection[j.cell.name] - j.cell.onset)
            if j.cell.name in ans.causes[:3]:
                row["top3"] += 1
        else:
            controls["total"] += 1
            if not j.manifested:
                continue
            controls["valid"] += 1
            ans = j.answers.get(system)
            if ans is None:
                continue
            controls["errors"] += ans.error is not None
            if ans.causes:
                controls["false_positives"] += 1
                controls["flagged"].append(f"{j.cell} -> {ans.causes[0]}")
    faults = {}
    for name, row in sorted(per.items()):
        n = row["manifested"]
        faults[name] = {"total": row["total"], "manifested": n, "top1": _rate(row["top1"], n),
                        "top3": _rate(row["top3"], n), "median_delay": _median(row["delays"]), "errors": row["errors"]}
    scored = [f for f in faults.values() if f["manifested"]]
    all_delays = [d for row in per.values() for d in row["delays"]]
    return {
        "faults": faults,
        "macro_top1": float(np.mean([f["top1"] for f in scored])) if scored else None,
        "macro_top3": float(np.mean([f["top3"] for f in scored])) if scored else None,
        "median_delay": _median(all_delays),
        "fpr": _rate(controls["false_positives"], controls["valid"]),
        "controls": controls,
    }
