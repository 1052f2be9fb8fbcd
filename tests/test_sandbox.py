"""The sandbox: runs only on request, in a temporary folder with a fixed environment and a timeout; judges the
claim and the tolerance (the MoE demo's own sandbox run is in tests/test_contribute_demo.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import tune_app
from debugtune.engine.contribute import ContributeError, run_sandbox
from debugtune.engine.contribute.sandbox import evaluate
from debugtune.kg.packages import import_package
from tests.test_packages import fresh_store, make_package, repack

EXPECTED = {"claim": "baseline imbalanced, remedy balanced", "checks": [
    {"path": "baseline.max_vio", "op": ">=", "value": 0.5}, {"path": "remedy.max_vio", "op": "<", "value": 0.5}],
    "result": {"baseline": {"max_vio": 7.0}, "remedy": {"max_vio": 0.3}}, "tolerance": {"abs": 0.05, "rel": 0.1}}
PROBE_SCRIPT = """import json, os, sys
from pathlib import Path
cfg = json.loads(Path("config.json").read_text())
Path(cfg["marker"]).write_text(json.dumps({"cwd": os.getcwd(), "seed": os.environ.get("PYTHONHASHSEED"),
    "home": os.environ.get("HOME"), "files": sorted(os.listdir("."))}))
if cfg.get("sleep"):
    import time
    time.sleep(cfg["sleep"])
if cfg.get("fail"):
    sys.exit("deliberate failure: " + cfg["fail"])
print("progress line")
print(json.dumps({"baseline": {"max_vio": 7.0}, "remedy": {"max_vio": cfg.get("remedy", 0.31)}}))
"""


@pytest.fixture(scope="module")
def base_package(tmp_path_factory) -> Path:
    return make_package(tmp_path_factory.mktemp("sbx") / "base.zip")


def _with_sandbox(base: Path, tmp_path: Path, config: dict, expected: dict = EXPECTED) -> Path:
    return repack(base, tmp_path / "sandboxed.zip", {
        "sandbox/config.json": json.dumps(config).encode(), "sandbox/validate.py": PROBE_SCRIPT.encode(),
        "sandbox/expected.json": json.dumps(expected).encode()})


def test_evaluate_checks_the_claim_and_the_tolerance() -> None:
    good = evaluate(EXPECTED, {"baseline": {"max_vio": 7.0}, "remedy": {"max_vio": 0.32}})
    assert good.held and good.claim_held and good.reproduced
    drifted = evaluate(EXPECTED, {"baseline": {"max_vio": 7.0}, "remedy": {"max_vio": 0.45}})
    assert drifted.claim_held and not drifted.reproduced and not drifted.held
    broken = evaluate(EXPECTED, {"baseline": {"max_vio": 7.0}, "remedy": {"max_vio": 0.6}})
    assert not broken.claim_held and [c["ok"] for c in broken.checks] == [True, False]
    missing = evaluate(EXPECTED, {"baseline": {"max_vio": 7.0}})
    assert not missing.claim_held and not missing.reproduced


def test_import_never_runs_the_script_and_sandbox_run_does_in_a_temporary_folder(base_package: Path,
                                                                                 tmp_path: Path) -> None:
    marker = tmp_path / "ran.json"
    package = _with_sandbox(base_package, tmp_path, {"marker": str(marker)})
    result = import_package(fresh_store(), package)
    assert result.has_sandbox and not marker.exists()
    verdict = run_sandbox(package, timeout_s=60)
    assert verdict.held and marker.exists()
    seen = json.loads(marker.read_text())
    assert seen["seed"] == "0" and seen["home"] == seen["cwd"]
    assert Path(seen["cwd"]) != package.parent and not Path(seen["cwd"]).exists()
    assert seen["files"] == ["config.json", "expected.json", "validate.py"]


def test_a_script_that_overruns_is_killed(base_package: Path, tmp_path: Path) -> None:
    marker = tmp_path / "slow.json"
    package = _with_sandbox(base_package, tmp_path, {"marker": str(marker), "sleep": 120})
    with pytest.raises(ContributeError, match="did not finish within 3 s"):
        run_sandbox(package, timeout_s=3)
    assert marker.exists()


def test_failures_are_reported_with_the_scripts_message(base_package: Path, tmp_path: Path) -> None:
    package = _with_sandbox(base_package, tmp_path, {"marker": str(tmp_path / "m"), "fail": "no torch here"})
    with pytest.raises(ContributeError, match="exit code 1.*no torch here"):
        run_sandbox(package, timeout_s=60)
    with pytest.raises(ContributeError, match="has no sandbox"):
        run_sandbox(base_package)
    broken = {**EXPECTED, "checks": [{"path": "remedy.max_vio", "op": "~", "value": 1}]}
    with pytest.raises(ContributeError, match="well-formed checks"):
        run_sandbox(_with_sandbox(base_package, tmp_path, {"marker": str(tmp_path / "m")}, broken))


def test_cli_reports_a_claim_that_does_not_hold(base_package: Path, tmp_path: Path) -> None:
    package = _with_sandbox(base_package, tmp_path, {"marker": str(tmp_path / "m"), "remedy": 0.9})
    result = CliRunner().invoke(tune_app, ["sandbox", "run", str(package), "--timeout", "60"])
    assert result.exit_code == 1 and "did not hold" in result.output

