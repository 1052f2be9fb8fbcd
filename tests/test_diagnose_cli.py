"""`cann-debug diagnose` / `root-cause`: the --json schema, the saved report, the store, and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import debug_app
from debugtune.kg.errors import DebugtuneError
from tests.diagnose_helpers import healthy_gradients, healthy_loss, write_run

CLI = str(Path(sys.executable).with_name("cann-debug"))
FINDING_KEYS = {"id", "symptom", "dimension", "entity", "onset_step", "end_step", "severity", "evidence"}
HYPOTHESIS_KEYS = {"cause", "confidence", "chain", "findings", "explanation"}


def moe_run(path: Path, n: int = 200) -> Path:
    rng = np.random.default_rng(3)
    rows = healthy_gradients(n, rng, layers=("embed", "blocks.0.attn", "head"))
    rows.append(("convergence", "loss", "", healthy_loss(n, rng, start=3.4, floor=1.0)))
    hot = np.where(np.arange(n) < 120, 480.0, 100.0)
    for i in range(8):
        rows.append(("convergence", "expert_tokens", f"blocks.0.moe.router/expert:{i}",
                     hot if i == 0 else (512 - hot) / 7))
    rows.append(("gradient", "router_grad_norm", "blocks.0.moe.router",
                 np.where(np.arange(n) < 90, 1e-7, 0.05) * (1 + 0.1 * rng.random(n))))
    return write_run(path, {0: rows}, run_id="cli-moe")


def test_diagnose_json_schema_and_saved_report(tmp_path):
    run_dir = moe_run(tmp_path / "moe")
    res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--json", "--store", "memory"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["run"] == "cli-moe" and report["schema_version"] == 1
    assert report["findings"] and all(FINDING_KEYS <= set(f) for f in report["findings"])
    assert report["hypotheses"] and all(HYPOTHESIS_KEYS <= set(h) for h in report["hypotheses"])
    top = report["hypotheses"][0]
    # without the router's weights at attach (RouterBiasedAtInit), a router with no gradient and one hot expert
    # fit a biased gate and a top-1 normalisation that cuts the router's gradient about equally
    assert top["cause"] in {"GateInitBias", "TopKNormalizationVanishing"} and top["chain"][0] == top["cause"]
    assert "GateInitBias" in [h["cause"] for h in report["hypotheses"][:2]]
    ids = {f["id"] for f in report["findings"]}
    assert set(top["findings"]) <= ids
    assert {"ExpertImbalance", "RouterGradVanishing"} <= {f["symptom"] for f in report["findings"]}
    assert all(isinstance(v, float) for v in report["timing_s"].values()) and "detect.gradient" in report["timing_s"]
    assert report["coverage"]["communication"] == "not diagnosed"
    saved = json.loads((run_dir / "diagnosis.json").read_text())
    assert saved["findings"] == report["findings"] and saved["hypotheses"] == report["hypotheses"]


def test_a_run_that_fits_closely_prints_its_sign_of_health(tmp_path):
    """A loss that ends at a two-hundredth of its start: text and JSON name the sign, the findings do not, and a
    root-cause query of the stored run still calls it healthy."""
    rng = np.random.default_rng(5)
    rows = healthy_gradients(200, rng)
    rows.append(("convergence", "loss", "", healthy_loss(200, rng, floor=2.3 / 200, noise=0.001)))
    run_dir = write_run(tmp_path / "fit", {0: rows}, run_id="cli-fit")
    store = str(tmp_path / "store")
    text = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--store", store, "--wide"])
    assert text.exit_code == 0, text.output
    assert "sign of health: the loss ended at" in text.output and "the run looks healthy" in text.output
    report = json.loads((run_dir / "diagnosis.json").read_text())
    assert [s["symptom"] for s in report["signs"]] == ["LossFitsClosely"] and report["findings"] == []
    stored = CliRunner().invoke(debug_app, ["root-cause", "cli-fit", "--store", store, "--json"])
    assert stored.exit_code == 0, stored.output
    assert json.loads(stored.stdout)["status"] == "healthy"


def test_dimension_flags_limit_what_is_diagnosed(tmp_path):
    run_dir = moe_run(tmp_path / "moe")
    res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--gradient", "--json", "--store", "memory"])
    report = json.loads(res.stdout)
    assert {f["dimension"] for f in report["findings"]} == {"gradient"}
    assert report["coverage"] == {"gradient": "diagnosed", "convergence": "not requested",
                                  "communication": "not requested", "hardware": "not requested"}


def test_root_cause_from_the_stored_diagnosis(tmp_path):
    run_dir = moe_run(tmp_path / "moe")
    store = str(tmp_path / "store")
    runner = CliRunner()
    diagnosed = runner.invoke(debug_app, ["diagnose", str(run_dir), "--store", store, "--json"])
    assert diagnosed.exit_code == 0, diagnosed.output
    first = json.loads(diagnosed.stdout)["hypotheses"][0]["cause"]
    res = runner.invoke(debug_app, ["root-cause", "cli-moe", "--store", store, "--json", "--top", "1"])
    assert res.exit_code == 0, res.output
    body = json.loads(res.stdout)
    assert [h["cause"] for h in body["hypotheses"]] == [first]
    assert set(body["hypotheses"][0]["findings"]) == {f["id"] for f in body["findings"]}
    res = runner.invoke(debug_app, ["root-cause", "cli-moe", "--store", store, "--explain"])
    assert "GateInitBias" in res.stdout and "RouterGradVanishing@" in res.stdout


def test_healthy_run_says_so(tmp_path):
    rng = np.random.default_rng(1)
    rows = healthy_gradients(200, rng) + [("convergence", "loss", "", healthy_loss(200, rng))]
    run_dir = write_run(tmp_path / "ok", {0: rows})
    res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--store", "memory"])
    assert res.exit_code == 0
    assert "looks healthy" in res.stdout
    report = json.loads((run_dir / "diagnosis.json").read_text())
    assert report["status"] == "healthy" and report["hypotheses"] == []


@pytest.mark.parametrize("case, expected", [
    ("missing", "neither an existing directory nor a run id"),
    ("empty", "is empty"),
    ("few", "5 steps of grad_norm recorded, at least 20"),
    ("corrupt", "part-000000.parquet"),
    ("nocomm", "no telemetry rows for communication"),
])
def test_bad_input_gets_a_clear_message(tmp_path, case, expected):
    target = tmp_path / case
    args = ["diagnose", str(target), "--store", "memory"]
    if case == "empty":
        target.mkdir()
    elif case == "few":
        write_run(target, {0: [("convergence", "loss", "", np.ones(5)), ("gradient", "grad_norm", "a", np.ones(5))]})
    elif case == "corrupt":
        write_run(target, {0: [("convergence", "loss", "", np.ones(50))]})
        part = next((target / "telemetry").rglob("*.parquet"))
        part.write_bytes(part.read_bytes()[:40])
    elif case == "nocomm":
        write_run(target, {0: [("convergence", "loss", "", np.linspace(2, 1, 50))]})
        args.append("--comm")
    res = CliRunner().invoke(debug_app, args)
    assert isinstance(res.exception, DebugtuneError), res.output
    assert expected in str(res.exception) and "nothing diagnosed" in str(res.exception)
    assert not (target / "diagnosis.json").exists()


def test_the_command_line_prints_errors_without_a_traceback(tmp_path):
    res = subprocess.run([CLI, "diagnose", str(tmp_path / "nowhere"), "--store", "memory"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "error: nothing diagnosed" in res.stderr and "Traceback" not in res.stderr + res.stdout


def test_a_raw_profiler_folder_is_imported_on_the_fly(tmp_path, fixtures_dir):
    raw = tmp_path / "cluster"
    shutil.copytree(fixtures_dir / "ascend-cluster", raw)
    res = CliRunner().invoke(debug_app, ["diagnose", str(raw), "--comm", "--json", "--store", "memory"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    # msprof-analyze's cluster summary: rank 1 waits least in communication and idles most, the others wait on it.
    assert ("SlowRank", "rank:1") in {(f["symptom"], f["entity"]) for f in report["findings"]}
    assert report["coverage"]["communication"] == "diagnosed"
    assert (raw / ".debugtune-run" / "diagnosis.json").is_file()


def test_out_of_core_engine_gives_the_same_report_and_follow_prints_a_line_per_pass(tmp_path):
    """--engine duckdb: the report --engine memory gives; --follow --json: one JSON object per pass (JSON Lines),
    the second pass finding nothing new; an unknown engine is one clear error."""
    run_dir = moe_run(tmp_path / "moe")
    out = {}
    for engine in ("memory", "duckdb"):
        res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--json", "--store", "memory",
                                             "--engine", engine])
        assert res.exit_code == 0, res.output
        body = json.loads(res.output)
        out[engine] = [(f["symptom"], f["entity"], f["onset_step"]) for f in body["findings"]]
    assert out["memory"] == out["duckdb"] and out["memory"]
    res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--follow", "--passes", "2", "--interval", "0",
                                         "--json", "--store", "memory"])
    assert res.exit_code == 0, res.output
    first, second = (json.loads(line) for line in res.output.strip().splitlines())
    assert first["pass"] == 1 and first["report"]["findings"] and first["new_rows"] > 0
    assert second["pass"] == 2 and second["report"] is None and second["new_rows"] == 0
    res = CliRunner().invoke(debug_app, ["diagnose", str(run_dir), "--engine", "spark", "--store", "memory"])
    assert res.exit_code == 2 and "unknown engine" in res.output
