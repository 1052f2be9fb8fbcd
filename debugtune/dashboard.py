"""The served dashboard (docs/report.md): ``/`` lists the runs with their top hypothesis and holds a DSL query
box, ``/query?q=…`` shows a DSL result as a table, ``/runs/{id}/report`` serves the run's HTML report.

Pages are rendered on the server with every value escaped; they load nothing from other origins.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query
from fastapi.responses import HTMLResponse, Response

from debugtune.engine.report import ReportError, build_report, shell
from debugtune.engine.report.escape import h
from debugtune.engine.report.gather import kb_labels
from debugtune.engine.report.tables import absent, table
from debugtune.engine.suggest import SuggestError
from debugtune.kg.assertions import runs
from debugtune.kg.endpoint import EndpointSettings, utf8_request
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.namespaces import local_name
from debugtune.kg.store import Store
from debugtune.query import DslError, run_query

EXAMPLE_QUERY = "runs"
MAX_CELL = 300


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    header = (f'<header><h1>{h(title)}</h1><div><a href="/">runs</a> · <a href="/docs">API</a> · '
              f'<a href="/sparql">SPARQL</a></div></header>')
    return HTMLResponse(shell(title, header + f"<main>{body}</main>"), status_code=status)


def _form(text: str) -> str:
    return ('<section id="dsl"><h2>Query the knowledge graph (DSL, docs/query.md)</h2>'
            '<form method="get" action="/query"><textarea name="q" id="dsl-query" spellcheck="false">'
            f'{h(text)}</textarea><p><button type="submit" id="dsl-run">Run query</button> '
            '<span class="small">e.g. <code>causes of run RUN</code>, <code>suggest for run RUN limit 5</code>, '
            '<code>remedies for cause GateInitBias</code>, <code>runs</code></span></p></form></section>')


def _runs_section(store: Store) -> str:
    rows = runs(store)
    if not rows:
        return ('<section id="runs"><h2>Runs</h2>' + absent(
            "No diagnosed run in this store yet: <code>cann-debug diagnose RUN_DIR --store …</code>") + "</section>")
    labels = kb_labels(store, [local_name(r["top"]) for r in rows if r.get("top")])
    body = []
    for r in rows:
        run_id = str(r["run"])
        href = f"/runs/{quote(run_id, safe='')}/report"
        top = local_name(r["top"]) if r.get("top") else ""
        cause = f"{h(labels.get(top, top))} <code>{h(top)}</code>" if top else '<span class="absent">none</span>'
        conf = f"{float(r['confidence']):.2f}" if r.get("confidence") is not None else ""
        body.append((f'<a class="run" href="{h(href)}">{h(run_id)}</a>', h(r.get("steps") or ""),
                     h(r.get("world") or ""), cause, conf, f'<a href="{h(href)}">report</a>'))
    return ('<section id="runs"><h2>Runs</h2>'
            + table(("run", "steps", "world size", "top hypothesis", "confidence", ""), body, "runs") + "</section>")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return h(f"{value:.4g}")
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(("http://", "https://", "urn:")):
        text = local_name(value) or value
    return h(text if len(text) <= MAX_CELL else text[:MAX_CELL] + "…")


def _result_section(text: str, store: Store, settings: EndpointSettings) -> tuple[str, int]:
    try:
        result = settings.run_limited(run_query, text, store)
    except DslError as err:
        return f'<section id="result"><h2>Error</h2><pre class="error">{h(err)}</pre></section>', 400
    notes = "".join(f"<li>{h(n)}</li>" for n in result.notes)
    if result.rows:
        rows = [[_cell(r.get(c)) for c in result.columns] for r in result.rows]
        shown = table(result.columns, rows, "dsl-result")
    else:
        shown = absent("No rows.")
    sparql = "".join(f"<pre><code>{h(s)}</code></pre>" for s in result.sparql)
    return (f'<section id="result"><h2>{len(result.rows)} row(s)</h2>{shown}'
            f'<ul class="small">{notes}</ul><details><summary>SPARQL that ran</summary>{sparql}</details>'
            "</section>"), 200


def dashboard_router(store: Store, settings: EndpointSettings) -> APIRouter:
    """``/``, ``/query`` and ``/runs/{run_id}/report`` as HTML pages over ``store``; a path or query string that is
    not UTF-8 gets 400."""
    settings.share(store)
    router = APIRouter(dependencies=[Depends(utf8_request)])

    @router.get("/", response_class=HTMLResponse, tags=["dashboard"], summary="Runs and their top hypothesis")
    def home() -> HTMLResponse:
        runs_html = settings.run_limited(_runs_section, store)
        return _page("debugtune dashboard", runs_html + _form(EXAMPLE_QUERY))

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @router.get("/query", response_class=HTMLResponse, tags=["dashboard"], summary="A DSL query as a table")
    def query_page(q: str = Query("", max_length=20_000)) -> HTMLResponse:
        if not q.strip():
            return _page("debugtune query", _form(EXAMPLE_QUERY))
        result, status = _result_section(q, store, settings)
        return _page("debugtune query", _form(q) + result, status)

    @router.get("/runs/{run_id}/report", response_class=HTMLResponse, tags=["dashboard"],
                summary="The run's self-contained HTML report")
    def run_report_page(run_id: str) -> HTMLResponse:
        try:
            report = settings.run_limited(build_report, store, run_id)
        except (SuggestError, ReportError) as err:
            status = 404 if isinstance(err, SuggestError) else 500
            return _page("no report", f'<section><pre class="error">{h(err)}</pre></section>', status)
        except DebugtuneError as err:
            return _page("no report", f'<section><pre class="error">{h(err)}</pre></section>', 400)
        return HTMLResponse(report.html)

    return router
