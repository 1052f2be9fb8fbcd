"""The self-contained HTML page: plotly.js inlined from the installed package, figures as escaped JSON,
SVG cause chains, tables. Nothing on the page is fetched from the network (no CDN, no fonts, no images)."""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from debugtune.engine.report import plots
from debugtune.engine.report.chain import chain_svg
from debugtune.engine.report.correlation import correlation_svg
from debugtune.engine.report.data import ReportData
from debugtune.engine.report.escape import h, script_json
from debugtune.engine.report.grid_plot import grid_figure
from debugtune.engine.report.tables import (
    absent,
    cost_block,
    experiments_table,
    findings_table,
    hypotheses_table,
    named,
    status_of,
    suggestions_table,
    summary_table,
    table,
)
from debugtune.engine.telemetry.atomic import atomic_write_bytes

CHAINS_SHOWN = 3

STYLE = """
:root { color-scheme: light; --fg: #1d232a; --muted: #5b6570; --line: #dde2e7; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0; background: #f4f6f8; }
header { background: #fff; border-bottom: 1px solid var(--line); padding: 18px 28px; }
header h1 { margin: 0 0 4px; font-size: 22px; word-break: break-all; }
nav { padding: 6px 28px; background: #fff; border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
main { padding: 12px 28px 40px; max-width: 1500px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 14px 18px; margin: 14px 0; }
section h2 { margin: 0 0 10px; font-size: 17px; }
table { border-collapse: collapse; width: 100%; margin: 6px 0; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
thead th { background: #f0f3f6; }
table.kv th { width: 320px; color: var(--muted); font-weight: 500; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f0f3f6; padding: 0 3px;
       border-radius: 3px; overflow-wrap: anywhere; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px; }
.status.diagnosed { background: #b3261e; } .status.undetermined { background: #b26a00; }
.status.healthy { background: #2e7d32; }
.bar { display: inline-block; width: 80px; height: 8px; background: #e4e8ec; margin-right: 6px; border-radius: 4px; }
.bar span { display: block; height: 8px; background: var(--accent); border-radius: 4px; }
.absent { color: var(--muted); font-style: italic; }
.caption, .small { color: var(--muted); font-size: 12px; }
.plot { width: 100%; min-height: 280px; }
.chainbox { overflow-x: auto; margin: 6px 0 14px; }
svg.chain rect { stroke: #355; stroke-width: 1.2; }
svg.chain .cause rect { fill: #fde2df; } svg.chain .symptom rect { fill: #e3edf9; }
svg.chain .missing rect { fill: #f3f3f3; stroke-dasharray: 4 3; }
svg.chain text { font: 12px system-ui, sans-serif; fill: #1d232a; }
svg.chain text.sub { fill: #5b6570; font-size: 11px; }
svg.chain text.strength, svg.correlation text.strength { font-size: 11px; fill: #333; font-weight: 600; }
svg.correlation rect { fill: #e3edf9; stroke: #355; stroke-width: 1.2; }
svg.correlation text { font: 12px system-ui, sans-serif; fill: #1d232a; }
svg.correlation text.sub { fill: #5b6570; font-size: 11px; }
footer { color: var(--muted); font-size: 12px; padding: 0 28px 30px; }
form textarea { width: 100%; font: 13px ui-monospace, monospace; min-height: 90px; }
.error { color: #b3261e; white-space: pre-wrap; }
"""

RENDER = """(function () {
  var figs = JSON.parse(document.getElementById("dt-figures").textContent);
  var ids = Object.keys(figs);
  ids.forEach(function (id) {
    var f = figs[id];
    var config = Object.assign({displaylogo: false, responsive: true}, f.config || {});
    Plotly.newPlot(id, f.data, f.layout, config);
  });
  document.body.setAttribute("data-plots", String(ids.length));
})();"""


@functools.cache
def plotly_js() -> str:
    """The plotly.js bundle shipped with the installed plotly package (read once)."""
    from plotly.offline import get_plotlyjs

    js: str = get_plotlyjs()
    return js


def shell(title: str, body: str, *, plotly: bool = False, scripts: str = "", plotly_src: str | None = None,
          head: str = "") -> str:
    """A whole page: the common style, plotly.js when asked (inlined, or from ``plotly_src`` on the same server),
    extra ``head`` markup, ``body`` (HTML) and trailing scripts."""
    js = "" if not plotly else (f'<script src="{h(plotly_src)}"></script>' if plotly_src
                                else f"<script>{plotly_js()}</script>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{h(title)}</title><style>{STYLE}</style>{head}{js}</head>"
            f"<body>{body}{scripts}</body></html>\n")


