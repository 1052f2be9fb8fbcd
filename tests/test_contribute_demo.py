"""The round trip on the MoE seed scenario: a biased-gate run is trained with the probe, diagnosed, contributed
with a sandbox, imported into a fresh store, found by similarity for a new run of the same fault, and its
remedy ranks at least as high after success feedback; `cann-tune sandbox run` on its package reproduces the
imbalance without the remedy and the balance with it."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from debugtune.api import diagnose, query
from debugtune.cli.apps import tune_app
from debugtune.engine.contribute import ContributeOptions, ContributeResult, contribute, record_feedback
from debugtune.engine.suggest import remedy_details, similar_cases, suggest
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.packages import import_package
from debugtune.scenarios.moe import MoEConfig, train_moe

STEPS = 60
FAULT = {"gate_bias": 16.0, "gate_bias_experts": 1}
SANDBOX = {"fault": FAULT, "remedy": {"gate_bias": 0.0, "aux_loss_coeff": 0.05}, "steps": STEPS, "seed": 0}


@dataclass(frozen=True)
class Demo:
    root: Path
    run_id: str
    result: ContributeResult

    @property
    def package(self) -> Path:
        return self.result.path


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    """The seed scenario's faulty run, diagnosed and contributed with its sandbox (the cause is confirmed)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("moe-demo")
    train_moe(MoEConfig(**FAULT, steps=STEPS, seed=0), root / "run-a", probe=True)
    store = open_store(None)
    report = diagnose(root / "run-a", store=store, save=False)
    result = contribute(store, report.run, root / "moe-case.zip", run_dir=root / "run-a", options=ContributeOptions(
        cause="GateInitBias", remedy="RouterInitRescale", attribution="debugtune tests", sandbox=SANDBOX))
    return Demo(root, report.run, result)


def test_the_demo_package_holds_a_scrubbed_case_and_a_sandbox(demo: Demo) -> None:
    r = demo.result
    assert set(r.files) == {"ro-crate-metadata.json", "case.ttl", "environment.json", "privacy-report.json",
                            "sandbox/config.json", "sandbox/validate.py", "sandbox/expected.json"}
    assert r.sandbox is not None and r.sandbox.claim_held
    assert {s["symptom"] for s in r.signature} >= {"ExpertImbalance"}
    with zipfile.ZipFile(demo.package) as zf:
        assert not any(demo.run_id.encode() in zf.read(n) for n in zf.namelist())


def test_cli_contributes_a_run_directory_diagnosing_it_first(demo: Demo, tmp_path: Path) -> None:
    out = tmp_path / "cli-case.zip"
    made = CliRunner().invoke(tune_app, ["contribute", str(demo.root / "run-a"), "--out", str(out), "--store",
                                         "memory", "--cause", "GateInitBias", "--remedy", "EnableBiasBalancing",
                                         "--json"])
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["remedy"] == "EnableBiasBalancing"
    store = open_store(None)
    load_knowledge(store)
    assert import_package(store, out).cases


def test_round_trip_similar_case_and_feedback(demo: Demo, tmp_path: Path) -> None:
    store = open_store(None)
    load_knowledge(store)
    imported = import_package(store, demo.package)
    [case] = imported.cases
    train_moe(MoEConfig(**FAULT, steps=STEPS, seed=1), tmp_path / "run-b", probe=True)
    run_b = diagnose(tmp_path / "run-b", store=store, save=False).run

    found = [c for c in similar_cases(store, run_b, threshold=0.85) if c.case == case]
    assert found and found[0].score >= 0.85 and found[0].graph == imported.graph
    rows = query(f"cases similar to run {run_b} threshold 0.85", store=store).rows
    assert any(row["case"] == case and row["score"] >= 0.85 for row in rows)

    before = [s.remedy for s in suggest(store, run_b)]
    rate = remedy_details(store, "RouterInitRescale").success_rate
    record_feedback(store, demo.package, "success")
    after = [s.remedy for s in suggest(store, run_b)]
    assert "RouterInitRescale" in before
    assert after.index("RouterInitRescale") <= before.index("RouterInitRescale")
    assert remedy_details(store, "RouterInitRescale").success_rate > rate


def test_the_demo_sandbox_reproduces_imbalance_and_balance(demo: Demo) -> None:
    result = CliRunner().invoke(tune_app, ["sandbox", "run", str(demo.package), "--json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.output)
    assert verdict["held"] and verdict["claim_held"] and verdict["reproduced"]
    assert verdict["measured"]["baseline"]["max_vio"] >= 0.5 > verdict["measured"]["remedy"]["max_vio"]
