"""The served dashboard (docs/report.md): ``/`` lists the runs with their top hypothesis, a DSL box and a form
to compare two runs; ``/query?q=…`` shows a DSL result as a table (parameters and config changes as text);
``/sparql-editor`` is YASGUI over this server's ``/sparql``; ``/runs/{id}/page`` is a run's report inside the
dashboard; ``/runs/{id}/report`` the self-contained report; ``/compare?a=…&b=…`` two runs side by side.

Pages are rendered on the server with every value escaped. They load nothing from other origins: YASGUI
(``debugtune/static/yasgui``, built by ``dashboard/build.mjs`` from the npm package) and plotly.js (from the
installed plotly package) are served by the dashboard itself under ``/static``.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Query
from fastapi.responses import FileResponse, HTMLResponse, Response

from debugtune.engine.report import ReportError, build_report, shell
from debugtune.engine.report.data import kb_labels
from debugtune.engine.report.escape import h, script_json
from debugtune.engine.report.tables import absent, table
from debugtune.engine.report.text import header, value_text
from debugtune.engine.suggest import SuggestError
from debugtune.kg.assertions import runs
from debugtune.kg.endpoint import EndpointSettings, utf8_request
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.namespaces import SPARQL_PREFIXES, local_name
from debugtune.kg.store import Store
from debugtune.query import DslError, run_query

EXAMPLE_QUERY = "runs"
STATIC = Path(__file__).resolve().parent / "static"
YASGUI_FILES = ("yasgui.min.js", "yasgui.min.css", "LICENSE.txt", "yasgui.min.js.LICENSE.txt", "manifest.json")
PLOTLY_SRC = "/static/plotly.min.js"
EDITOR_QUERY = """SELECT ?cause ?label (COUNT(?link) AS ?links) WHERE {
  ?cause a dt:Cause ; skos:prefLabel ?label .
  OPTIONAL { ?link a dt:CausalLink ; dt:from ?cause }
} GROUP BY ?cause ?label ORDER BY DESC(?links) LIMIT 20"""
EXTRA_STYLE = """
header .links a { margin-right: 12px; color: var(--accent); text-decoration: none; }
nav.dash { background: #1d232a; padding: 6px 28px; font-size: 13px; }
nav.dash a { color: #fff; margin-right: 16px; text-decoration: none; }
form.compare select { font: 13px system-ui, sans-serif; margin: 0 6px; }
td.lines { white-space: pre-line; }
#yasgui { background: #fff; }
"""


def _links() -> str:
    return ('<a href="/">runs</a><a href="/query">DSL query</a><a href="/sparql-editor">SPARQL editor</a>'
            '<a href="/compare">compare runs</a><a href="/docs">API</a>')


def _top_nav() -> str:
    """The dashboard's links above a report page (run page, comparison)."""
    return f'<nav class="dash">{_links()}</nav>'


def _page(title: str, body: str, status: int = 200, *, head: str = "", scripts: str = "") -> HTMLResponse:
    top = f'<header><h1>{h(title)}</h1><div class="links">{_links()}</div></header>'
    return HTMLResponse(shell(title, top + f"<main>{body}</main>", head=f"<style>{EXTRA_STYLE}</style>{head}",
                              scripts=scripts), status_code=status)


def _error(title: str, err: Exception, status: int) -> HTMLResponse:
    return _page(title, f'<section><pre class="error">{h(err)}</pre></section>', status)


def _run_href(run_id: str, what: str = "page") -> str:
    return f"/runs/{quote(run_id, safe='')}/{what}"


def _form(text: str) -> str:
    return ('<section id="dsl"><h2>Query the knowledge graph (DSL, docs/query.md)</h2>'
            '<form method="get" action="/query"><textarea name="q" id="dsl-query" spellcheck="false">'
            f'{h(text)}</textarea><p><button type="submit" id="dsl-run">Run query</button> '
            '<span class="small">e.g. <code>causes of run RUN</code>, <code>suggest for run RUN limit 5</code>, '
            '<code>remedies for cause GateInitBias</code>, <code>runs</code>; raw SPARQL in the '
            '<a href="/sparql-editor">SPARQL editor</a></span></p></form></section>')


def _compare_form(ids: list[str], a: str = "", b: str = "") -> str:
    if len(ids) < 2:
        return ""

    def select(name: str, chosen: str) -> str:
        opts = "".join(f'<option value="{h(i)}"{" selected" if i == chosen else ""}>{h(i)}</option>' for i in ids)
        return f'<select name="{name}" id="compare-{name}">{opts}</select>'

    return ('<form class="compare" method="get" action="/compare"><p>Compare run '
            f'{select("a", a or ids[0])} with {select("b", b or ids[1])} '
            '<button type="submit" id="compare-run">Compare</button></p></form>')


def _runs_section(store: Store) -> str:
    rows = runs(store)
    if not rows:
        return ('<section id="runs"><h2>Runs</h2>' + absent(
            "No diagnosed run in this store yet: <code>cann-debug diagnose RUN_DIR --store …</code>") + "</section>")
    labels = kb_labels(store, [local_name(r["top"]) for r in rows if r.get("top")])
    body = []
    for r in rows:
        run_id = str(r["run"])
        top = local_name(r["top"]) if r.get("top") else ""
        cause = f"{h(labels.get(top, top))} <code>{h(top)}</code>" if top else '<span class="absent">none</span>'
        conf = f"{float(r['confidence']):.2f}" if r.get("confidence") is not None else ""
        body.append((f'<a class="run" href="{h(_run_href(run_id))}">{h(run_id)}</a>', h(r.get("steps") or ""),
                     h(r.get("world") or ""), cause, conf,
                     f'<a href="{h(_run_href(run_id))}">page</a> · '
                     f'<a href="{h(_run_href(run_id, "report"))}">report</a>'))
    return ('<section id="runs"><h2>Runs</h2>'
            + table(("run", "steps", "world size", "top hypothesis", "confidence", ""), body, "runs")
            + _compare_form([str(r["run"]) for r in rows]) + "</section>")


def _cell(column: str, value: Any) -> str:
    """A result value as text: one line per list item, parameters and config changes spelled out, IRIs by
    their local name, no ``None``."""
    return "<br>".join(h(line) for line in value_text(column, value, units=False))


def _result_section(text: str, store: Store, settings: EndpointSettings) -> tuple[str, int]:
    try:
        result = settings.run_limited(run_query, text, store)
    except DslError as err:
        return f'<section id="result"><h2>Error</h2><pre class="error">{h(err)}</pre></section>', 400
    notes = "".join(f"<li>{h(n)}</li>" for n in result.notes)
    if result.rows:
        rows = [[_cell(c, r.get(c)) for c in result.columns] for r in result.rows]
        shown = table([header(c) for c in result.columns], rows, "dsl-result")
    else:
        shown = absent("No rows.")
    sparql = "".join(f"<pre><code>{h(s)}</code></pre>" for s in result.sparql)
    return (f'<section id="result"><h2>{len(result.rows)} row(s)</h2>{shown}'
            f'<ul class="small">{notes}</ul><details><summary>SPARQL that ran</summary>{sparql}</details>'
            "</section>"), 200


def _editor_page() -> HTMLResponse:
    """YASGUI over this server's /sparql, configured so that it fetches nothing elsewhere."""
    wanted = ("PREFIX dt:", "PREFIX skos:", "PREFIX kb:")
    query = "".join(line + "\n" for line in SPARQL_PREFIXES.splitlines() if line.startswith(wanted))
    query += "\n" + EDITOR_QUERY
    body = ('<section id="editor"><h2>SPARQL editor</h2><p class="small">Queries go to <code>/sparql</code> on '
            "this server (read-only unless it was started with <code>--allow-update</code>); the default graph "
            "is the union of all graphs. Ctrl-Enter runs the query. The editor is "
            '<a href="https://github.com/TriplyDB/yasgui">YASGUI</a> (MIT, '
            '<a href="/static/yasgui/LICENSE.txt">licence</a>), served by this dashboard.</p>'
            '<div id="yasgui"></div></section>')
    script = f"""<script src="/static/yasgui/yasgui.min.js"></script><script>(function () {{
  // prefix.cc and LOV autocompletion would fetch from the network: only variables are completed
  var completers = Yasgui.Yasqe.defaults.autocompleters;
  completers.splice(0, completers.length, "variables");
  var endpoint = new URL("/sparql", window.location.href).href;
  window.dtYasgui = new Yasgui(document.getElementById("yasgui"), {{
    requestConfig: {{endpoint: endpoint, method: "POST"}},
    endpointCatalogueOptions: {{getData: function () {{ return [{{endpoint: endpoint}}]; }}}},
    copyEndpointOnNewTab: true, persistenceId: null, populateFromUrl: false,
    yasqe: {{value: {script_json(query)}}}
  }});
  document.body.setAttribute("data-editor", "ready");
}})();</script>"""
    return _page("debugtune SPARQL editor", body, head='<link rel="stylesheet" href="/static/yasgui/yasgui.min.css">',
                 scripts=script)


@functools.cache
def _plotly_bytes() -> bytes:
    from debugtune.engine.report.page import plotly_js

    return plotly_js().encode("utf-8")


def _report_html(store: Store, run_id: str) -> str:
    return build_report(store, run_id).html


def _run_page_html(store: Store, run_id: str) -> str:
    from debugtune.engine.report import gather, render

    top = _top_nav() + (f'<nav class="dash"><a href="{h(_run_href(run_id, "report"))}">self-contained report '
                        f'(to save)</a><a href="/compare?{h(urlencode({"a": run_id}))}">compare with …</a></nav>')
    return render(gather(store, run_id), top=top, plotly_src=PLOTLY_SRC).html


def _compare_html(store: Store, a: str, b: str) -> str:
    from debugtune.engine.report import gather
    from debugtune.engine.report.compare import compare_page

    return compare_page(gather(store, a), gather(store, b), links=(_run_href(a), _run_href(b)), top=_top_nav(),
                        plotly_src=PLOTLY_SRC)[0]


def dashboard_router(store: Store, settings: EndpointSettings) -> APIRouter:
    """The dashboard's pages and static assets over ``store``; pages run on the endpoint's query workers
    (``settings.run_limited``, module-level functions); a path or query string that is not UTF-8 gets 400."""
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

    @router.get("/sparql-editor", response_class=HTMLResponse, tags=["dashboard"],
                summary="A SPARQL editor (YASGUI) over /sparql")
    def editor() -> HTMLResponse:
        return _editor_page()

    @router.get("/static/yasgui/{name}", include_in_schema=False)
    def yasgui_asset(name: str) -> Response:
        if name not in YASGUI_FILES or not (STATIC / "yasgui" / name).is_file():
            return Response(status_code=404)
        return FileResponse(STATIC / "yasgui" / name, headers={"Cache-Control": "public, max-age=86400"})

    @router.get(PLOTLY_SRC, include_in_schema=False)
    def plotly_asset() -> Response:
        return Response(_plotly_bytes(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    def report_or_error(title: str, make, *args: Any) -> HTMLResponse:
        try:
            return HTMLResponse(settings.run_limited(make, *args))
        except (SuggestError, ReportError) as err:
            return _error(title, err, 404 if isinstance(err, SuggestError) else 500)
        except DebugtuneError as err:
            return _error(title, err, 400)

    @router.get("/runs/{run_id}/report", response_class=HTMLResponse, tags=["dashboard"],
                summary="The run's self-contained HTML report")
    def run_report_page(run_id: str) -> HTMLResponse:
        return report_or_error("no report", _report_html, store, run_id)

    @router.get("/runs/{run_id}/page", response_class=HTMLResponse, tags=["dashboard"],
                summary="The run's report inside the dashboard")
    def run_page(run_id: str) -> HTMLResponse:
        return report_or_error("no run page", _run_page_html, store, run_id)

    @router.get("/compare", response_class=HTMLResponse, tags=["dashboard"], summary="Two runs side by side")
    def compare(a: str = Query("", max_length=500), b: str = Query("", max_length=500)) -> HTMLResponse:
        if not a or not b or a == b:
            ids = [str(r["run"]) for r in settings.run_limited(runs, store)]
            form = _compare_form(ids, a, b) or absent("Comparing needs two diagnosed runs in the store.")
            return _page("debugtune: compare two runs", f'<section id="pick"><h2>Pick two runs</h2>{form}</section>')
        return report_or_error("no comparison", _compare_html, store, a, b)

    return router
