"""`cann-debug diagnose` and `cann-debug root-cause`: findings in four dimensions and their root cause."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from debugtune.cli.apps import debug_app
from debugtune.cli.common import (
    Col,
    JsonOption,
    StoreOption,
    WideOption,
    bullet,
    console,
    emit_json,
    fail,
    session_store,
    show_table,
)
from debugtune.cli.import_cmd import DeviceOption, InterconnectOption
from debugtune.engine.infer import REPORT_FILE, DiagnosisReport
from debugtune.engine.infer.explain import PHRASES
from debugtune.engine.infer.model import split_stored_signs
from debugtune.kg.assertions import read_findings, read_hypotheses
from debugtune.kg.namespaces import check_run_id
from debugtune.kg.records import Finding, Hypothesis

RunArgument = Annotated[str, typer.Argument(help="A run directory, a raw profiler or log folder, or a stored run id.",
                                            show_default=False)]


def _evidence_lines(f: Finding) -> list[str]:
    """Every evidence value of a finding (none is left out), one ``name value`` per line."""
    from debugtune.engine.report.text import number

    return [f"{k} {number(v, 3) if isinstance(v, int | float) else v}" for k, v in f.evidence.items()]


def print_findings(findings: list[Finding], *, wide: bool = False) -> None:
    """Findings in onset order: symptom, where and dimension stacked, so no name is split; evidence whole."""
    rows = [[f"[bold]{f.symptom}[/]\n{escape(f.entity or '(run)')}\n[dim]{f.dimension}[/]",
             f"{f.onset_step}–{f.end_step}", f"{f.severity:.2f}", escape("\n".join(_evidence_lines(f)))]
            for f in findings]
    show_table([Col("finding / where / dimension", keep=True), Col("steps", "right"), Col("severity", "right"),
                Col("evidence")], rows, title=f"{len(findings)} finding(s)", wide=wide)


def print_hypotheses(hypotheses: list[Hypothesis], top: int | None = None, *, wide: bool = False) -> None:
    shown = hypotheses[:top] if top else hypotheses
    rows = [[str(h.rank), f"[bold]{h.cause}[/]" if h.rank == 1 else h.cause, f"{h.confidence:.2f}",
             " → ".join(h.chain)] for h in shown]
    show_table([Col("#", "right"), Col("cause", keep=True), Col("confidence", "right"), Col("chain (onset order)")],
               rows, title="root-cause hypotheses", wide=wide, key=1)


UNRECORDED = re.compile(r"^(?P<symptoms>.+?) not judged: .* not recorded$")
"""A note that a detector had nothing to read: expected of a log that records little, shown one line for all."""


def split_notes(notes: list[str]) -> tuple[list[str], list[str]]:
    """(notes with a reason of their own, symptoms not judged because a metric they read was not recorded)."""
    own: list[str] = []
    unrecorded: list[str] = []
    for note in notes:
        m = UNRECORDED.match(note)
        if m is None:
            own.append(note)
        else:
            unrecorded += [s for s in m["symptoms"].split(", ") if s not in unrecorded]
    return own, unrecorded


def print_open_question(report: DiagnosisReport) -> None:
    """What the report leaves open: advice, the candidates with what would decide them, and the blind spots."""
    for a in report.advice:
        console.print(f"[yellow]advice:[/] [bold]{a.cause}[/] ({a.confidence:.2f}), worth a look, not a root cause "
                      f"(it explains no observed failure) — {escape(a.explanation)}")
    if report.undetermined is not None:
        names = ", ".join(f"{c} ({p:.2f})" for c, p in report.undetermined.candidates)
        console.print(f"[yellow]open:[/] {escape(names)}")
        for d in report.undetermined.deciders:
            under = ", ".join(f"{c} {p:.2f}" for c, p in d.probabilities.items())
            bullet(f"to decide: {escape(d.clause())} (P({d.symptom}) under {escape(under)})")
    if report.blind is not None and report.findings:
        console.print(f"[yellow]blind spots:[/] {escape(report.blind.caveat())}")


def print_report(report: DiagnosisReport, *, top: int | None = None, explain: bool = True,
                 show_findings: bool = True, wide: bool = False, all_notes: bool = False) -> None:
    """The report as rich tables, the explanation of the best hypothesis (and why its confidence is what it is),
    what stays open and what would decide it, and what was not diagnosed. Symptoms not judged for want of a
    metric the run did not record are one line unless ``all_notes``."""
    cov = ", ".join(f"{d}: {s}" for d, s in report.coverage.items())
    console.print(f"[bold]run[/] {escape(report.run)}  ({report.steps} steps; {escape(cov)})")
    if show_findings:
        print_findings(report.findings, wide=wide) if report.findings else console.print("no findings")
    if report.hypotheses:
        print_hypotheses(report.hypotheses, top, wide=wide)
        for h in report.hypotheses[: (top or len(report.hypotheses)) if explain else 1]:
            console.print(f"[bold]{h.rank}. {h.cause}[/] — {escape(h.explanation)}")
            if h.basis:
                console.print(f"   [dim]why this confidence: {escape(h.basis)}[/]")
    else:
        print_open_question(report)
    for sign in report.signs:
        console.print(f"[green]sign of health: {escape(PHRASES[sign.symptom](sign))}[/]")
    own, unrecorded = split_notes(report.notes) if not all_notes else (report.notes, [])
    for note in own:
        console.print(f"[dim]note: {escape(note)}[/]")
    if unrecorded:
        console.print(f"[dim]note: {len(unrecorded)} symptom(s) not judged, a metric their detectors read not "
                      f"recorded: {escape(', '.join(unrecorded))} (--notes: each with its metrics)[/]")
    colour = {"diagnosed": "green", "healthy": "green", "undetermined": "yellow"}[report.status]
    console.print(f"[{colour}]{escape(report.summary())}[/]")


def _where(report: DiagnosisReport) -> str:
    saved = f"report saved to {Path(report.run_dir) / REPORT_FILE}" if report.run_dir else "report not saved"
    return f"{saved}; findings and hypotheses stored in {report.stored_in} (graph urn:debugtune:run:{report.run}/)"


def _run_diagnosis(run: str, store: str | None, dims: list[str] | None, json_out: bool,
                   device: str | None = None, interconnect: str | None = None,
                   engine: str = "auto") -> DiagnosisReport:
    from debugtune.api import diagnose

    with session_store(store) as st:
        if json_out:
            return diagnose(run, store=st, dimensions=dims, device=device, interconnect=interconnect, engine=engine)
        with console.status("diagnosing …") as status:
            return diagnose(run, store=st, dimensions=dims, progress=lambda stage: status.update(f"{stage} …"),
                            device=device, interconnect=interconnect, engine=engine)


EngineOption = Annotated[str, typer.Option(
    "--engine", help="How the telemetry is read: auto (out of core above diagnose.out_of_core.rows rows), memory, "
    "duckdb (out of core) or ray (out of core, windows as Ray tasks). The findings do not depend on it.")]


def _follow(run: str, store: str | None, dims: list[str] | None, json_out: bool, engine: str, interval: float,
            passes: int | None, device: str | None, interconnect: str | None, wide: bool) -> None:
    """Pass after pass until interrupted (or ``passes``): the report when the findings changed, one line a pass."""
    from debugtune.api import follow

    shown: list[str] | None = None
    with session_store(store) as st:
        try:
            for step, report in follow(run, store=st, dimensions=dims, interval=interval, passes=passes,
                                       engine="duckdb" if engine == "auto" else engine, device=device,
                                       interconnect=interconnect):
                if json_out:  # one JSON object per line and pass (JSON Lines), flushed as it comes
                    print(json.dumps({**step.as_dict(), "report": report.as_dict() if report else None},
                                     default=str), flush=True)
                    continue
                if report is not None and [f.id for f in report.findings] != shown:
                    print_report(report, wide=wide)
                    shown = [f.id for f in report.findings]
                per = f"{1e3 * step.seconds_per_new_step:.2f} ms per new step" if step.new_steps else "nothing new"
                summary = escape(report.summary()) if report is not None else escape(step.note or "no new parts")
                console.print(f"[dim]pass {step.number}: {step.new_rows} new rows, {step.new_steps} new steps, "
                              f"{step.scanned_rows} rows scanned, {step.seconds:.2f} s ({per}); {summary}[/]")
        except KeyboardInterrupt:
            console.print("[dim]stopped[/]")


@debug_app.command("diagnose")
def diagnose_command(
    run: RunArgument,
    gradient: Annotated[bool, typer.Option("--gradient", help="Diagnose gradient flow.")] = False,
    comm: Annotated[bool, typer.Option("--comm", help="Diagnose communication flow.")] = False,
    hardware: Annotated[bool, typer.Option("--hardware", help="Diagnose hardware flow.")] = False,
    convergence: Annotated[bool, typer.Option("--convergence", help="Diagnose convergence flow.")] = False,
    store: StoreOption = None,
    device: DeviceOption = None,
    interconnect: InterconnectOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
    engine: EngineOption = "auto",
    follow: Annotated[bool, typer.Option("--follow", help="Watch a growing run: re-judge only what was written "
                                         "since the last pass, every --interval seconds, until interrupted.")]
    = False,
    interval: Annotated[float, typer.Option("--interval", min=0.0, help="Seconds between --follow passes.")] = 30.0,
    passes: Annotated[int | None, typer.Option("--passes", min=1, help="Stop --follow after this many passes.")]
    = None,
    notes: Annotated[bool, typer.Option("--notes", help="Every note in full, including one per symptom not "
                                        "judged for want of a metric the run did not record.")] = False,
) -> None:
    """Find symptoms in a run's telemetry (all four dimensions unless some are named) and infer the root cause."""
    picked = [d for d, on in (("gradient", gradient), ("communication", comm), ("hardware", hardware),
                              ("convergence", convergence)) if on]
    from debugtune.engine.diagnose.run import ENGINES

    if engine not in ENGINES:
        fail(f"unknown engine {engine!r} (choose from {', '.join(ENGINES)})")
    if follow:
        _follow(run, store, picked or None, json_out, engine, interval, passes, device, interconnect, wide)
        return
    report = _run_diagnosis(run, store, picked or None, json_out, device, interconnect, engine)
    if json_out:
        emit_json(report.as_dict())
        return
    print_report(report, wide=wide, all_notes=notes)
    console.print(f"[dim]{escape(_where(report))}[/]")


