"""The served dashboard over real HTTP (uvicorn on 127.0.0.1): the runs, the report and run pages, the DSL box
with parameters and changes as text, the comparison of two runs, the bundled SPARQL editor and its assets,
escaping; then every page in headless Chromium (skips without a browser), a SPARQL query run in the editor
among them, with no request leaving the server and no console error."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest

from debugtune.api import diagnose
from debugtune.dashboard import STATIC
from debugtune.engine.report import build_report
from debugtune.engine.report.page import plotly_js
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.server import create_app
from tests.app_server import serving
from tests.report_fixtures import (
    XSS,
    chromium,
    console_errors,
    hostile_store,
    network_requests,
    save_screenshot,
    seed_run,
    wait_for,
    wait_for_plots,
)

QUERY = "remedies for cause GateInitBias limit 3"
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = open_store(None)
    load_knowledge(store)
    run_id = diagnose(seed_run(), store=store).run
    _, hostile = hostile_store(tmp_path_factory.mktemp("hostile"), store)
    with serving(create_app(store)) as url:
        yield url, store, run_id, hostile
    store.close()


def test_dashboard_lists_runs_and_serves_their_pages(served):
    url, store, run_id, hostile = served
    home = httpx.get(url + "/")
    assert home.status_code == 200 and home.headers["content-type"].startswith("text/html")
    for rid in (run_id, hostile):
        assert f'href="/runs/{rid}/page"' in home.text and f'href="/runs/{rid}/report"' in home.text
    assert 'action="/compare"' in home.text and 'href="/sparql-editor"' in home.text
    top = store.query(f'SELECT ?c WHERE {{ ?h dt:inRun ?r ; dt:hypothesisRank 1 ; dt:cause ?c . '
                      f'?r dt:runId "{run_id}" }}').scalar()
    assert f"<code>{top.rsplit('/', 1)[-1]}</code>" in home.text
    plots = build_report(store, run_id).plots
    page = httpx.get(f"{url}/runs/{run_id}/report", timeout=60)
    assert page.status_code == 200 and page.text.count('<div class="plot" id="plot-') == plots
    inside = httpx.get(f"{url}/runs/{run_id}/page", timeout=60)
    assert inside.status_code == 200 and inside.text.count('<div class="plot" id="plot-') == plots
    assert '<script src="/static/plotly.min.js">' in inside.text and 'class="dash"' in inside.text
    assert len(inside.content) < len(page.content) - 4_000_000  # plotly.js is served once, not inlined
    bad = httpx.get(f"{url}/runs/{hostile}-missing/page")
    assert bad.status_code == 404 and "unknown run" in bad.text
    odd = httpx.get(url + "/runs/%3Cscript%3Ealert(1)%22q'/report")
    assert odd.status_code == 404 and "<script>alert" not in odd.text and "&lt;script&gt;alert" in odd.text


def test_dsl_box_answers_with_a_table_of_text_and_escapes(served):
    url, _, run_id, _ = served
    ok = httpx.get(url + "/query", params={"q": QUERY})
    assert ok.status_code == 200 and '<table class="dsl-result">' in ok.text
    assert len(re.findall(r"<tr>", ok.text.split('class="dsl-result"')[1].split("</table>")[0])) == 1 + 3
    suggest = httpx.get(url + "/query", params={"q": f"suggest for run {run_id} limit 3"}, timeout=60)
    result = suggest.text.split('class="dsl-result"')[1].split("</table>")[0]
    assert "<th>cost (card-h)</th>" in result and "<th>config changes</th>" in result
    assert " → " in result and "unset →" in result and "∈ [" in result  # changes and parameters as text
    assert '{"' not in result and "None" not in result and "&quot;key&quot;" not in result  # no JSON in cells
    bad = httpx.get(url + "/query", params={"q": XSS})
    assert bad.status_code == 400 and "<script>alert(1)" not in bad.text and "&lt;script&gt;alert(1)" in bad.text
    assert 'class="error"' in bad.text and "line 1, column 1" in bad.text


def test_compare_two_runs(served):
    url, _, run_id, hostile = served
    page = httpx.get(url + "/compare", params={"a": run_id, "b": hostile}, timeout=60)
    assert page.status_code == 200
    for part in ('class="compare-runs"', 'class="compare-findings"', 'class="compare-hypotheses"'):
        assert part in page.text
    assert page.text.count('<div class="plot" id="plot-') == 2 and "<script>alert(1)" not in page.text
    pick = httpx.get(url + "/compare")
    assert pick.status_code == 200 and '<select name="a"' in pick.text and hostile in pick.text
    missing = httpx.get(url + "/compare", params={"a": run_id, "b": "no-such-run"})
    assert missing.status_code == 404


def test_the_editor_and_its_assets_are_served_from_the_package(served):
    url, *_ = served
    editor = httpx.get(url + "/sparql-editor")
    assert editor.status_code == 200
    srcs = re.findall(r'(?:src|href)="([^"]+)"', editor.text)
    assert "/static/yasgui/yasgui.min.js" in srcs and "/static/yasgui/yasgui.min.css" in srcs
    assert all(s.startswith(("/", "#")) or s.startswith("https://github.com/TriplyDB") for s in srcs), srcs
    manifest = json.loads((STATIC / "yasgui" / "manifest.json").read_text())
    package = json.loads((REPO / "dashboard" / "package.json").read_text())
    lock = json.loads((REPO / "dashboard" / "package-lock.json").read_text())
    assert manifest["version"] == package["dependencies"]["@triply/yasgui"] == \
        lock["packages"]["node_modules/@triply/yasgui"]["version"] and manifest["license"] == "MIT"
    for name, digest in manifest["sha256"].items():
        body = httpx.get(f"{url}/static/yasgui/{name}").content
        assert hashlib.sha256(body).hexdigest() == digest, name
    assert httpx.get(url + "/static/yasgui/..%2Fdashboard.py").status_code == 404
    assert httpx.get(url + "/static/plotly.min.js").text == plotly_js()


def test_every_page_in_chromium_and_a_sparql_query_in_the_editor(served):
    url, _, run_id, hostile = served
    local = (url + "/",)
    with chromium() as driver:
        driver.get(url + "/")
        rows = driver.find_elements("css selector", "table.runs tbody tr")
        assert len(rows) >= 2 and any(XSS not in r.text and hostile in r.text for r in rows)
        save_screenshot(driver, "dashboard-runs")
        driver.find_element("css selector", f'a.run[href="/runs/{run_id}/page"]').click()
        counts = wait_for_plots(driver, timeout=60)
        assert counts["expected"] == counts["plotly"] == counts["with_svg"] == counts["with_data"] >= 4, counts
        assert counts["chains"] >= 1
        save_screenshot(driver, "dashboard-run-page")

        driver.get(url + "/")
        driver.find_element("id", "compare-run").click()
        counts = wait_for_plots(driver, timeout=60)
        assert counts["expected"] == counts["plotly"] == counts["with_data"] == 2, counts
        save_screenshot(driver, "dashboard-compare")

        driver.get(url + "/")
        box = driver.find_element("id", "dsl-query")
        box.clear()
        box.send_keys(f"suggest for run {run_id} limit 3")
        driver.find_element("id", "dsl-run").click()
        table = wait_for(driver, "table.dsl-result", timeout=60)
        assert len(table.find_elements("css selector", "tbody tr")) == 3 and "unset →" in table.text
        assert driver.current_url.startswith(url + "/query?q=")
        save_screenshot(driver, "dashboard-query")

        _run_in_editor(driver, url, run_id)
        save_screenshot(driver, "dashboard-sparql-editor", full=False)
        assert console_errors(driver) == []
        assert network_requests(driver, allowed=local) == []


def _run_in_editor(driver, url: str, run_id: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url + "/sparql-editor")
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.editor") == "ready")
    query = ("PREFIX dt: <https://w3id.org/debugtune#>\nSELECT ?cause ?confidence WHERE {\n"
             f'  ?r dt:runId "{run_id}" . ?h a dt:Hypothesis ; dt:inRun ?r ; dt:cause ?cause ;\n'
             "     dt:confidence ?confidence }\nORDER BY DESC(?confidence)")
    driver.execute_script("window.dtYasgui.getTab().setQuery(arguments[0]);", query)
    driver.find_element("css selector", ".yasqe_queryButton").click()
    WebDriverWait(driver, 60).until(lambda d: d.find_elements("css selector", ".yasr table.dataTable tbody tr td"))
    cells = driver.find_element("css selector", ".yasr table.dataTable tbody").text
    assert "GateInitBias" in cells, cells
