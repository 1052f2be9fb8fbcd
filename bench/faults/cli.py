"""``python -m bench.faults``: train the matrix (cached), check manifestation, diagnose every run, then score
leave-one-family-out (the headline), the AutoTrainer rules beside it, and in-distribution beneath.

``--write-calibration`` writes the knowledge base's calibration fitted on every family (profiles, links, leaks)
with the temperature fitted on out-of-family predictions (``cases/links-calibrated.ttl``,
``cases/thresholds/leaks.ttl``, ``cases/thresholds/calibration.ttl``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.faults import runner
from bench.faults.calibration import Sample, base_store, cause_sources, diagnose_sample, manifested, to_turtle
from bench.faults.diagnosis import SYSTEMS, Ranked, diagnose_both
from bench.faults.lofo import Lofo, in_distribution, lofo, shipped
from bench.faults.loho import Loho, loho
from bench.faults.matrix import SEEDS, Cell, full_matrix, quick_matrix, references
from bench.faults.report import figures_dict, print_lofo, print_loho
from bench.faults.score import Judged, score
from debugtune.engine.diagnose import Thresholds
from debugtune.engine.infer.model import load_model
from debugtune.engine.telemetry.atomic import atomic_write_bytes

console = Console(width=None if sys.stdout.isatty() else 160)


@dataclass(frozen=True)
class BenchResult:
    judged: list[Judged]
    figures: dict[str, dict[str, Any]]
    seconds: dict[str, float]
    out: Path
    lofo: Lofo | None = None
    samples: list[Sample] | None = None
    loho: Loho | None = None


_BASE: Any = None


def _base() -> tuple[Any, Thresholds]:
    """The knowledge base without its generated calibration, once per worker process."""
    global _BASE
    if _BASE is None:
        store = base_store()
        _BASE = (store, Thresholds({"infer.temperature": 1.0, "infer.confidence.slope": 1.0,
                                    "infer.confidence.offset": 0.0, **dict(Thresholds.from_store(store).items())}))
    return _BASE


def _diagnose_worker(args: tuple[str, dict[str, Any]]) -> tuple[dict[str, Ranked], Sample | None]:
    """Both systems on one run as a user runs them (the shipped knowledge base), and the run diagnosed against the
    uncalibrated knowledge base for the leave-one-family-out scoring."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    path, label = args
    answers = diagnose_both(path)
    store, th = _base()
    try:
        return answers, diagnose_sample(Path(path), label, store, th)
    except Exception as err:  # noqa: BLE001 — a run that cannot be diagnosed is counted by the API path
        print(f"skipped {label.get('program')}:{label.get('name')}: {err}", file=sys.stderr)
        return answers, None


def _sample_worker(args: tuple[str, dict[str, Any]]) -> Sample | None:
    """One labelled run of another harness, diagnosed against the uncalibrated knowledge base."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    path, label = args
    store, th = _base()
    try:
        return diagnose_sample(Path(path), label, store, th)
    except Exception as err:  # noqa: BLE001 — reported, and left out like an unmanifested run
        print(f"skipped {label.get('program')}:{label.get('name')}: {err}", file=sys.stderr)
        return None


def second_harness(root: Path, jobs: int) -> list[Sample]:
    """The manifested runs of a second harness's output folder (``labels/*.json``, ``runs/<id>``, ``results.json``:
    bench/harness2), diagnosed once. Only the runs its last ``results.json`` judged count: labels of cells the
    catalogue no longer holds stay on disk but are not this harness's runs."""
    verdicts = manifested(root)
    work = []
    for path in sorted((root / "labels").glob("*.json")):
        lab = json.loads(path.read_text())
        if lab.get("manifested") is False or verdicts.get(lab["run_id"]) is not True:
            continue
        work.append((str(root / "runs" / lab["run_id"]), lab))
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(_sample_worker, work, chunksize=4))
    else:
        results = [_sample_worker(w) for w in work]
    return [r for r in results if r is not None]


def _select(quick: bool, seeds: tuple[int, ...], only: list[str] | None, programs: list[str] | None) -> list[Cell]:
    cells = quick_matrix() if quick else full_matrix(seeds)
    if only:
        cells = [c for c in cells if c.name in only or not c.is_fault]
    if programs:
        cells = [c for c in cells if c.program in programs]
    return cells


