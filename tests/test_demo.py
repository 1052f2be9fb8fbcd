"""The acceptance test of the diagnosis issue: `cann-debug demo` trains the seed scenario on CPU, diagnoses it,
names GateInitBias first with its chain, and says where the report is stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).with_name("cann-debug"))


@pytest.mark.slow
def test_demo_end_to_end(tmp_path):
    env = {**os.environ, "DEBUGTUNE_HOME": str(tmp_path), "OPENBLAS_NUM_THREADS": "1", "COLUMNS": "160"}
    res = subprocess.run([CLI, "demo"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    expected = ("ExpertImbalance", "RouterGradVanishing", "GateInitBias", "root cause: GateInitBias", "diagnosis.json")
    for word in expected:
        assert word in out, out
    report = json.loads((tmp_path / "runs" / "seed-scenario" / "diagnosis.json").read_text())
    top = report["hypotheses"][0]
    assert top["cause"] == "GateInitBias" and top["confidence"] >= report["report_threshold"]
    assert "RouterBiasedAtInit" in top["chain"]  # the probe's direct evidence of the biased gate (docs/probe.md)
    assert [c for c in top["chain"] if c != "RouterBiasedAtInit"][:3] == ["GateInitBias", "RouterGradVanishing",
                                                                          "ExpertImbalance"]
    found = {f["symptom"]: f for f in report["findings"]}
    assert found["RouterGradVanishing"]["evidence"]["router_grad_norm"] < 1e-4
    assert found["RouterGradVanishing"]["onset_step"] < found["RouterGradVanishing"]["end_step"] < 200
    assert found["ExpertImbalance"]["entity"].endswith("expert:0") and found["ExpertImbalance"]["onset_step"] < 10
    assert "expert 0 received" in top["explanation"]
