"""The HTML tables and text blocks of a report (every value escaped)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from debugtune.engine.report.data import ReportData
from debugtune.engine.report.escape import h
from debugtune.engine.report.text import change_text, number, param_text, value_text
from debugtune.kg.namespaces import local_name


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table whose header texts are escaped here and whose cells are HTML already escaped by the caller."""
    head = "".join(f"<th>{h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    klass = f' class="{h(cls)}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def num(x: Any, digits: int = 3) -> str:
    """A value for a cell: numbers as ``text.number`` writes them, nothing for None."""
    if x is None:
        return ""
    if isinstance(x, int | float):
        return h(number(x, digits))
    return h(x)


def absent(text: str) -> str:
    """A note that a section has no data (``text`` is HTML, escaped by the caller)."""
    return f'<p class="absent">{text}</p>'


def link(url: str) -> str:
    """An anchor for an http(s) source, plain escaped text for anything else."""
    if url.startswith(("https://", "http://")):
        return f'<a href="{h(url)}" rel="noreferrer noopener">{h(url)}</a>'
    return h(url)


def named(d: ReportData, local: str) -> str:
    label = d.label(local)
    return h(label) if label == local else f"{h(label)} <code>{h(local)}</code>"


def summary_table(d: ReportData) -> str:
    meta, info = d.meta, d.graph_info
    steps = meta.get("steps") if isinstance(meta.get("steps"), dict) else {}
    last = d.last_step
    first_last = (f"{steps.get('first', '?')}–{steps.get('last', '?')}" if steps
                  else f"0–{last}" if last is not None else info.get("stepCount", "?"))
    framework = " ".join(str(meta[k]) for k in ("framework", "framework_version") if meta.get(k))
    source = meta.get("source", {}).get("format") if isinstance(meta.get("source"), dict) else None
    rows = [("run", h(d.run_id)), ("label", h(info.get("prefLabel", ""))), ("steps", h(first_last)),
            ("world size", h(meta.get("world_size", info.get("worldSize", "?")))), ("framework", h(framework)),
            ("program", h(meta.get("program", ""))), ("source", h(source or "")),
            ("run directory", h(d.run_dir or "")),
            ("coverage", h(", ".join(f"{k}: {v}" for k, v in d.diagnosis.get("coverage", {}).items())))]
    body = "".join(f"<tr><th>{h(k)}</th><td>{v}</td></tr>" for k, v in rows if v)
    return f'<table class="kv"><tbody>{body}</tbody></table>'


def status_of(d: ReportData) -> tuple[str, str]:
    """(status keyword, one sentence) as the diagnosis report gives them."""
    if d.diagnosis.get("status") and d.diagnosis.get("summary"):
        return str(d.diagnosis["status"]), str(d.diagnosis["summary"])
    if d.hypotheses:
        top = d.hypotheses[0]
        return "diagnosed", f"root cause: {top.cause} (confidence {top.confidence:.2f})"
    if d.findings:
        return "undetermined", f"{len(d.findings)} finding(s) but no cause reaches the reporting threshold"
    return "healthy", "no findings and no hypothesis: the run looks healthy"


def hypotheses_table(d: ReportData) -> str:
    rows = []
    for hyp in d.hypotheses:
        pct = max(0.0, min(1.0, hyp.confidence)) * 100
        bar = (f'<div class="bar" title="{pct:.0f}%"><span style="width:{pct:.1f}%"></span></div>'
               f"{hyp.confidence:.2f}")
        rows.append((str(hyp.rank), named(d, hyp.cause), bar, h(hyp.explanation),
                     "<br>".join(h(f) for f in hyp.findings)))
    return table(("#", "cause", "confidence", "explanation", "supporting findings"), rows, "hyp")


def findings_table(d: ReportData) -> str:
    rows = [(f"<code>{h(f.id)}</code>", named(d, f.symptom), h(f.dimension), f"<code>{h(f.entity or '(run)')}</code>",
             f"{f.onset_step}–{f.end_step}", h("" if f.detection_step is None else f.detection_step),
             f"{f.severity:.2f}", h(f.evidence_text()), h(f.detector))
            for f in d.findings]
    return table(("id", "symptom", "dimension", "where", "steps", "detected at", "severity", "evidence", "detector"),
                 rows, "findings")


def suggestions_table(d: ReportData) -> str:
    rows = []
    for i, s in enumerate(d.suggestions, 1):
        changes = "<br>".join(h(change_text(c)) for c in s.config_changes)
        rows.append((str(i), named(d, s.remedy), f"{s.score:.3f}", f"{s.effectiveness:.2f}", num(s.cost),
                     h(s.risk), f"{s.success_rate:.2f}", ", ".join(named(d, c) for c in s.addresses),
                     "<br>".join(h(param_text(p)) for p in s.parameters), changes,
                     "<br>".join(h(local_name(c)) for c in s.cases)))
    return table(("#", "remedy", "score", "effectiveness", "cost (card-h)", "risk", "success rate", "addresses",
                  "parameters", "config change", "rests on cases"), rows, "suggestions")


def experiments_table(d: ReportData) -> str:
    rows = [(h(e.id), named(d, e.remedy), h(", ".join(value_text("", e.parameters))),
             h(", ".join(value_text("", e.objectives))), num(e.cost), h(e.status))
            for e in d.experiments]
    return table(("experiment", "remedy", "parameters", "objectives", "cost (card-h)", "status"), rows, "experiments")


def _duration(hours: float) -> str:
    seconds = hours * 3600
    return f"{seconds:.3g} s" if seconds < 120 else f"{seconds / 60:.3g} min" if seconds < 7200 else f"{hours:.3g} h"


def cost_block(d: ReportData) -> str:
    c = d.cost
    if c is None:
        return absent(h(d.cost_note))
    price = c.card_hour_price
    rows = [
        ("cards (world size)", num(c.cards)), ("step time", f"{c.step_seconds:.4g} s"),
        ("onset → detection → last step", f"{c.onset_step} → {c.detection_step} → {c.last_step}"),
        ("spent on the broken run since onset", f"{c.lost_card_hours:.4g} card-h (${c.lost_card_hours * price:,.2f})"),
        ("detected after", f"{c.detect_hours * 3600:.4g} s ({c.detect_card_hours:.4g} card-h)"),
        ("saved by stopping at detection", f"{c.saved_card_hours:.4g} card-h (${c.saved_card_hours * price:,.2f})"),
        ("card-hour price", f"${price:g}"),
    ]
    if c.projection_applies:
        rows.insert(-1, (f"projected saving per incident vs. detection by hand after {c.manual_detect_hours:g} h",
                         f"{c.projected_saving_card_hours:.4g} card-h "
                         f"(${c.projected_saving_card_hours * price:,.2f})"))
    else:
        rows.insert(-1, ("projected saving vs. detection by hand",
                         f'<span class="absent">not shown: the run lasted {_duration(c.run_hours)}, less than the '
                         f"{c.manual_detect_hours:g} h a detection by hand takes; project a job of your size with "
                         "<code>cann-tune roi</code></span>"))
    body = "".join(f"<tr><th>{h(k)}</th><td>{v}</td></tr>" for k, v in rows)
    sources = "".join(f"<li>{h(k)}: {', '.join(link(u) for u in v)}</li>" for k, v in c.sources.items())
    notes = "".join(f"<li>{h(n)}</li>" for n in c.notes)
    return (f'<table class="kv"><tbody>{body}</tbody></table><ul class="notes">{notes}</ul>'
            f'<p class="small">Sources of the constants (docs/roi.md):</p><ul class="small">{sources}</ul>')
