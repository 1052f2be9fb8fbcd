"""Printing the benchmark's figures: leave-one-family-out first, the baseline beside it, in-distribution beneath."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.faults.calibration import Figures
from bench.faults.lofo import Lofo
from bench.faults.loho import Loho


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def num(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}"


def rate(hits: int, n: int) -> str:
    return f"{hits}/{n}" if n else "—"


def figures_dict(f: Figures) -> dict[str, Any]:
    """A Figures object as JSON-able numbers (results.json)."""
    return {"macro_top1": f.top1, "macro_top3": f.top3, "fpr": f.fpr, "ece": f.ece, "nll": f.nll,
            "median_delay": f.delay, "faults": f.faults, "controls": f.controls, "no_hypothesis": f.no_hypothesis,
            "per_cause": {c: {"top1": a, "top3": b, "n": n} for c, (a, b, n) in f.per_cause.items()},
            "per_family": {k: {"top1": a, "n": n} for k, (a, n) in f.per_family.items()},
            "reliability": [{"confidence": c, "accuracy": a, "runs": n} for c, a, n in f.bins],
            "false_positives": list(f.false_positives)}


def print_lofo(console: Console, lofo: Lofo, baseline: Mapping[str, Any] | None,
               inside: Mapping[str, Any] | None) -> None:
    """The headline table (held-out families) with the AutoTrainer rules beside it, then per cause and per family,
    then the reliability diagram, then the in-distribution figures."""
    f = lofo.pooled
    summary = Table(title="leave one family out (each family scored by a calibration fitted without it)")
    summary.add_column("figure")
    summary.add_column("debugtune, held-out family", justify="right")
    summary.add_column("AutoTrainer rules", justify="right")
    summary.add_column("debugtune, in-distribution", justify="right")
    b, i = baseline or {}, inside or {}
    rows = (("macro top-1", f.top1, b.get("macro_top1"), i.get("macro_top1"), pct),
            ("macro top-3", f.top3, b.get("macro_top3"), i.get("macro_top3"), pct),
            ("healthy false-positive rate", f.fpr, b.get("fpr"), i.get("fpr"), pct),
            ("ECE of the top hypothesis", f.ece, None, i.get("ece"), lambda x: "—" if x is None else f"{x:.3f}"),
            ("median steps onset → detection", f.delay, b.get("median_delay"), i.get("median_delay"), num))
    for label, a, base, ins, fmt in rows:
        summary.add_row(label, fmt(a), fmt(base), fmt(ins))
    summary.add_row("faulty runs with no hypothesis", rate(f.no_hypothesis, f.faults), "", "")
    summary.add_row("healthy runs (valid)", str(f.controls), "", "")
    console.print(summary)
    per = Table(title="held-out top-1 / top-3 per cause")
    per.add_column("cause")
    per.add_column("runs", justify="right")
    per.add_column("top-1", justify="right")
    per.add_column("top-3", justify="right")
    per.add_column("AutoTrainer top-1", justify="right")
    for cause, (a1, a3, n) in sorted(f.per_cause.items()):
        base = ((b.get("faults") or {}).get(cause) or {}).get("top1")
        per.add_row(cause, str(n), pct(a1 / n), pct(a3 / n), pct(base))
    console.print(per)
    fam = Table(title="held-out top-1 per family (the family left out)")
    fam.add_column("family")
    fam.add_column("faulty runs", justify="right")
    fam.add_column("top-1", justify="right")
    fam.add_column("healthy false positives", justify="right")
    fam.add_column("temperature", justify="right")
    for fold in lofo.folds:
        a, n = fold.figures.per_family.get(fold.family, (0, 0))
        fam.add_row(fold.family, str(n), pct(a / n) if n else "—",
                    rate(len(fold.figures.false_positives), fold.figures.controls), f"{fold.temperature:.2f}")
    console.print(fam)
    rel = Table(title="reliability of the top hypothesis (held-out)")
    rel.add_column("mean confidence", justify="right")
    rel.add_column("accuracy", justify="right")
    rel.add_column("runs", justify="right")
    for conf, acc, n in f.bins:
        rel.add_row(f"{conf:.2f}", f"{acc:.2f}", str(n))
    console.print(rel)
    for line in f.false_positives:
        console.print(f"  held-out false positive: {line}", highlight=False)


def _ece(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def print_loho(console: Console, loho: Loho, lofo_figures: Figures | None) -> None:
    """Leave one harness out first (the widest held-out figure), each direction, with leave-one-family-out beside
    it and the gap; then per cause and per family of each held-out harness, with the runs behind each."""
    summary = Table(title="leave one harness out (each harness scored by a calibration fitted on the other)")
    summary.add_column("figure")
    for fold in loho.folds:
        summary.add_column(f"held out {fold.family}", justify="right")
    summary.add_column("pooled", justify="right")
    summary.add_column("leave one family out", justify="right")
    summary.add_column("gap", justify="right")
    cols = [f.figures for f in loho.folds] + [loho.pooled]
    for label, key, fmt in (("macro top-1", "top1", pct), ("macro top-3", "top3", pct),
                            ("healthy false-positive rate", "fpr", pct), ("ECE of the top hypothesis", "ece", _ece)):
        values = [getattr(c, key) for c in cols]
        other = getattr(lofo_figures, key) if lofo_figures is not None else None
        gap = None if other is None else other - values[-1]
        summary.add_row(label, *[fmt(v) for v in values], fmt(other),
                        "—" if gap is None else (f"{100 * gap:+.0f} pts" if key != "ece" else f"{-gap:+.3f}"))
    summary.add_row("faulty runs with no hypothesis", *[rate(c.no_hypothesis, c.faults) for c in cols], "", "")
    summary.add_row("healthy runs (valid)", *[str(c.controls) for c in cols], "", "")
    console.print(summary)
    for fold in loho.folds:
        f = fold.figures
        per = Table(title=f"held-out harness {fold.family}: top-1 / top-3 per cause")
        for col in ("cause", "runs", "top-1", "top-3"):
            per.add_column(col, justify="left" if col == "cause" else "right")
        for cause, (a1, a3, n) in sorted(f.per_cause.items()):
            per.add_row(cause, str(n), pct(a1 / n), pct(a3 / n))
        console.print(per)
        fam = Table(title=f"held-out harness {fold.family}: top-1 per family")
        for col in ("family", "faulty runs", "top-1"):
            fam.add_column(col, justify="left" if col == "family" else "right")
        for name, (a, n) in sorted(f.per_family.items()):
            fam.add_row(name, str(n), pct(a / n) if n else "—")
        console.print(fam)
        for line in f.false_positives:
            console.print(f"  held-out harness {fold.family} false positive: {line}", highlight=False)
