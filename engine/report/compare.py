"""Two diagnosed runs side by side (the dashboard's /compare page): metadata, hypotheses, findings matched by
symptom and place, both losses on one axis, and each symptom's severity in both runs."""

from __future__ import annotations

from collections.abc import Callable

from debugtune.engine.report import plots
from debugtune.engine.report.data import ReportData
from debugtune.engine.report.escape import h, ptext
from debugtune.engine.report.page import Section, page_of
from debugtune.engine.report.tables import absent, named, status_of, table
from debugtune.engine.report.text import number

COLOURS = ("#1f5fa8", "#d62728")


def _runs_table(a: ReportData, b: ReportData, links: tuple[str, str]) -> str:
    def top(d: ReportData) -> str:
        return (f"{named(d, d.hypotheses[0].cause)} ({d.hypotheses[0].confidence:.2f})" if d.hypotheses
                else '<span class="absent">none</span>')

    def steps(d: ReportData) -> str:
        return h(number(d.last_step + 1)) if d.last_step is not None else '<span class="absent">unknown</span>'

    def meta(key: str, graph_key: str = "") -> Callable[[ReportData], str]:
        return lambda d: h(d.meta.get(key) or d.graph_info.get(graph_key or key) or "")

    shown = (("status", lambda d: h(" — ".join(status_of(d)))), ("steps", steps),
             ("world size", meta("world_size", "worldSize")), ("framework", meta("framework")),
             ("program", meta("program")), ("findings", lambda d: h(len(d.findings))), ("top hypothesis", top))
    rows = [("run", *(f'<a href="{h(u)}">{h(d.run_id)}</a>' for d, u in zip((a, b), links, strict=True))),
            *((h(name), fn(a), fn(b)) for name, fn in shown)]
    return table(("", "run A", "run B"), rows, "compare-runs")


def _hypotheses(a: ReportData, b: ReportData) -> str:
    causes = list(dict.fromkeys([x.cause for x in a.hypotheses] + [x.cause for x in b.hypotheses]))
    if not causes:
        return absent("Neither run has a hypothesis.")
    conf = [{x.cause: x for x in d.hypotheses} for d in (a, b)]

    def cell(i: int, cause: str) -> str:
        x = conf[i].get(cause)
        return f"#{x.rank}, {x.confidence:.2f}" if x else '<span class="absent">—</span>'

    return table(("cause", "run A (rank, confidence)", "run B (rank, confidence)"),
                 [(named(a if cause in conf[0] else b, cause), cell(0, cause), cell(1, cause)) for cause in causes],
                 "compare-hypotheses")


def _findings(a: ReportData, b: ReportData) -> str:
    keys = list(dict.fromkeys([(f.symptom, f.entity) for d in (a, b) for f in d.findings]))
    if not keys:
        return absent("Neither run has a finding.")
    by = [{(f.symptom, f.entity): f for f in d.findings} for d in (a, b)]

    def cell(i: int, key: tuple[str, str]) -> str:
        f = by[i].get(key)
        return (f"steps {f.onset_step}–{f.end_step}, severity {f.severity:.2f}" if f
                else '<span class="absent">not found</span>')

    rows = [(named(a if k in by[0] else b, k[0]), f"<code>{h(k[1] or '(run)')}</code>", cell(0, k), cell(1, k))
            for k in sorted(keys)]
    return table(("symptom", "where", "run A", "run B"), rows, "compare-findings")


def _loss_figure(a: ReportData, b: ReportData) -> plots.Built:
    traces = []
    for d, colour, side in zip((a, b), COLOURS, ("A", "B"), strict=True):
        if d.telemetry is not None and d.telemetry.has("loss"):
            x, y = d.telemetry.curve("loss")
            traces.append(plots._line(x, y, f"{side}: {d.run_id}", line={"width": 1.5, "color": colour}))
    if not traces:
        return [], "Neither run has a loss series on this machine."
    fig = plots.Figure(traces, plots.layout("Loss of both runs", height=380, yaxis={"title": {"text": "loss"}}))
    missing = [f"{side} ({h(d.run_id)})" for d, side in ((a, "A"), (b, "B"))
               if d.telemetry is None or not d.telemetry.has("loss")]
    fig.caption = ("Both runs' loss per step on one axis." if not missing else
                   f"Only one run's loss: run {' and '.join(missing)} has no loss series here.")
    return [fig], ""


def _severity_figure(a: ReportData, b: ReportData) -> plots.Built:
    symptoms = sorted({f.symptom for d in (a, b) for f in d.findings})
    if not symptoms:
        return [], "Neither run has a finding."
    traces = []
    for d, colour, side in zip((a, b), COLOURS, ("A", "B"), strict=True):
        worst = {s: max((f.severity for f in d.findings if f.symptom == s), default=0.0) for s in symptoms}
        traces.append({"type": "bar", "orientation": "h", "y": [ptext(a.label(s)) for s in symptoms],
                       "x": [worst[s] for s in symptoms], "name": ptext(f"{side}: {d.run_id}"),
                       "marker": {"color": colour}})
    fig = plots.Figure(traces, plots.layout(
        "Worst severity per symptom", height=max(260, 90 + 34 * len(symptoms)), barmode="group",
        xaxis={"title": {"text": "severity"}, "range": [0, 1]}, yaxis={"automargin": True, "autorange": "reversed"}))
    fig.caption = "A symptom a run does not show has no bar for it."
    return [fig], ""


def compare_page(a: ReportData, b: ReportData, *, links: tuple[str, str] = ("", ""), top: str = "",
                 plotly_src: str | None = None) -> tuple[str, int]:
    """The comparison page of two gathered runs and its number of figures; ``links`` point to their pages."""
    def figures(sid: str, title: str, built: plots.Built) -> Section:
        figs, note = built
        return Section(sid, title, figures=figs, html="" if figs else absent(note), note="" if figs else note)

    sections = [Section("runs", "Runs", html=_runs_table(a, b, links)),
                Section("hypotheses", "Root-cause hypotheses", html=_hypotheses(a, b)),
                figures("loss", "Loss", _loss_figure(a, b)),
                figures("severity", "Symptoms", _severity_figure(a, b)),
                Section("findings", "Findings by symptom and place", html=_findings(a, b))]
    heading = f"<h1>{h(a.run_id)} vs {h(b.run_id)}</h1><div>two diagnosed runs side by side</div>"
    return page_of(f"debugtune: {a.run_id} vs {b.run_id}", heading, sections, top=top, plotly_src=plotly_src)
