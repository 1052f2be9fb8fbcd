"""Runs and a headless Chromium shared by the report, dashboard and ROI tests.

``seed_run()`` trains the seed scenario (the tiny MoE with a biased gate, real PyTorch on CPU, probed)
once per test process. ``chromium()`` starts headless Chromium through Selenium and chromedriver with
the flags that work here, console and network logging on, and skips the test with the reason when no
browser is installed. ``hostile_store()`` holds a run whose texts carry markup and quotes.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from debugtune.engine.telemetry import TelemetryWriter, write_run_json
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import Finding, Hypothesis

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
NETWORK_SCHEMES = ("http", "https", "ws", "wss", "ftp")
XSS = "<script>alert(1)</script>\"q'"


def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="dt-report-tests-"))
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.cache
def seed_run() -> Path:
    """The seed scenario's run directory (the MoE whose router starts biased, as in `make demo`), 80 probed steps."""
    import torch

    from debugtune.scenarios.moe import seed_scenario, train_moe

    torch.set_num_threads(1)
    run_dir = _root() / "seed-moe"
    train_moe(seed_scenario(steps=80), run_dir, probe=True)
    return run_dir


def _binary(*names: str) -> str | None:
    for name in names:
        if found := shutil.which(name):
            return found
    return None


@contextmanager
def chromium(*, offline: bool = False) -> Iterator[Any]:
    """A Selenium driver for headless Chromium; ``offline`` also points every request at a dead proxy."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (dev extra)")
    from selenium.webdriver.chrome.service import Service

    browser, driver_bin = _binary(*BROWSERS), _binary("chromedriver")
    if browser is None or driver_bin is None:
        pytest.skip("no headless browser here: install the Debian packages chromium and chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    profile = tempfile.mkdtemp(prefix="dt-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    if offline:
        options.add_argument("--proxy-server=http://127.0.0.1:9")
        options.add_argument("--proxy-bypass-list=<-loopback>")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_bin))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def save_screenshot(driver: Any, name: str, *, full: bool = True) -> Path:
    """A screenshot of the page (grown to its whole height unless ``full`` is False) as ``<name>.png`` in
    ``$DEBUGTUNE_SCREENSHOTS`` (docs/img when refreshing the docs' pictures) or a temporary folder."""
    import os

    folder = Path(os.environ.get("DEBUGTUNE_SCREENSHOTS") or _root())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    if full:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 40, 16000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)
    print(f"screenshot: {path}")
    assert path.stat().st_size > 5_000
    return path


def console_errors(driver: Any) -> list[dict]:
    """Console messages of level SEVERE since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def network_requests(driver: Any, allowed: tuple[str, ...] = ()) -> list[str]:
    """Requests that went (or tried to go) over the network since the last call, except those under ``allowed``.

    Local schemes (file:, data:, blob:, about:, chrome: resources of the browser itself) are not network.
    """
    return [u for u in requests_made(driver)
            if u.split(":", 1)[0].lower() in NETWORK_SCHEMES and not u.startswith(allowed or ("\0",))]


def requests_made(driver: Any) -> list[str]:
    """URLs the browser requested (DevTools Network.requestWillBeSent) since the last call."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def wait_for(driver: Any, css: str, timeout: float = 30.0) -> Any:
    """The first element matching ``css``, once it is there (a click that submits a form returns before the new
    page has loaded, so a plain ``find_element`` races the navigation)."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(lambda d: (d.find_elements("css selector", css) or [None])[0])


def wait_for_plots(driver: Any, timeout: float = 30.0) -> dict[str, int]:
    """Wait until the page's render script ran; the number of plots, plotly roots and chain SVGs."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return document.body.hasAttribute('data-plots')"))
    return driver.execute_script("""return {
        expected: Number(document.body.getAttribute('data-plots')),
        divs: document.querySelectorAll('div.plot').length,
        plotly: document.querySelectorAll('div.plot.js-plotly-plot').length,
        with_svg: Array.from(document.querySelectorAll('div.plot.js-plotly-plot'))
                       .filter(d => d.querySelector('.main-svg')).length,
        with_data: Array.from(document.querySelectorAll('div.plot.js-plotly-plot'))
                       .filter(d => d.querySelector('.cartesianlayer .plot path, .barlayer path, .heatmaplayer image, '
                                                    + '.heatmaplayer path, .scatterlayer path')).length,
        chains: document.querySelectorAll('svg.chain').length,
        chain_nodes: document.querySelectorAll('svg.chain g.node').length,
        chain_edges: document.querySelectorAll('svg.chain g.edge').length}""")


def _hostile_run(root):
    run_id = "hostile-run"
    run_dir = root / run_id
    write_run_json(run_dir, {"run_id": run_id, "world_size": 1, "program": XSS})
    s = np.arange(60)
    with TelemetryWriter(run_dir, run_id) as w:
        w.add_columns(s, "convergence", "loss", "", 2.0 - s / 100)
        w.add_columns(s, "gradient", "grad_norm", XSS, np.full(60, 1e-3))
        w.add_columns(s, "gradient", "grad_norm", "fine.layer", np.full(60, 1.0))
    finding = Finding(id="GradientVanishing@hostile", symptom="GradientVanishing", dimension="gradient", entity=XSS,
                      onset_step=10, end_step=59, severity=0.9, evidence={"ratio": 1e-3}, detector=XSS)
    hyp = Hypothesis(cause="BadWeightInit", confidence=0.8, chain=("BadWeightInit", "GradientVanishing"),
                     findings=(finding.id,), explanation=f"because {XSS} & more", rank=1)
    return run_id, run_dir, finding, hyp


def hostile_store(root, store=None):
    """A store (new, or ``store``) holding a run whose label, entity, detector and explanation carry markup."""
    if store is None:
        store = open_store(None)
        load_knowledge(store)
    run_id, run_dir, finding, hyp = _hostile_run(root)
    replace_diagnosis(store, run_id, {"run_dir": str(run_dir), "world_size": 1, "label": XSS}, [finding], [],
                      [hyp])
    return store, run_id
