"""The HTML report of a diagnosed run: sections, cost, cause chain, tuning plots, downsampling, escaping and the
absence of any network reference (the browser checks are in test_report_browser.py)."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from debugtune.api import diagnose
from debugtune.cli.apps import debug_app
from debugtune.engine.report import build_report, gather, render
from debugtune.engine.report.chain import chain_svg
from debugtune.engine.report.downsample import downsample_grid, minmax_line
from debugtune.engine.report.page import plotly_js
from debugtune.engine.report.plots import MAX_COLS, MAX_POINTS, MAX_ROWS, rank_figures, tuning_figures
from debugtune.engine.telemetry import TelemetryWriter, write_run_json
from debugtune.kg import open_store
from debugtune.kg.assertions import add_experiments, replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.records import CorrelationEdge, Experiment, Finding, Hypothesis
from tests.report_fixtures import hostile_store, seed_run

LIMIT = 10_000_000


@pytest.fixture(scope="module")
def seed():
    """(store, run id, run dir) of the seed scenario, diagnosed into an in-memory store."""
    store = open_store(None)
    load_knowledge(store)
    run_dir = seed_run()
    report = diagnose(run_dir, store=store)
    yield store, report.run, run_dir
    store.close()


def network_references(page: str) -> list[str]:
    """Everything in the page that could make the browser fetch something, outside plotly's own bundle.

    The bundle (inlined verbatim from the installed plotly package) holds URL strings in code paths for
    map tiles and links that these figures never use; the browser test proves that no request is made.
    """
    bundle = plotly_js()
    assert page.count(bundle) == 1, "plotly.js must be inlined exactly once, unmodified"
    rest = page.replace(bundle, "")
    problems = []
    for pattern in (r"<script[^>]*\bsrc\s*=", r"<link\b", r"@import", r"url\(\s*['\"]?\s*(https?:)?//",
                    r"<(img|iframe|embed|object|video|audio|source|base)\b", r"\bsrcset\s*=", r"\bposter\s*="):
        problems += re.findall(pattern, rest, flags=re.I)
    outside_anchors = re.sub(r"<a\b[^>]*>.*?</a>", "", rest, flags=re.S | re.I)
    problems += re.findall(r"https?://[^\s\"'<>]*", outside_anchors)
    return problems


def test_cli_report_writes_one_self_contained_page(seed, tmp_path):
    _, _, run_dir = seed
    out = tmp_path / "seed.html"
    res = CliRunner().invoke(debug_app, ["report", str(run_dir), "--html", str(out), "--store", "memory", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    page = out.read_text(encoding="utf-8")
    assert summary["html"] == str(out) and summary["bytes"] == len(page.encode()) < LIMIT
    states = {k: v["state"] for k, v in summary["sections"].items()}
    for section in ("summary", "cost", "chain", "loss", "gradients", "experts", "ranks", "suggestions", "findings"):
        assert states[section] == "rendered", (section, summary["sections"][section])
    edges = json.loads((run_dir / "diagnosis.json").read_text())["correlations"]
    assert states["correlation"] == ("rendered" if edges else "absent")
    assert states["tuning"] == "absent" and "cann-tune auto" in summary["sections"]["tuning"]["note"]
    # 80 probed steps on CPU sample the host fewer times than the detectors need: not judged, so not drawn
    hardware = summary["sections"]["hardware"]
    assert hardware["state"] == "absent" and "at least 20" in hardware["note"] and "hardware.min_samples" in \
        hardware["note"]
    # a 80-step run of a few seconds: no saving projected against a detection by hand that takes hours
    assert summary["cost"]["projection_applies"] is False and "not shown: the run lasted" in page
    assert summary["plots"] == page.count('<div class="plot" id="plot-') >= 4
    assert network_references(page) == []
    top = summary["cost"]
    assert top["lost_card_hours"] == pytest.approx(
        (top["last_step"] - top["onset_step"] + 1) * top["step_seconds"] * top["cards"] / 3600)


def test_report_shows_the_diagnosis_graph_and_knowledge(seed):
    store, run_id, run_dir = seed
    data = gather(store, run_id)
    assert data.run_dir == run_dir.resolve() and data.hypotheses and data.suggestions
    report = render(data)
    page = report.html
    top = data.hypotheses[0]
    assert f"debugtune report: {run_id}" in page and top.cause in page
    assert report.chains == min(3, len(data.hypotheses)) and page.count('<svg class="chain"') == report.chains
    for s in data.suggestions[:3]:
        assert s.remedy in page
    for f in data.findings:
        assert f.id in page
    # the figure data embed the expert map with every expert of the router
    figures = json.loads(re.search(r'id="dt-figures">(.*?)</script>', page, re.S).group(1))
    heat = [t for f in figures.values() for t in f["data"] if t["type"] == "heatmap"]
    assert any(any("expert:1" in y for y in t["y"]) for t in heat)


def test_chain_edges_carry_the_knowledge_base_strengths(seed):
    store, run_id, _ = seed
    data = gather(store, run_id)
    top = data.hypotheses[0]
    svg = chain_svg(top, {f.symptom: f.onset_step for f in data.findings}, data.links, data.label, key="t")
    linked = [(a, b) for i, b in enumerate(top.chain) for a in top.chain[:i] if (a, b) in data.links]
    assert linked, "the seed chain has knowledge-base links"
    for a, b in linked:
        assert f">{data.links[(a, b)]:.2f}</text>" in svg
    assert svg.count('class="edge"') >= len(top.chain) - 1
    # a symptom the knowledge base does not link to anything earlier gets a dashed "?" edge from the cause
    odd = Hypothesis(cause="GateInitBias", confidence=0.5, chain=("GateInitBias", "ThermalThrottling"),
                     findings=(), explanation="")
    lonely = chain_svg(odd, {}, {}, lambda n: n, key="u")
    assert 'stroke-dasharray="5 4"' in lonely and ">?</text>" in lonely and "expected, not seen" in lonely


def test_tuning_plots_objectives_and_the_pareto_front(seed):
    store, run_id, _ = seed
    values = [(2.0, 0.9), (1.5, 1.2), (1.8, 0.7), (2.5, 0.6), (1.6, 1.5)]
    exps = [Experiment(id=f"tune-t-{i + 1:03d}", remedy="RouterInitRescale", parameters={"init_std": 0.01 * (i + 1)},
                       objectives={"loss": a, "cv": b}, cost=0.1, seed=i) for i, (a, b) in enumerate(values)]
    exps.append(Experiment(id="tune-t-006", remedy="RouterInitRescale", parameters={"init_std": 0.5}, objectives={},
                           cost=0.1, seed=6, status="failed"))
    other = [Experiment(id=f"tune-u-{i + 1:03d}", remedy="EnableBiasBalancing", parameters={"bias_update_rate": r},
                        objectives={"loss": 2.0 - r}, cost=0.1, seed=i) for i, r in enumerate((0.1, 0.3))]
    add_experiments(store, run_id, [*exps, *other])
    data = gather(store, run_id)
    figs, note = tuning_figures(data)
    # per remedy: one figure per objective (cv, loss) and the Pareto front; the other remedy's session apart
    titles = [f.layout["title"]["text"] for f in figs]
    assert note == "" and len(figs) == 4, titles
    assert [t.split(":")[0] for t in titles] == [data.label("RouterInitRescale")] * 3 + [
        data.label("EnableBiasBalancing")]
    assert list(figs[3].data[0]["y"]) == [1.9, 1.7] and list(figs[3].data[0]["x"]) == [1, 2]
    front = {(round(x, 6), round(y, 6)) for x, y in zip(figs[2].data[1]["x"], figs[2].data[1]["y"], strict=True)}
    # brute force: (cv, loss) minimised; a point is on the front when no other is at least as good in both
    expected = {(b, a) for a, b in values
                if not any(c <= a and d <= b and (c, d) != (a, b) for c, d in values)}
    assert front == {(round(a, 6), round(b, 6)) for a, b in expected}
    best = figs[0].data[1]["y"]  # best cv so far (objectives sorted: cv, loss)
    assert list(best) == list(np.minimum.accumulate([b for _, b in values]))
    flipped = tuning_figures(gather(store, run_id, maximize=["cv"]))[0][2].data[1]
    assert max(flipped["x"]) == max(b for _, b in values)
    page = render(data).html
    assert "tune-t-006" in page and "failed" in page


def test_correlation_graph_and_one_step_bars(tmp_path):
    """The stored correlation edges are drawn (both findings, coefficient and lag); a one-step profile of four
    ranks is drawn as bars per rank, the slow rank's bar marked, not as a one-column heat map."""
    store = open_store(None)
    load_knowledge(store)
    run_dir = tmp_path / "one-step"
    write_run_json(run_dir, {"run_id": "one-step", "world_size": 4})
    for rank, ms in enumerate((100.0, 101.0, 180.0, 99.0)):
        with TelemetryWriter(run_dir, "one-step", rank=rank) as w:
            w.add(7, "communication", "step_time_ms", "", ms)
    slow = Finding(id="SlowRank@rank:2", symptom="SlowRank", dimension="communication", entity="rank:2",
                   onset_step=7, end_step=7, severity=0.8, evidence={"ratio": 1.8}, detector="communication.slow")
    spike = Finding(id="LossSpike@run", symptom="LossSpike", dimension="convergence", entity="", onset_step=5,
                    end_step=9, severity=0.6, evidence={"z": 9.0}, detector="convergence.spike")
    replace_diagnosis(store, "one-step", {"run_dir": str(run_dir), "world_size": 4}, [slow, spike],
                      [CorrelationEdge(a=slow.id, b=spike.id, lag_steps=2, correlation=0.87)], [])
    data = gather(store, "one-step")
    assert data.correlations == [CorrelationEdge(a=slow.id, b=spike.id, lag_steps=2, correlation=0.87)]
    report = render(data)
    assert report.sections["correlation"]["state"] == "rendered"
    section = report.html.split('<section id="correlation"')[1].split("</section>")[0]
    assert section.count('<g class="node') == 2 and section.count('<g class="edge"') == 1
    assert "r +0.87, lag 2 steps" in section and "rank:2" in section
    figs, _ = rank_figures(data)
    [bars] = figs
    assert bars.data[0]["type"] == "bar" and list(bars.data[0]["x"]) == [100.0, 101.0, 180.0, 99.0]
    assert bars.data[0]["marker"]["color"][2] != bars.data[0]["marker"]["color"][0]
    assert "at step 7" in bars.layout["title"]["text"] and "Only one step" in bars.caption


