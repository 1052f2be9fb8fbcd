"""docs/tune.md alone gives a user's training script a replay checkpoint and a trial: its `train.py` is written to a
folder outside the package and its commands run as printed — train, diagnose, `cann-tune auto --top-suggestion`
with no trial flag — and the tuning replays the user's checkpoint with the user's trial."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "tune.md"
SECTION = "## A trial for your own training script"
BIN = Path(sys.executable).parent


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end if end > 0 else None]


def _commands(section: str) -> list[list[str]]:
    console = re.search(r"```console\n(.*?)```", section, re.S).group(1)
    out = []
    for line in console.splitlines():
        if line.startswith("$ "):
            words = shlex.split(line[2:].split("#", 1)[0].replace("> /dev/null", ""))
            out.append(words)
    return out


@pytest.mark.slow
def test_the_documented_script_gets_a_checkpoint_and_its_own_trial(tmp_path):
    section = _section()
    script = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "DEBUGTUNE_HOME": str(tmp_path / "home"), "COLUMNS": "160"}
    outputs = []
    for words in _commands(section):
        exe = sys.executable if words[0] == "python" else str(BIN / words[0])
        if words[:2] == ["cann-tune", "auto"]:
            words = [*words, "--json"]
        res = subprocess.run([exe, *words[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"{words}: {res.stdout[-2000:]}{res.stderr[-2000:]}"
        outputs.append(res.stdout)
    ckpt = tmp_path / "runs" / "mine" / "replay-checkpoint.pt"
    assert ckpt.is_file() and (tmp_path / "runs" / "mine" / "telemetry").is_dir()
    tuning = json.loads(outputs[-1])
    assert [p["name"] for p in tuning["parameters"]] == ["lr_scale"]  # the remedy the user's trial can apply
    assert tuning["objectives"] == ["loss:min"] and 1 <= len(tuning["trials"]) <= 3
    assert all(t["status"] == "ok" and "loss" in t["values"] for t in tuning["trials"]), tuning["trials"]
    assert len(tuning["recorded"]) == len(tuning["trials"])
    assert {p["remedy"] for p in tuning["passed_over"]}.isdisjoint({tuning["remedy"]})
