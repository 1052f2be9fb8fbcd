"""debugtune's device-timeline figures against Holistic Trace Analysis on the same traces, and its findings against
what was planted.

For every real trace available here — the shared fixtures (``pytorch-profiler``, ``ascend-cluster``,
``ascend-profiler``), HTA's own test traces (``bench/fetch_hta_traces.py``) and the gloo jobs recorded on this
machine with one planted fault each (``bench/trace_record.py``) — one row: the idle share of the device time,
the communication/computation overlap and the communication time, ours and HTA's
(``get_temporal_breakdown``, ``get_comm_comp_overlap``, ``get_gpu_kernel_breakdown``), with the largest
difference over the ranks; then the most severe finding and the top root cause. HTA leaves out the last
ProfilerStep (as possibly incomplete) and kernels whose launch the trace did not record; our figures are summed
over the same steps. Goals: idle within 3 points and overlap within 2 points of HTA wherever both read the trace;
every planted fault named first (its symptom the most severe finding, on the planted ranks or stage, and its cause
the top hypothesis), nothing reported on the control.

The synthetic straggler set (``bench/straggler_traces.py``: a slow stage of two ranks, one slow worker, shifting
sequence lengths, and a balanced control; several seeds, each as a per-operation table and as a worker timeline
without step numbers) is judged by its cause: the planted cause must be the top hypothesis and its finding sit on
the planted ranks (every rank of the stage; the one rank; the whole run for uneven data), the control must name
nothing. The confusion table counts the top cause per planted cause. HTA reads none of these (they have no
kernels); its column stays empty and says so. Every share prints in [0, 100] or as "not measured" (a figure HTA
reports outside that range is shown as such and left out of the agreement).

Run: ``python -m bench.trace_agreement [--fixtures ../shared/fixtures] [--hta-traces DIR] [--gloo DIR]
[--record | --skip-gloo] [--straggler-seeds 3] [--straggler-steps 20] [--json]`` (HTA is ``traceinsight``,
installed by ``make bench``; without it only our figures print).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import straggler_traces, trace_record
from debugtune.api import diagnose
from debugtune.engine.capture.importers import import_path
from debugtune.engine.telemetry import read_run_json, read_telemetry
from debugtune.engine.telemetry.shares import share
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge

REPO = Path(__file__).resolve().parent.parent
IDLE_GOAL, OVERLAP_GOAL = 3.0, 2.0


@dataclass
class Row:
    name: str
    source: str
    ranks: int = 0
    ours: dict[str, list[float]] = field(default_factory=dict)   # figure → per rank
    hta: dict[str, list[float]] = field(default_factory=dict)
    first: str = ""
    cause: str = ""
    planted: str = ""
    named_first: bool | None = None
    error: str = ""
    expected: str = ""    # the straggler set: the planted cause ("none" for the control)
    named: str = ""       # and the top cause named ("none" when no cause is named)


def _ours(run_dir: Path) -> dict[str, list[float]]:
    """Per-rank idle %, overlap % and communication ms over the steps HTA keeps (all but the last)."""
    wanted = ("free_ms", "step_time_ms", "comm_ms", "comm_overlapped_ms")
    t = read_telemetry(run_dir, metrics=wanted).table
    cols = {c: t.column(c).to_pylist() for c in ("rank", "step", "metric", "entity", "value")}
    per: dict[int, dict[str, dict[int, float]]] = {}
    for rank, step, metric, entity, value in zip(*cols.values(), strict=True):
        if entity == "":
            per.setdefault(int(rank), {}).setdefault(str(metric), {})[int(step)] = float(value)
    if not per:  # no figure of these (a trace without them): the ranks still count
        per = {int(r): {} for r in set(read_telemetry(run_dir, metrics=("compute_ms", "cpu_step_ms",
                                                                        "step_time_ms")).table.column("rank")
                                                 .to_pylist())}
    out: dict[str, list[float]] = {"idle_pct": [], "overlap_pct": [], "comm_ms": []}
    # HTA leaves out the last ProfilerStep; a trace without them (steps from a marker) it reads whole
    marked = any(n.startswith("no ProfilerStep") for n in read_run_json(run_dir).get("notes", []))
    for rank in sorted(per):
        rows = per[rank]
        steps = sorted({s for series in rows.values() for s in series})
        keep = set(steps[:-1]) if len(steps) > 1 and not marked else set(steps)

        def total(metric: str, rows=rows, keep=keep) -> float:
            series = rows.get(metric)
            return float(sum(v for s, v in series.items() if s in keep)) if series else math.nan

        out["idle_pct"].append(100 * share(total("free_ms"), total("step_time_ms")))
        comm = total("comm_ms")
        out["overlap_pct"].append(100 * share(total("comm_overlapped_ms"), comm))
        out["comm_ms"].append(comm)
    return out


def _hta(trace_dir: Path) -> dict[str, list[float]]:
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return {}
    logging.disable(logging.CRITICAL)
    out: dict[str, list[float]] = {}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            t = TraceAnalysis(trace_dir=str(trace_dir))
            tb = t.get_temporal_breakdown(visualize=False).sort_values("rank")
            out["idle_pct"] = [float(v) for v in tb["idle_time_pctg"]]
        except Exception:  # noqa: BLE001 — HTA cannot read this trace (CPU only, no kernels): its column is empty
            return out
        with contextlib.suppress(Exception):
            ov = t.get_comm_comp_overlap(visualize=False).sort_values("rank")
            out["overlap_pct"] = [float(v) for v in ov["comp_comm_overlap_pctg"]]
        with contextlib.suppress(Exception):
            kb = t.get_gpu_kernel_breakdown(visualize=False)[0]
            comm = kb[kb["kernel_type"].str.contains("COMMUNICATION")]["sum"].sum()
            out["comm_ms"] = [float(comm) / 1e3 / max(len(out["idle_pct"]), 1)] * len(out["idle_pct"])
    return out


def _runs(fixtures: Path, hta_dir: Path | None, gloo: Path | None) -> list[tuple[str, str, Path]]:
    runs = []
    pt = fixtures / "pytorch-profiler"
    if pt.is_dir():
        for f in sorted(pt.glob("*.json.gz")):
            if not f.name.startswith("sampled_rank"):
                runs.append((f.name.removesuffix(".json.gz"), "fixture", f))
        if (pt / "sampled_rank-0.json.gz").exists():
            runs.append(("sampled_rank-0/1", "fixture", pt))
    for name in ("ascend-cluster", "ascend-profiler"):
        if (fixtures / name).is_dir():
            runs.append((name, "fixture", fixtures / name))
    if hta_dir is not None and hta_dir.is_dir():
        for d in sorted({p.parent for p in hta_dir.rglob("*.json.gz")}):
            runs.append((str(d.relative_to(hta_dir)), "HTA test trace", d))
    if gloo is not None:
        for sc in trace_record.SCENARIOS:
            if (gloo / sc.name).is_dir():
                runs.append((sc.name, "gloo, recorded here", gloo / sc.name))
    return runs


def _stage_dir(path: Path, tmp: Path, name: str) -> Path:
    """A folder holding only the traces of one run (the sampled pair without the other fixtures)."""
    if path.is_dir() and name == "sampled_rank-0/1":
        d = tmp / "sampled"
        d.mkdir(exist_ok=True)
        for f in sorted(path.glob("sampled_rank-*.json.gz")):
            target = d / f.name
            if not target.exists():
                target.symlink_to(f)
        return d
    if path.is_file():
        d = tmp / path.name.replace(".", "_")
        d.mkdir(exist_ok=True)
        if not (d / path.name).exists():
            (d / path.name).symlink_to(path)
        return d
    return path


def _judge(row: Row, report: Any, planted: trace_record.Scenario | None) -> None:
    ranked = sorted(report.findings, key=lambda f: -f.severity)
    if ranked:
        top = ranked[0]
        share = top.evidence.get("idle_share") or top.evidence.get("share") or top.evidence.get("host_gap_share")
        where = top.entity or "run"
        if "ranks" in top.evidence and isinstance(top.evidence["ranks"], str):
            where += f" (ranks {top.evidence['ranks']})"
        row.first = f"{top.symptom}@{where}" + (f" {100 * share:.0f}%" if isinstance(share, float) else "") + \
            f" [{top.evidence.get('confidence', '')}]"
    row.cause = report.hypotheses[0].cause if report.hypotheses else "—"
    if planted is None:
        return
    if planted.cause is None:
        row.planted = "nothing (control)"
        row.named_first = not report.hypotheses
        return
    row.planted = f"{planted.cause} → {planted.symptom}" + (f" on {','.join(map(str, planted.where))}"
                                                             if planted.where else "")
    top = ranked[0] if ranked else None
    located = top is not None and top.symptom == planted.symptom and (
        not planted.where or top.entity in {f"rank:{r}" for r in planted.where} and len(planted.where) == 1
        or str(top.evidence.get("ranks", "")) == ",".join(map(str, planted.where)))
    row.named_first = bool(located and report.hypotheses and report.hypotheses[0].cause == planted.cause)


def measure(fixtures: Path, hta_dir: Path | None, gloo: Path | None, straggler_seeds: int = 0,
            straggler_steps: int = 20) -> list[Row]:
    store = open_store(None)
    load_knowledge(store)
    plan = trace_record.plan()
    rows = []
    with tempfile.TemporaryDirectory(prefix="trace-agreement-") as tmp:
        for name, source, path in _runs(fixtures, hta_dir, gloo):
            row = Row(name, source)
            trace_dir = _stage_dir(path, Path(tmp), name)
            run_dir = Path(tmp) / f"run-{len(rows)}"
            try:
                import_path(trace_dir, run_dir)
                row.ours = _ours(run_dir)
                row.ranks = len(row.ours["idle_pct"])
                _judge(row, diagnose(run_dir, store=store, save=False),
                       plan.get(name) if source.startswith("gloo") else None)
            except Exception as err:  # noqa: BLE001 — a trace we cannot read is a row that says why
                row.error = str(err).splitlines()[0][:80]
            if "ascend" not in name:
                row.hta = _hta(trace_dir)
            rows.append(row)
        rows += straggler_rows(store, Path(tmp), straggler_seeds, straggler_steps)
    store.close()
    return rows


STRAGGLER_SOURCE = "synthetic straggler"
_CAUSES = ("PipelineStageImbalance", "StragglerRank", "SequenceLengthImbalance", "none")


def _located(finding: Any, where: tuple[int, ...]) -> bool:
    """The finding sits where the fault was planted: the whole run, the one rank, or every rank of the stage."""
    if not where:
        return finding.entity == ""
    if len(where) == 1:
        return finding.entity == f"rank:{where[0]}"
    return str(finding.evidence.get("ranks", "")) == ",".join(map(str, where))


def _judge_straggler(row: Row, report: Any, sc: straggler_traces.Scenario) -> None:
    """Named first: the planted cause is the top hypothesis, with its symptom's finding on the planted ranks."""
    top = report.hypotheses[0] if report.hypotheses else None
    row.cause = top.cause if top else "—"
    row.named = top.cause if top else "none"
    row.expected = sc.cause or "none"
    ranked = sorted(report.findings, key=lambda f: -f.severity)
    row.first = ", ".join(f"{f.symptom}@{f.entity or 'run'}" + (f" (ranks {f.evidence['ranks']})"
                                                              if isinstance(f.evidence.get("ranks"), str) else "")
                          for f in ranked[:3])
    if sc.cause is None:
        row.planted = "nothing (control)"
        row.named_first = top is None
        return
    row.planted = f"{sc.cause} → {sc.symptom}" + (f" on {','.join(map(str, sc.where))}" if sc.where else " (run)")
    mine = [f for f in report.findings if top is not None and f.id in top.findings and f.symptom == sc.symptom]
    row.named_first = bool(top is not None and top.cause == sc.cause and any(_located(f, sc.where) for f in mine))