@dataclass
class Section:
    id: str
    title: str
    html: str = ""
    figures: list[plots.Figure] = field(default_factory=list)
    note: str = ""

    @property
    def state(self) -> str:
        return "rendered" if self.figures or (self.html and not self.note) else "absent"


@dataclass(frozen=True)
class Report:
    """A rendered report: the page, what each section shows, and the cost figures."""

    run_id: str
    html: str
    sections: dict[str, dict[str, Any]]
    plots: int
    chains: int
    cost: dict[str, Any] | None

    def write(self, path: str | Path) -> Path:
        """Write the page atomically; returns its path."""
        path = Path(path)
        atomic_write_bytes(path, self.html.encode("utf-8"))
        return path

    def as_dict(self) -> dict[str, Any]:
        return {"run": self.run_id, "bytes": len(self.html.encode("utf-8")), "plots": self.plots,
                "chains": self.chains, "sections": self.sections, "cost": self.cost}


def _figure_section(sid: str, title: str, built: plots.Built) -> Section:
    figs, note = built
    return Section(sid, title, figures=figs, note=note if not figs else "", html=absent(note) if not figs else "")


def _chains(d: ReportData) -> Section:
    if not d.hypotheses:
        return Section("chain", "Cause chain", html=absent("No hypothesis, so no cause chain."), note="no hypothesis")
    onsets: dict[str, int] = {}
    for f in d.findings:
        onsets[f.symptom] = min(onsets.get(f.symptom, f.onset_step), f.onset_step)
    parts = []
    for hyp in d.hypotheses[:CHAINS_SHOWN]:
        svg = chain_svg(hyp, onsets, d.links, d.label, key=f"h{hyp.rank}")
        parts.append(f"<h3>#{hyp.rank} {named(d, hyp.cause)} — confidence {hyp.confidence:.2f}</h3>"
                     f'<div class="chainbox">{svg}</div>')
    more = len(d.hypotheses) - CHAINS_SHOWN
    tail = f'<p class="small">{more} more hypothesis(es) in the table above.</p>' if more > 0 else ""
    legend = ('<p class="caption">Cause, then symptoms in onset order. Edges are causal links of the knowledge base '
              "(width and label: the probability that the effect shows given the cause); a dashed edge marked ? "
              "has no link in the knowledge base.</p>")
    return Section("chain", "Cause chain", html=legend + "".join(parts) + tail)


def _correlation(d: ReportData) -> Section:
    svg = correlation_svg(d.findings, d.correlations, d.label)
    if not svg:
        note = ("No two findings' series moved together, so the correlation graph has no edge." if d.findings
                else "No findings, so no correlation graph.")
        return Section("correlation", "Correlation graph", html=absent(note), note=note)
    by_id = {f.id: f for f in d.findings}
    rows = [(named(d, by_id[e.a].symptom) + f" <code>{h(by_id[e.a].entity or '(run)')}</code>",
             named(d, by_id[e.b].symptom) + f" <code>{h(by_id[e.b].entity or '(run)')}</code>",
             h(f"{e.lag_steps} steps" if e.lag_steps else "same step"), f"{e.correlation:+.3f}")
            for e in d.correlations if e.a in by_id and e.b in by_id]
    legend = ('<p class="caption">Findings whose series moved together: an arrow from the one that moved first to '
              "the one that followed (a double arrow: the same step), labelled with the correlation coefficient "
              "r and the lag; width grows with |r|, a dashed edge is a negative correlation. The root-cause "
              "inference counts an edge as support for a chain that links both symptoms.</p>")
    return Section("correlation", "Correlation graph",
                   html=legend + f'<div class="chainbox">{svg}</div>'
                   + table(("leads", "follows", "lag", "r"), rows, "correlations"))