def _loss_only_run(root, run_id: str, steps: int = 120):
    run_dir = root / run_id
    write_run_json(run_dir, {"run_id": run_id, "world_size": 1, "framework": "synthetic"})
    s = np.arange(steps)
    loss = 2.0 + 0.3 * np.cos(s / 3.0)
    loss[90] = np.nan
    with TelemetryWriter(run_dir, run_id) as w:
        w.add_columns(s, "convergence", "loss", "", loss)
    return run_dir


def test_sections_without_data_say_so(tmp_path):
    store = open_store(None)
    run_dir = _loss_only_run(tmp_path, "loss-only")
    diagnose(run_dir, store=store)
    report = build_report(store, "loss-only")
    states = {k: v["state"] for k, v in report.sections.items()}
    assert states["loss"] == "rendered"
    for section in ("gradients", "experts", "ranks", "hardware", "tuning"):
        assert states[section] == "absent" and report.sections[section]["note"], section
    assert "grad_norm" in report.sections["gradients"]["note"]
    assert "expert_tokens" in report.sections["experts"]["note"]
    assert report.cost is None or report.sections["cost"]["state"] == "rendered"
    # the run directory gone: the graph still gives a report, the telemetry sections say why they are empty
    shutil.rmtree(run_dir)
    gone = build_report(store, "loss-only")
    assert gone.sections["loss"]["state"] == "absent" and "not on this machine" in gone.sections["loss"]["note"]
    assert network_references(gone.html) == []
    store.close()