def straggler_rows(store: Any, tmp: Path, seeds: int, steps: int) -> list[Row]:
    """The synthetic straggler set, each scenario and seed as an op table and as a worker timeline (no step
    numbers: the importer recovers the steps from the repeated operation sequence)."""
    rows = []
    for seed in range(seeds):
        for sc in straggler_traces.SCENARIOS:
            folder = straggler_traces.write(sc, tmp / f"stragglers-{seed}", steps, seed, timeline_steps=False)
            for form, path in (("op table", folder / "trace.parquet"), ("timeline", folder / "timeline.json.gz")):
                row = Row(f"{sc.name} seed {seed} ({form})", STRAGGLER_SOURCE)
                run_dir = tmp / f"straggler-run-{seed}-{sc.name}-{form.replace(' ', '-')}"
                try:
                    import_path(path, run_dir)
                    row.ours = _ours(run_dir)
                    row.ranks = len(row.ours["idle_pct"])
                    _judge_straggler(row, diagnose(run_dir, store=store, save=False), sc)
                except Exception as err:  # noqa: BLE001 — a trace we cannot read is a row that says why
                    row.error = str(err).splitlines()[0][:80]
                    row.expected, row.named, row.named_first = sc.cause or "none", "error", False
                rows.append(row)
    return rows