def run_benchmark(*, quick: bool = False, out: Path = runner.DEFAULT_OUT, jobs: int = 2, retrain: bool = False,
                  diagnose: bool = True, seeds: tuple[int, ...] = SEEDS, only: list[str] | None = None,
                  programs: list[str] | None = None, verbose: bool = True,
                  write_calibration: bool = False, harness2: Path | None = None) -> BenchResult:
    """Train what is not cached, judge manifestation, diagnose with both systems and score them."""
    out = Path(out)
    cells = _select(quick, seeds, only, programs)
    refs = [r for r in references(cells) if r not in cells]
    say = console.print if verbose else (lambda *a, **k: None)
    t0 = time.perf_counter()
    n = len(cells) + len(refs)
    count = {"done": 0, "cached": 0}

    def progress(cell: Cell, cached: bool) -> None:
        count["done"] += 1
        count["cached"] += cached
        if verbose and not cached:
            say(f"  trained {count['done']}/{n} {cell}", highlight=False)

    say(f"[bold]fault benchmark[/] ({'quick' if quick else 'full'}): {len(cells)} runs (+{len(refs)} references) "
        f"in {out}")
    runner.train_all(out, cells + refs, probe=True, retrain=retrain, jobs=jobs, progress=progress)
    t_train = time.perf_counter() - t0
    say(f"training: {t_train:.1f} s ({count['cached']} cached)")
    verdicts = {c: runner.verdict(out, c) for c in cells}
    to_diagnose = [c for c in cells if verdicts[c].manifested] if diagnose else []
    t1 = time.perf_counter()
    answers: dict[Cell, dict[str, Ranked]] = {}
    samples: list[Sample] = []
    if to_diagnose:
        work = [(str(runner.run_dir(out, c)), {**c.label(), "manifested": True}) for c in to_diagnose]
        if jobs > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                results = list(pool.map(_diagnose_worker, work, chunksize=4))
        else:
            results = [_diagnose_worker(w) for w in work]
        answers = {c: r[0] for c, r in zip(to_diagnose, results, strict=True)}
        samples = [r[1] for r in results if r[1] is not None]
    t_diag = time.perf_counter() - t1
    judged = [Judged(c, verdicts[c].manifested, verdicts[c].why, answers.get(c, {})) for c in cells]
    figures = {s: score(judged, s) for s in SYSTEMS} if diagnose else {}
    held_out = None
    t2 = time.perf_counter()
    if samples:
        import pickle

        atomic_write_bytes(out / "samples.pickle", pickle.dumps(samples))  # for bench.faults.symptoms
        store, th = _base()
        model = load_model(store)
        held_out = lofo(samples, model, th, progress=(lambda m: say(f"  {m}", highlight=False)) if verbose else None)
        cal = shipped(samples, model, th, held_out.out_of_family)
        figures["lofo"] = figures_dict(held_out.pooled)
        figures["in_distribution"] = figures_dict(in_distribution(samples, model, th, cal))
        if write_calibration:
            _write_calibration(cal, store, len(samples), say)
    other = None
    if samples and harness2 is not None and (harness2 / "labels").is_dir():
        second = second_harness(harness2, jobs)
        say(f"second harness: {len(second)} manifested runs from {harness2}")
        store, th = _base()
        other = loho(samples + second, load_model(store), th,
                     progress=(lambda m: say(f"  {m}", highlight=False)) if verbose else None)
        if other is not None:
            figures["loho"] = {f.family: figures_dict(f.figures) for f in other.folds}
            figures["loho"]["pooled"] = figures_dict(other.pooled)
    result = BenchResult(judged, figures, {"train": t_train, "diagnose": t_diag,
                                           "lofo": time.perf_counter() - t2}, out, held_out, samples, other)
    partial = bool(only or programs or tuple(seeds) != SEEDS)
    _save(result, "results-quick.json" if quick else "results-partial.json" if partial else "results.json")
    if verbose:
        print_result(result)
    return result


def _write_calibration(cal: Any, store: Any, runs: int, say: Any) -> None:
    from debugtune import cases

    for name, text in to_turtle(cal, cause_sources(store), runs).items():
        atomic_write_bytes(cases.HERE / name, text.encode())
        say(f"wrote cases/{name}")


def _save(result: BenchResult, name: str) -> None:
    runs = [{**j.cell.label(), "manifested": j.manifested, "why": j.why,
             "answers": {k: v.as_dict() for k, v in j.answers.items()}} for j in result.judged]
    doc = {"seconds": result.seconds, "figures": result.figures, "runs": runs}
    atomic_write_bytes(result.out / name, json.dumps(doc, indent=1, default=float).encode())


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}"


