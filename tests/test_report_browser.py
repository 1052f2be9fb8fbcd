"""The report in headless Chromium: every plot and chain renders, no console error, no network request, and
markup in run data shows as text (skips with the reason where no browser is installed)."""

from __future__ import annotations

import pytest

from debugtune.api import diagnose
from debugtune.engine.report import build_report
from debugtune.kg import open_store
from tests.report_fixtures import (
    NETWORK_SCHEMES,
    XSS,
    chromium,
    console_errors,
    hostile_store,
    network_requests,
    requests_made,
    save_screenshot,
    seed_run,
    wait_for_plots,
)


@pytest.fixture(scope="module")
def browser():
    with chromium(offline=True) as driver:
        yield driver


def _open(driver, path):
    driver.get_log("browser")
    driver.get_log("performance")
    driver.get(path.as_uri())
    return wait_for_plots(driver)


def test_report_renders_every_plot_without_errors_or_requests(browser, tmp_path):
    store = open_store(None)
    run_id = diagnose(seed_run(), store=store).run
    report = build_report(store, run_id)
    page = report.write(tmp_path / "report.html")
    counts = _open(browser, page)
    assert counts["expected"] == report.plots >= 4
    assert counts["divs"] == counts["plotly"] == counts["with_svg"] == counts["with_data"] == report.plots, counts
    assert counts["chains"] == report.chains >= 1 and counts["chain_nodes"] >= 3 and counts["chain_edges"] >= 2
    assert console_errors(browser) == []
    urls = requests_made(browser)
    assert page.as_uri() in urls
    assert [u for u in urls if u.split(":", 1)[0] in NETWORK_SCHEMES] == [], "the report must fetch nothing"
    assert save_screenshot(browser, "report").stat().st_size > 10_000
    store.close()


def test_markup_in_run_data_renders_as_text(browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException

    store, run_id = hostile_store(tmp_path)
    page = build_report(store, run_id).write(tmp_path / "hostile.html")
    counts = _open(browser, page)
    assert counts["plotly"] == counts["expected"] >= 2
    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text
    assert browser.execute_script("return document.scripts.length") == 3  # plotly.js, the figure JSON, the renderer
    text = browser.find_element("tag name", "body").text
    assert text.count(XSS) >= 3   # label, entity in the findings table, explanation, detector
    ticks = browser.execute_script(
        "return Array.from(document.querySelectorAll('.ytick text')).map(t => t.textContent)")
    assert XSS in ticks
    assert console_errors(browser) == []
    assert network_requests(browser) == []
    save_screenshot(browser, "report-hostile-run")
    store.close()