def confusion(rows: list[Row]) -> str:
    """Planted cause (rows) × top cause named (columns), over the straggler set."""
    planted = [r for r in rows if r.expected]
    if not planted:
        return ""
    cols = [*_CAUSES, "other"]
    counts = {(e, n): 0 for e in _CAUSES for n in cols}
    for r in planted:
        counts[(r.expected, r.named if r.named in _CAUSES else "other")] += 1
    short = {"PipelineStageImbalance": "StageImb", "StragglerRank": "Straggler", "SequenceLengthImbalance": "SeqLen",
             "none": "none", "other": "other"}
    lines = ["confusion (planted ↓ × top cause named →):",
             f"  {'':<24}" + "".join(f"{short[c]:>10}" for c in cols)]
    lines += [f"  {e:<24}" + "".join(f"{counts[(e, c)]:>10}" for c in cols) for e in _CAUSES]
    off = sum(v for (e, n), v in counts.items() if e != n)
    lines.append(f"  off the diagonal: {off} of {len(planted)}")
    return "\n".join(lines)


def _fmt(values: list[float] | None, pct: bool = True) -> str:
    vals = [v for v in values or [] if v is not None and math.isfinite(v)]
    if pct and vals and not all(0.0 <= v <= 100.0 for v in vals):  # HTA's own figure, outside any share's range
        return "out of range"
    return f"{np.mean(vals):.1f}" if vals else "—"


