"""The served dashboard over real HTTP (uvicorn on 127.0.0.1): the runs with their top hypothesis, the report
route, the DSL box and its table, escaping; then the same pages in headless Chromium (skips without a browser)."""

from __future__ import annotations

import re

import httpx
import pytest

from debugtune.api import diagnose
from debugtune.engine.report import build_report
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
    seed_run,
    wait_for,
    wait_for_plots,
)

QUERY = "remedies for cause AuxLossDisabled limit 3"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = open_store(None)
    load_knowledge(store)
    run_id = diagnose(seed_run(), store=store).run
    _, hostile = hostile_store(tmp_path_factory.mktemp("hostile"), store)
    with serving(create_app(store)) as url:
        yield url, store, run_id, hostile
    store.close()


def test_dashboard_lists_runs_and_serves_their_reports(served):
    url, store, run_id, hostile = served
    home = httpx.get(url + "/")
    assert home.status_code == 200 and home.headers["content-type"].startswith("text/html")
    assert f'href="/runs/{run_id}/report"' in home.text and f'href="/runs/{hostile}/report"' in home.text
    top = store.query(f'SELECT ?c WHERE {{ ?h dt:inRun ?r ; dt:hypothesisRank 1 ; dt:cause ?c . '
                      f'?r dt:runId "{run_id}" }}').scalar()
    assert f"<code>{top.rsplit('/', 1)[-1]}</code>" in home.text
    page = httpx.get(f"{url}/runs/{run_id}/report", timeout=60)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.count('<div class="plot" id="plot-') == build_report(store, run_id).plots
    bad = httpx.get(f"{url}/runs/{hostile}-missing/report")
    assert bad.status_code == 404 and "unknown run" in bad.text
    odd = httpx.get(url + "/runs/%3Cscript%3Ealert(1)%22q'/report")
    assert odd.status_code == 404 and "<script>alert" not in odd.text and "&lt;script&gt;alert" in odd.text


def test_dsl_box_answers_with_a_table_and_escapes(served):
    url, *_ = served
    ok = httpx.get(url + "/query", params={"q": QUERY})
    assert ok.status_code == 200 and '<table class="dsl-result">' in ok.text
    assert len(re.findall(r"<tr>", ok.text.split('class="dsl-result"')[1].split("</table>")[0])) == 1 + 3
    bad = httpx.get(url + "/query", params={"q": XSS})
    assert bad.status_code == 400 and "<script>alert(1)" not in bad.text and "&lt;script&gt;alert(1)" in bad.text
    assert 'class="error"' in bad.text and "line 1, column 1" in bad.text


def test_dashboard_in_chromium(served, tmp_path):
    url, _, run_id, hostile = served
    with chromium() as driver:
        driver.get(url + "/")
        rows = driver.find_elements("css selector", "table.runs tbody tr")
        assert len(rows) >= 2 and any(XSS not in r.text and hostile in r.text for r in rows)
        driver.find_element("css selector", f'a.run[href="/runs/{run_id}/report"]').click()
        counts = wait_for_plots(driver, timeout=60)
        assert counts["expected"] == counts["plotly"] == counts["with_svg"] == counts["with_data"] >= 5, counts
        assert counts["chains"] >= 1
        assert network_requests(driver, allowed=(url + "/",)) == []
        driver.get(url + "/")
        box = driver.find_element("id", "dsl-query")
        box.clear()
        box.send_keys(QUERY)
        driver.find_element("id", "dsl-run").click()
        table = wait_for(driver, "table.dsl-result", timeout=60)
        assert len(table.find_elements("css selector", "tbody tr")) == 3
        assert driver.current_url.startswith(url + "/query?q=")
        assert console_errors(driver) == []
        shot = tmp_path / "dashboard.png"
        driver.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 5_000