def print_result(result: BenchResult) -> None:
    judged = result.judged
    faults = sorted({j.cell.name for j in judged if j.cell.is_fault})
    if result.loho is not None:
        print_loho(console, result.loho, result.lofo.pooled if result.lofo is not None else None)
    if result.lofo is not None:
        print_lofo(console, result.lofo, result.figures.get("autotrainer"), result.figures.get("in_distribution"))
    if result.figures.get("debugtune"):
        table = Table(title="the shipped knowledge base, diagnosed as a user runs it (its calibration saw these "
                            "families: in-distribution), against the AutoTrainer rules")
        table.add_column("fault")
        table.add_column("manifested", justify="right")
        for s in SYSTEMS:
            for col in ("top-1", "top-3", "delay"):
                table.add_column(f"{s} {col}", justify="right")
        for name in faults:
            row = [name]
            first = result.figures[SYSTEMS[0]]["faults"].get(name, {})
            row.append(f"{first.get('manifested', 0)}/{first.get('total', 0)}")
            for s in SYSTEMS:
                f = result.figures[s]["faults"].get(name, {})
                row += [_pct(f.get("top1")), _pct(f.get("top3")), _num(f.get("median_delay"))]
            table.add_row(*row)
        console.print(table)
        summary = Table(title="macro figures")
        summary.add_column("figure")
        for s in SYSTEMS:
            summary.add_column(s, justify="right")
        for label, key, fmt in (("top-1 (macro)", "macro_top1", _pct), ("top-3 (macro)", "macro_top3", _pct),
                                ("healthy false-positive rate", "fpr", _pct),
                                ("median steps onset → detection", "median_delay", _num)):
            summary.add_row(label, *[fmt(result.figures[s][key]) for s in SYSTEMS])
        ctl = result.figures[SYSTEMS[0]]["controls"]
        summary.add_row("healthy controls (valid/total)", *[f"{ctl['valid']}/{ctl['total']}"] * len(SYSTEMS))
        summary.add_row("diagnoser errors", *[str(sum(f["errors"] for f in result.figures[s]["faults"].values())
                                                  + result.figures[s]["controls"]["errors"]) for s in SYSTEMS])
        console.print(summary)
        for s in SYSTEMS:
            for line in result.figures[s]["controls"]["flagged"]:
                console.print(f"  {s} false positive: {line}", highlight=False)
    apart = [j for j in judged if not j.manifested]
    if apart:
        console.print(f"[bold]reported apart[/] ({len(apart)} runs whose fault or look-alike did not manifest):")
        for j in apart:
            console.print(f"  {j.cell}: {j.why}", highlight=False)
    console.print(f"training {result.seconds['train']:.1f} s, diagnosis {result.seconds['diagnose']:.1f} s; "
                  f"results in {result.out}", highlight=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the CI subset: one seed, one severity, ≤ 3 min")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--out", type=Path, default=runner.DEFAULT_OUT, help="output folder (runs, labels, results)")
    ap.add_argument("--retrain", action="store_true", help="retrain every run even when cached")
    ap.add_argument("--no-diagnose", action="store_true", help="train and judge manifestation only")
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated seeds (full matrix)")
    ap.add_argument("--only", default="", help="comma-separated fault names (controls are kept)")
    ap.add_argument("--programs", default="", help="comma-separated program names")
    ap.add_argument("--write-calibration", action="store_true",
                    help="write the calibration fitted on every family into cases/ (profiles, links, leaks, "
                         "temperature)")
    ap.add_argument("--harness2", type=Path, default=runner.DEFAULT_OUT.parents[1] / "harness2" / "out",
                    help="the second harness's output folder (python -m bench.harness2): leave-one-harness-out is "
                         "scored when it holds runs (default bench/harness2/out)")
    args = ap.parse_args(argv)
    try:
        run_benchmark(quick=args.quick, out=args.out, jobs=max(1, args.jobs), retrain=args.retrain,
                      diagnose=not args.no_diagnose, seeds=tuple(int(s) for s in args.seeds.split(",") if s),
                      only=[s for s in args.only.split(",") if s] or None,
                      programs=[s for s in args.programs.split(",") if s] or None,
                      write_calibration=args.write_calibration, harness2=args.harness2)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