def _in_range(values: list[float]) -> list[float]:
    return [v if math.isfinite(v) and 0.0 <= v <= 100.0 else math.nan for v in values]


def _delta(row: Row, key: str) -> float | None:
    a, b = row.ours.get(key) or [], _in_range(row.hta.get(key) or []) if key != "comm_ms" else row.hta.get(key) or []
    pairs = [abs(x - y) for x, y in zip(a, b, strict=False) if math.isfinite(x) and math.isfinite(y)]
    return max(pairs) if pairs and len(a) == len(b) else None


def report(rows: list[Row]) -> str:
    head = (f"{'trace':<40} {'src':<6} {'rk':>3} {'idle% us':>8} {'HTA':>6} {'Δ':>5} {'ovl% us':>7} {'HTA':>6} "
            f"{'Δ':>5} {'comm ms':>8} {'HTA':>8}  first finding / top cause")
    lines = [head]
    for r in rows:
        di, do = _delta(r, "idle_pct"), _delta(r, "overlap_pct")
        tail = r.error or f"{r.first or 'no findings'} / {r.cause}"
        if r.planted:
            tail += f"  planted: {r.planted} → {'NAMED FIRST' if r.named_first else 'missed'}"
        lines.append(f"{r.name[:40]:<40} {r.source[:6]:<6} {r.ranks:>3} {_fmt(r.ours.get('idle_pct')):>8} "
                     f"{_fmt(r.hta.get('idle_pct')):>6} {'' if di is None else f'{di:.1f}':>5} "
                     f"{_fmt(r.ours.get('overlap_pct')):>7} {_fmt(r.hta.get('overlap_pct')):>6} "
                     f"{'' if do is None else f'{do:.1f}':>5} {_fmt(r.ours.get('comm_ms'), pct=False):>8} "
                     f"{_fmt(r.hta.get('comm_ms'), pct=False):>8}  {tail}")
    both_i = [d for r in rows if (d := _delta(r, "idle_pct")) is not None]
    both_o = [d for r in rows if (d := _delta(r, "overlap_pct")) is not None]
    planted = [r for r in rows if r.named_first is not None]
    lines.append(f"idle share: {sum(d <= IDLE_GOAL for d in both_i)}/{len(both_i)} traces within {IDLE_GOAL:g} "
                 f"points of HTA (largest difference {max(both_i, default=0):.2f})")
    lines.append(f"overlap: {sum(d <= OVERLAP_GOAL for d in both_o)}/{len(both_o)} traces within {OVERLAP_GOAL:g} "
                 f"points of HTA (largest difference {max(both_o, default=0):.2f})")
    lines.append(f"planted faults named first (control: nothing reported): "
                 f"{sum(bool(r.named_first) for r in planted)}/{len(planted)}")
    lines += _per_set(rows)
    table = confusion(rows)
    return "\n".join(lines + ([table] if table else []))