def sections_of(d: ReportData) -> list[Section]:
    status, sentence = status_of(d)
    notes = [*d.diagnosis.get("notes", []), *d.notes] + ([d.telemetry_note] if d.telemetry_note else [])
    note_html = "".join(f"<li>{h(n)}</li>" for n in notes)
    summary = (f'<p><span class="status {h(status)}">{h(status)}</span> {h(sentence)}</p>' + summary_table(d)
               + ("<h3>Ranked hypotheses</h3>" + hypotheses_table(d) if d.hypotheses else
                  absent("No cause reaches the reporting threshold."))
               + (f'<ul class="notes small">{note_html}</ul>' if note_html else ""))
    out = [Section("summary", "Run and diagnosis", html=summary),
           Section("cost", "Cost of the problem", html=cost_block(d), note=d.cost_note if d.cost is None else ""),
           _chains(d),
           _correlation(d),
           _figure_section("loss", "Loss and learning rate", plots.loss_figure(d)),
           _figure_section("gradients", "Gradient norms per layer", plots.gradient_figure(d)),
           _figure_section("experts", "Experts: token share", plots.expert_figure(d)),
           _figure_section("ranks", "Ranks: step and communication time", plots.rank_figures(d)),
           _figure_section("grid", "Parallel grid: compute per replica and stage", grid_figure(d)),
           _figure_section("hardware", "Hardware", plots.hardware_figures(d))]
    sug = (suggestions_table(d) if d.suggestions else
           absent(h(d.suggestion_note or "No remedy addresses the hypothesised causes.")))
    out.append(Section("suggestions", "Suggested remedies", html=sug,
                       note="" if d.suggestions else "no suggestion"))
    tuning = _figure_section("tuning", "Tuning experiments", plots.tuning_figures(d))
    if d.experiments:
        tuning.html += experiments_table(d)
    out.append(tuning)
    out.append(Section("findings", "All findings", html=findings_table(d) if d.findings else absent("No findings."),
                       note="" if d.findings else "no findings"))
    return out


def page_of(title: str, heading: str, sections: list[Section], *, top: str = "",
            plotly_src: str | None = None) -> tuple[str, int]:
    """A page of sections with their figures (drawn by plotly.js in the browser); ``heading`` is the header's
    HTML, ``top`` HTML above it (the dashboard's links). Returns the page and its number of figures."""
    figures: dict[str, dict[str, Any]] = {}
    blocks = []
    for s in sections:
        inner = s.html
        for fig in s.figures:
            pid = f"plot-{len(figures) + 1}"
            figures[pid] = {"data": fig.data, "layout": fig.layout, "config": fig.config}
            cap = f'<p class="caption">{fig.caption}</p>' if fig.caption else ""
            inner += f'<div class="plot" id="{pid}"></div>{cap}'
        blocks.append(f'<section id="{h(s.id)}" data-state="{s.state}"><h2>{h(s.title)}</h2>{inner}</section>')
    links = "".join(f'<a href="#{h(s.id)}">{h(s.title)}</a>' for s in sections)
    where = ("self-contained: plotly.js is inlined, nothing is fetched from the network." if plotly_src is None
             else "plotly.js is served by this server; nothing is fetched from elsewhere.")
    body = (f"{top}<header>{heading}</header><nav>{links}</nav><main>{''.join(blocks)}</main>"
            f"<footer>debugtune {h(_version())} · generated {h(datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'))} · "
            f"{where}</footer>")
    scripts = (f'<script type="application/json" id="dt-figures">{script_json(figures)}</script>'
               f"<script>{RENDER}</script>")
    return shell(title, body, plotly=True, scripts=scripts, plotly_src=plotly_src), len(figures)


def render(d: ReportData, *, top: str = "", plotly_src: str | None = None) -> Report:
    """The report page of the gathered data; the dashboard's run page adds its links (``top``, HTML) and
    loads plotly.js from ``plotly_src`` instead of inlining it."""
    sections = sections_of(d)
    status, sentence = status_of(d)
    page, n = page_of(f"debugtune report: {d.run_id} ({status})",
                      f"<h1>debugtune report: {h(d.run_id)}</h1><div>{h(sentence)}</div>", sections, top=top,
                      plotly_src=plotly_src)
    info = {s.id: {"title": s.title, "state": s.state, "figures": len(s.figures),
                   **({"note": _plain(s.note)} if s.state == "absent" else {})} for s in sections}
    return Report(run_id=d.run_id, html=page, sections=info, plots=n,
                  chains=min(len(d.hypotheses), CHAINS_SHOWN), cost=d.cost.as_dict() if d.cost else None)


def _plain(html_text: str) -> str:
    """A note's text without its markup."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


def _version() -> str:
    try:
        return metadata.version("debugtune")
    except metadata.PackageNotFoundError:
        return "(not installed)"