def test_downsampling_keeps_one_step_spikes_and_a_single_slow_rank():
    rng = np.random.default_rng(0)
    z = 100 + rng.standard_normal((1024, 4000))
    z[778, 3213] = 500.0          # one slow step of one rank
    z[10, 3900] = -50.0           # one dip
    grid = downsample_grid(z, 160, 400)
    assert grid.z.shape == (160, 400)
    assert grid.z.max() == 500.0 and grid.z.min() == -50.0
    r, c = np.unravel_index(np.argmax(grid.z), grid.z.shape)
    assert grid.row_span(r)[0] <= 778 <= grid.row_span(r)[1] and grid.col_span(c)[0] <= 3213 <= grid.col_span(c)[1]
    decimated = z[::7, ::10]
    assert decimated.max() < 500.0, "decimation would lose the spike the downsampling keeps"
    x = np.arange(100_000)
    y = np.sin(x / 500.0)
    y[31_337] = 40.0
    y[77_000] = np.nan
    xs, ys = minmax_line(x, y, 2000)
    assert len(xs) <= 2000 and np.all(np.diff(xs) > 0)
    assert 40.0 in ys and np.isnan(ys).any() and ys[np.isfinite(ys)].min() == pytest.approx(-1.0, abs=1e-4)


def test_large_runs_stay_under_the_size_budget(tmp_path):
    from bench.report_scale import write_run

    store = open_store(None)
    load_knowledge(store)
    sizes = {}
    for ranks, steps in ((4, 300), (200, 1200)):
        run_id = f"scale-{ranks}"
        planted = write_run(tmp_path / run_id, ranks=ranks, steps=steps, run_id=run_id, layers=24, experts=8,
                            hw_every=100)
        slow = Finding(id="SlowRank@rank", symptom="SlowRank", dimension="communication",
                       entity=f"rank:{planted['slow_rank']}", onset_step=planted["slow_onset"], end_step=steps - 1,
                       severity=0.8)
        replace_diagnosis(store, run_id, {"run_dir": str(tmp_path / run_id), "world_size": ranks}, [slow])
        report = build_report(store, run_id)
        sizes[ranks] = len(report.html.encode()) - len(plotly_js().encode())
        assert report.sections["ranks"]["state"] == "rendered"
        assert "slow rank @ rank:" + str(planted["slow_rank"]) in report.html
        figures = json.loads(re.search(r'id="dt-figures">(.*?)</script>', report.html, re.S).group(1))
        for trace in (t for f in figures.values() for t in f["data"]):
            if trace["type"] == "heatmap":
                assert len(trace["z"]) <= MAX_ROWS and all(len(row) <= MAX_COLS for row in trace["z"])
                if ranks > MAX_ROWS and trace["y"][0].startswith("rank"):   # rows bucketed: "ranks 3–4"
                    assert any(re.fullmatch(r"ranks \d+–\d+", y) for y in trace["y"])
            else:
                assert len(trace["x"]) <= MAX_POINTS
    # 200 ranks x 1,200 steps hold 480,000 step and communication times; the page keeps a bounded sample of them
    assert sizes[200] < 1_500_000, sizes
    store.close()


def test_text_from_the_run_is_escaped(tmp_path):
    store, run_id = hostile_store(tmp_path)
    page = build_report(store, run_id).html
    assert page.count("<script>alert(1)</script>") == 0
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;q&#x27;" in page          # HTML text and attributes
    figures = re.search(r'id="dt-figures">(.*?)</script>', page, re.S).group(1)
    assert "<" not in figures and "\\u003c" in figures                           # JSON inside <script>
    labels = json.loads(figures)
    heat = next(t for f in labels.values() for t in f["data"] if t["type"] == "heatmap")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\"q'" in heat["y"]               # plotly shows it literally
    assert network_references(page) == []
    store.close()