def _per_set(rows: list[Row]) -> list[str]:
    """Per source set: how many traces, how many HTA read, and the agreement where both did."""
    out = ["per set:"]
    for source in dict.fromkeys(r.source for r in rows):
        mine = [r for r in rows if r.source == source]
        read = [r for r in mine if r.hta.get("idle_pct")]
        di = [d for r in mine if (d := _delta(r, "idle_pct")) is not None]
        do = [d for r in mine if (d := _delta(r, "overlap_pct")) is not None]
        named = [r for r in mine if r.named_first is not None]
        hta = (f"HTA read {len(read)}; idle within {IDLE_GOAL:g} points {sum(d <= IDLE_GOAL for d in di)}/{len(di)},"
               f" overlap within {OVERLAP_GOAL:g} points {sum(d <= OVERLAP_GOAL for d in do)}/{len(do)}"
               if source != STRAGGLER_SOURCE else "HTA: not applicable (no kernels in these traces)")
        out.append(f"  {source:<22} {len(mine):>3} traces; {hta}" +
                   (f"; named first {sum(bool(r.named_first) for r in named)}/{len(named)}" if named else ""))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--hta-traces", type=Path, default=None, help="folder from bench/fetch_hta_traces.py")
    parser.add_argument("--gloo", type=Path, default=REPO / "bench" / "out" / "traces",
                        help="recorded gloo scenarios (recorded here when missing)")
    parser.add_argument("--record", action="store_true", help="record the gloo scenarios again")
    parser.add_argument("--skip-gloo", action="store_true", help="leave the recorded gloo scenarios out")
    parser.add_argument("--straggler-seeds", type=int, default=3, help="seeds of the synthetic straggler set")
    parser.add_argument("--straggler-steps", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for sc in trace_record.SCENARIOS:
        if not args.skip_gloo and (args.record or not (args.gloo / sc.name).is_dir()):
            trace_record.record(sc.name, args.gloo)
    rows = measure(args.fixtures, args.hta_traces, None if args.skip_gloo else args.gloo, args.straggler_seeds,
                   args.straggler_steps)
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else report(rows))


if __name__ == "__main__":
    main()
