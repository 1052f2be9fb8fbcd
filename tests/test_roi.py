"""The cost of a problem and the ROI calculator (`cann-tune roi`): formulas against hand computation, constants
from the knowledge base with their sources, overrides, and clean errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import tune_app
from debugtune.engine.report import CostConstants, ReportError, problem_cost, roi
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge, thresholds

DOCS = Path(__file__).resolve().parent.parent / "docs" / "roi.md"


@pytest.fixture(scope="module")
def constants():
    store = open_store(None)
    load_knowledge(store)
    yield CostConstants.from_store(store)
    store.close()


def test_constants_come_from_the_knowledge_base_with_sources(constants):
    store = open_store(None)
    load_knowledge(store)
    keys = {k for k in thresholds(store) if k.startswith("cost.")}
    store.close()
    assert keys == {"cost." + n for n in CostConstants.names()}
    assert constants.interruptions_per_card_day == pytest.approx(419 / (54 * 16384), rel=1e-3)  # Llama 3
    assert constants.checkpoint_bytes_per_param == pytest.approx(2.3e12 / 176e9, rel=1e-3)       # BLOOM
    for name in CostConstants.names():
        assert constants.sources[name] and all(s.startswith("https://") for s in constants.sources[name]), name
    documented = DOCS.read_text(encoding="utf-8")
    for key in keys:
        assert f"`{key}`" in documented, f"{key} is not documented in docs/roi.md"


def test_roi_matches_the_documented_formula(constants):
    c = constants
    out = roi(70e9, 1024, c).as_dict()
    incidents = c.interruptions_per_card_day * 1024
    restore = 70e9 * c.checkpoint_bytes_per_param / c.restore_bytes_per_second / 3600
    manual = c.manual_detect_hours + c.checkpoint_interval_hours / 2 + restore
    tool = c.tool_detect_hours + c.checkpoint_interval_hours / 2 + restore
    saving = incidents * (c.manual_detect_hours - c.tool_detect_hours) * 1024
    overhead = c.tool_overhead_fraction * 24 * 1024
    assert out["per_day"]["incidents"] == pytest.approx(incidents)
    assert out["per_incident_hours"]["manual"] == pytest.approx(manual)
    assert out["per_incident_hours"]["tool"] == pytest.approx(tool)
    assert out["per_day"]["card_hours_lost_manual"] == pytest.approx(incidents * manual * 1024)
    assert out["per_day"]["saving_card_hours"] == pytest.approx(saving)
    assert out["per_day"]["net_cost"] == pytest.approx((saving - overhead) * c.card_hour_price)
    assert out["per_month"]["net_card_hours"] == pytest.approx(30 * (saving - overhead))
    assert out["roi"] == pytest.approx((saving - overhead) / overhead)
    # at the break-even detection time the saving pays exactly for the overhead
    even = roi(70e9, 1024, c.override(manual_detect_hours=out["break_even_hours_to_detect"]))
    assert even.net_card_hours_per_day == pytest.approx(0.0, abs=1e-6)
    # a small job with fast manual detection does not pay for the telemetry
    assert roi(1e9, 8, c.override(manual_detect_hours=0.5)).roi < 0


def test_problem_cost_of_a_run(constants):
    cost = problem_cost(cards=64, step_seconds=2.0, onset_step=1000, detection_step=1030, last_step=4599,
                        constants=constants.override(card_hour_price=3.0))
    assert cost.lost_card_hours == pytest.approx(3600 * 2.0 * 64 / 3600)
    assert cost.detect_card_hours == pytest.approx(30 * 2.0 * 64 / 3600)
    assert cost.saved_card_hours == pytest.approx(cost.lost_card_hours - cost.detect_card_hours)
    assert cost.as_dict()["saved_cost"] == pytest.approx(cost.saved_card_hours * 3.0)
    assert cost.projected_saving_card_hours == pytest.approx((constants.manual_detect_hours - 60 / 3600) * 64)
    undetected = problem_cost(cards=1, step_seconds=1.0, onset_step=5, detection_step=None, last_step=9,
                              constants=constants)
    assert undetected.detection_step == 5 and any("no detection step" in n for n in undetected.notes)
    with pytest.raises(ReportError, match="step time"):
        problem_cost(cards=1, step_seconds=0.0, onset_step=0, detection_step=0, last_step=1, constants=constants)


def test_cli_roi_json_overrides_and_errors(constants):
    runner = CliRunner()
    res = runner.invoke(tune_app, ["roi", "--params", "7e9", "--cards", "8", "--card-hour-cost", "3",
                                   "--hours-to-detect", "2", "--store", "memory", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["inputs"]["card_hour_price"] == 3.0 and out["sources"]["card_hour_price"] == ["user"]
    assert out["inputs"]["manual_detect_hours"] == 2.0 and out["sources"]["manual_detect_hours"] == ["user"]
    assert out["sources"]["interruptions_per_card_day"] == list(constants.sources["interruptions_per_card_day"])
    table = runner.invoke(tune_app, ["roi", "--params", "7e9", "--cards", "8", "--store", "memory"])
    assert table.exit_code == 0 and "net saving" in table.stdout and "ROI" in table.stdout
    assert runner.invoke(tune_app, ["roi", "--params", "7e9", "--cards", "0", "--store", "memory"]).exit_code == 2
    bad = runner.invoke(tune_app, ["roi", "--params", "nan", "--cards", "8", "--store", "memory"])
    # a DebugtuneError: the entry point prints `error: <message>` and exits with 2 (debugtune.cli._run)
    assert isinstance(bad.exception, ReportError) and "params must be a finite number" in str(bad.exception)
    assert not math.isnan(out["roi"])