def _stored(run_id: str, store: str | None) -> tuple[list[Finding], list[Hypothesis], str]:
    with session_store(store, read_only=True) as st:
        stored = read_findings(st, run_id)
        findings, _signs = split_stored_signs(st, stored)  # a sign of health is stored beside them, never a finding
        hypotheses, target = read_hypotheses(st, run_id), st.target
    if not stored and not hypotheses:
        fail(f"{run_id} is not a directory and the store {target} has no diagnosis for a run with that id; "
             f"diagnose it first: cann-debug diagnose RUN_DIR --store {target}")
    return findings, hypotheses, target


@debug_app.command("root-cause")
def root_cause_command(
    run: RunArgument,
    top: Annotated[int, typer.Option("--top", min=1, help="How many hypotheses to show.")] = 3,
    store: StoreOption = None,
    json_out: JsonOption = False,
    explain: Annotated[bool, typer.Option("--explain", help="Explain every hypothesis shown, with its findings.")]
    = False,
    wide: WideOption = False,
) -> None:
    """The most likely root causes of a run: diagnose RUN_DIR, or read the stored diagnosis of RUN_ID."""
    if Path(run).exists():
        report = _run_diagnosis(run, store, None, json_out)
        findings, hypotheses, source = report.findings, report.hypotheses, _where(report)
        status, summary = report.status, report.summary()
    else:
        try:
            check_run_id(run)
        except ValueError:
            fail(f"{run} is neither an existing directory nor a valid run id")
        findings, hypotheses, target = _stored(run, store)
        source = f"stored diagnosis in {target}"
        status = "diagnosed" if hypotheses else ("undetermined" if findings else "healthy")
        summary = (f"root cause: {hypotheses[0].cause} (confidence {hypotheses[0].confidence:.2f})" if hypotheses
                   else "no cause reaches the reporting threshold")
    shown = hypotheses[:top]
    if json_out:
        used = {fid for h in shown for fid in h.findings}
        body: dict[str, Any] = {
            "run": run if not Path(run).exists() else report.run, "status": status, "summary": summary,
            "hypotheses": [{**h.as_dict(), "rank": h.rank} for h in shown],
            "findings": [f.as_dict() for f in findings if f.id in used or explain]}
        emit_json(body)
        return
    if not shown:
        console.print(f"[yellow]{escape(summary)}[/] ({len(findings)} finding(s))")
    else:
        print_hypotheses(shown, wide=wide)
        by_id = {f.id: f for f in findings}
        for h in shown if explain else shown[:1]:
            console.print(f"[bold]{h.rank}. {h.cause}[/] — {escape(h.explanation)}")
            if explain:
                for fid in h.findings:
                    f = by_id.get(fid)
                    if f is not None:
                        bullet(f"{escape(f.id)}: steps {f.onset_step}–{f.end_step}, severity {f.severity:.2f}; "
                               f"{escape('; '.join(_evidence_lines(f)))}")
    console.print(f"[dim]{escape(source)}[/]")
