"""Trials: command templates (no shell, JSON on the last line), callables, failures, timeouts, executors."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import pytest

from debugtune.engine.tune import CallableTrial, CommandTrial, TrialRequest, TrialSpecError, load_callable
from debugtune.engine.tune.trials import InlineExecutor, ProcessExecutor, evaluate, make_executor

PY = sys.executable


def _req(i=0, **params):
    return TrialRequest(index=i, params=params, seed=7)


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_a_command_template_runs_without_a_shell_and_reads_the_last_json_line(tmp_path):
    script = _script(tmp_path, """
        import json, sys
        print("epoch 1 ...")
        print(json.dumps({"argv": sys.argv[1:], "loss": float(sys.argv[2]) * 2, "cost": 0.25}))
    """)
    trial = CommandTrial(f"{PY} {script} --lr {{lr}} --act {{act}} --seed {{seed}} --tag run-{{index}}")
    trial.check(["lr", "act"], checkpoint=False)
    hostile = "relu; touch pwned $(id) `id`"
    res = evaluate(trial, _req(3, lr=0.001, act=hostile))
    assert res.status == "ok", res.error
    assert res.values["loss"] == pytest.approx(0.002) and res.cost == 0.25
    assert not (tmp_path / "pwned").exists()
    # the hostile value arrived as one argument, byte for byte; floats keep their exact text
    out = trial(_req(3, lr=0.001, act=hostile))
    assert out["argv"] == ["--lr", "0.001", "--act", hostile, "--seed", "7", "--tag", "run-3"]
    fmt = CommandTrial(f"{PY} {script} --lr {{lr:.2e}} x")
    assert fmt.argv(_req(lr=0.00123))[3] == "1.23e-03"


def test_template_fields_are_checked_against_the_parameters():
    with pytest.raises(TrialSpecError, match=r"\{lrate\} is not a tuning parameter"):
        CommandTrial("python t.py --lr {lrate}").check(["lr"], checkpoint=False)
    with pytest.raises(TrialSpecError, match="no --deterministic-replay checkpoint"):
        CommandTrial("python t.py --ckpt {checkpoint}").check(["lr"], checkpoint=False)
    with pytest.raises(TrialSpecError, match="plain parameter name"):
        CommandTrial("python t.py {lr.real}").check(["lr"], checkpoint=False)
    with pytest.raises(TrialSpecError, match="No closing quotation"):
        CommandTrial("python 't.py {lr}").check(["lr"], checkpoint=False)


@pytest.mark.parametrize("body, reason", [
    ("import sys; print('boom', file=sys.stderr); sys.exit(3)", "exit code 3: boom"),
    ("print('done')", "last line is not JSON"),
    ("print('[1, 2]')", "JSON list, expected an object"),
    ("pass", "printed nothing"),
    ("import json; print(json.dumps({'loss': float('nan')}))", "non-finite metric(s): loss"),
    ("import json; print(json.dumps({'loss': 1.0, 'cost': -1}))", "cost -1 is not a non-negative number"),
])
def test_failed_commands_come_back_as_failed_with_the_reason(tmp_path, body, reason):
    res = evaluate(CommandTrial(f"{PY} {_script(tmp_path, body)}"), _req())
    assert res.status == "failed" and reason in res.error


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path):
    script = _script(tmp_path, """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        time.sleep(30)
    """)
    res = evaluate(CommandTrial(f"{PY} {script}", timeout_s=1.0), _req())
    assert res.status == "failed" and res.error == "timed out after 1 s"
    assert res.seconds < 10


def test_callables_get_seed_and_checkpoint_when_they_ask():
    seen = {}

    def fn(params, seed, checkpoint):
        seen.update(params=params, seed=seed, checkpoint=checkpoint)
        return {"loss": params["lr"] * 10}

    res = evaluate(CallableTrial(fn), TrialRequest(0, {"lr": 0.1}, 5, "/ckpt.pt"))
    assert res.values == {"loss": 1.0} and res.cost == pytest.approx(res.seconds / 3600)
    assert seen == {"params": {"lr": 0.1}, "seed": 5, "checkpoint": "/ckpt.pt"}
    bad = evaluate(CallableTrial(lambda p: 1 / 0), _req(lr=1.0))
    assert bad.status == "failed" and bad.error.startswith("ZeroDivisionError")
    assert InlineExecutor(CallableTrial(lambda p: {"loss": 2.0}))([_req(), _req(1)])[1].values == {"loss": 2.0}


@pytest.fixture()
def trial_module(tmp_path, monkeypatch):
    """An importable module with trial functions (spawned processes import it by name)."""
    (tmp_path / "mytrials.py").write_text(textwrap.dedent("""
        import os, time
        def quadratic(params, seed):
            return {"loss": (params["x"] - 0.3) ** 2, "pid": os.getpid(), "seed": seed, "cost": 0.5}
        def hang(params):
            time.sleep(60)
        def crash(params):
            os._exit(9)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "mytrials"


def test_process_executor_runs_callables_in_parallel_processes(trial_module):
    fn = load_callable(f"{trial_module}:quadratic")
    out = ProcessExecutor(fn, parallel=2)([_req(0, x=0.3), _req(1, x=0.5), _req(2, x=0.1)])
    assert [o.status for o in out] == ["ok"] * 3
    assert out[1].values["loss"] == pytest.approx(0.04) and out[0].values["seed"] == 7
    assert len({o.values["pid"] for o in out}) == 3  # a fresh process per trial
    hung = ProcessExecutor(load_callable(f"{trial_module}:hang"), timeout_s=1.0)([_req(x=0.1)])[0]
    assert hung.status == "failed" and "timed out" in hung.error
    died = ProcessExecutor(load_callable(f"{trial_module}:crash"))([_req(x=0.1)])[0]
    assert died.status == "failed" and "exit code 9" in died.error


def test_bad_trial_functions_are_named(trial_module):
    with pytest.raises(TrialSpecError, match="expected module:function"):
        load_callable("mytrials.quadratic")
    with pytest.raises(TrialSpecError, match="cannot import 'no_such_module_xyz'"):
        load_callable("no_such_module_xyz:f")
    with pytest.raises(TrialSpecError, match="has no attribute 'nope'"):
        load_callable(f"{trial_module}:nope")
    with pytest.raises(TrialSpecError, match="executor 'slurm'"):
        make_executor(CallableTrial(print), "slurm")


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (the 'ray' extra)")
def test_ray_executor_on_a_local_ray_instance(tmp_path):
    script = _script(tmp_path, "import json, sys; print(json.dumps({'loss': float(sys.argv[1]) ** 2}))")
    executor = make_executor(CommandTrial(f"{PY} {script} {{x}}"), "ray", parallel=2)
    try:
        out = executor([_req(0, x=0.5), _req(1, x=2.0)])
        fn_out = make_executor(CallableTrial(lambda p: {"loss": json.dumps(p) and p["x"] + 1}), "ray")(
            [_req(0, x=1.0)])
    finally:
        executor.close()
    assert [o.values["loss"] for o in out] == [0.25, 4.0]
    assert fn_out[0].values == {"loss": 2.0}
