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

Run: ``python -m bench.trace_agreement [--fixtures ../shared/fixtures] [--hta-traces DIR] [--gloo DIR]
[--record] [--json]`` (HTA is ``traceinsight``, installed by ``make bench``; without it only our figures print).
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

from bench import trace_record
from debugtune.api import diagnose
from debugtune.engine.capture.importers import import_path
from debugtune.engine.telemetry import read_telemetry
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


def _ours(run_dir: Path) -> dict[str, list[float]]:
    """Per-rank idle %, overlap % and communication ms over the steps HTA keeps (all but the last)."""
    table = read_telemetry(run_dir).table.to_pandas()
    table = table[table["entity"] == ""]
    out: dict[str, list[float]] = {"idle_pct": [], "overlap_pct": [], "comm_ms": []}
    for _, g in table.groupby("rank", observed=True):
        piv = g.pivot_table(index="step", columns="metric", values="value", observed=True)
        steps = sorted(piv.index)
        keep = piv.loc[steps[:-1]] if len(steps) > 1 else piv

        def total(metric: str, keep=keep) -> float:
            return float(keep[metric].sum()) if metric in keep else math.nan

        out["idle_pct"].append(100 * total("free_ms") / total("step_time_ms"))
        comm = total("comm_ms")
        out["overlap_pct"].append(100 * total("comm_overlapped_ms") / comm if comm and comm > 0 else math.nan)
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


def measure(fixtures: Path, hta_dir: Path | None, gloo: Path | None) -> list[Row]:
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
    store.close()
    return rows


def _fmt(values: list[float] | None) -> str:
    vals = [v for v in values or [] if v is not None and math.isfinite(v)]
    return f"{np.mean(vals):.1f}" if vals else "—"


def _delta(row: Row, key: str) -> float | None:
    a, b = row.ours.get(key) or [], row.hta.get(key) or []
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
                     f"{'' if do is None else f'{do:.1f}':>5} {_fmt(r.ours.get('comm_ms')):>8} "
                     f"{_fmt(r.hta.get('comm_ms')):>8}  {tail}")
    both_i = [d for r in rows if (d := _delta(r, "idle_pct")) is not None]
    both_o = [d for r in rows if (d := _delta(r, "overlap_pct")) is not None]
    planted = [r for r in rows if r.named_first is not None]
    lines.append(f"idle share: {sum(d <= IDLE_GOAL for d in both_i)}/{len(both_i)} traces within {IDLE_GOAL:g} "
                 f"points of HTA (largest difference {max(both_i, default=0):.2f})")
    lines.append(f"overlap: {sum(d <= OVERLAP_GOAL for d in both_o)}/{len(both_o)} traces within {OVERLAP_GOAL:g} "
                 f"points of HTA (largest difference {max(both_o, default=0):.2f})")
    lines.append(f"planted faults named first (control: nothing reported): "
                 f"{sum(bool(r.named_first) for r in planted)}/{len(planted)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO.parent / "shared" / "fixtures")
    parser.add_argument("--hta-traces", type=Path, default=None, help="folder from bench/fetch_hta_traces.py")
    parser.add_argument("--gloo", type=Path, default=REPO / "bench" / "out" / "traces",
                        help="recorded gloo scenarios (recorded here when missing)")
    parser.add_argument("--record", action="store_true", help="record the gloo scenarios again")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for sc in trace_record.SCENARIOS:
        if args.record or not (args.gloo / sc.name).is_dir():
            trace_record.record(sc.name, args.gloo)
    rows = measure(args.fixtures, args.hta_traces, args.gloo)
    print(json.dumps([asdict(r) for r in rows], indent=1) if args.json else report(rows))


if __name__ == "__main__":
    main()
