"""`cann-debug import` end to end in a subprocess (the real entry point), and import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys

CLI = [sys.executable, "-c",
       "import sys; from debugtune.cli import debug_main; sys.argv[0] = 'cann-debug'; debug_main()"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def test_cli_imports_and_reports(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0 / (s + 1), "grad_norm": 0.5}) + "\n" for s in range(5)))
    done = _run("import", str(log), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["format"] == "jsonl" and summary["rows"] == 10 and summary["steps"]["count"] == 5
    assert summary["metrics"] == ["grad_norm", "loss"]
    table = _run("import", "jsonl", str(log), "--run-dir", str(tmp_path / "run2"))
    assert table.returncode == 0 and "rows" in table.stdout and "grad_norm, loss" in table.stdout


def test_cli_bad_input_exit_2_and_nothing_written(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(" iteration        1/      10 | lm loss: 7.0E+00 |\n iteration        2/      10 | lm loss: x |\n")
    done = _run("import", str(log), "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2
    assert "train.log:2" in done.stderr and "lm loss" in done.stderr
    assert not (tmp_path / "run").exists()
    unknown = _run("import", "parquet", str(log), "--run-dir", str(tmp_path / "run"))
    assert unknown.returncode == 2 and "unknown format" in unknown.stderr


def test_importing_importers_does_not_import_torch():
    code = ("import sys, debugtune.engine.capture as c, debugtune.engine.telemetry as t; "
            "c.formats(); t.environment_snapshot(); assert 'torch' not in sys.modules, 'torch imported'")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60).returncode == 0
