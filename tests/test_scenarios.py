"""The scenario programs: each runs healthy and with each of its faults (a few steps, probe attached) and
writes the telemetry the detectors read; the catalogue and configs reject bad input clearly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from debugtune.engine.telemetry import read_telemetry
from debugtune.scenarios import programs
from debugtune.scenarios.faults import FAULTS, LOOKALIKES, SEVERITIES, Times, injection

torch.set_num_threads(1)

COMMON = {"loss", "lr", "grad_norm", "grad_zero_frac", "update_ratio", "weight_norm", "step_time_ms"}
EXPECTED = {
    "classifier": COMMON | {"accuracy", "eval_loss", "eval_accuracy"},
    "moe": COMMON | {"expert_tokens", "router_grad_norm", "aux_loss", "dropped_tokens"},
    "ddp": COMMON | {"collective_ms", "comm_ms", "dataloader_wait_ms", "compute_ms"},
}
STEPS = {"classifier": 12, "moe": 8, "ddp": 10}


def _cases() -> list[tuple[str, str, str]]:
    """(program, fault or look-alike, severity): every fault of every program at its severe setting, plus
    the healthy run of every program."""
    cases = [(p, "Healthy", "mild") for p in programs.PROGRAMS]
    cases += [(p, f.name, "severe") for f in FAULTS.values() for p in f.programs]
    return cases


@pytest.mark.parametrize(("program", "name", "severity"), _cases(), ids=lambda v: str(v))
def test_program_runs_with_its_fault_and_writes_telemetry(tmp_path, program, name, severity):
    kind = programs.PROGRAMS[program].kind
    overrides = injection(name).resolve(program, severity, steps=STEPS[kind])
    outcome = programs.run(program, overrides, seed=0, run_dir=tmp_path, probe=True, run_id="t-" + program)
    assert outcome.steps == STEPS[kind]
    tel = read_telemetry(tmp_path)
    missing = EXPECTED[kind] - set(tel.metrics())
    assert not missing, f"{program}/{name}: telemetry lacks {sorted(missing)}"
    assert tel.meta["layers"], "run.json lists the layer order"
    assert "fault" not in tel.meta and name not in str(tel.meta), "the run directory must not reveal the fault"
    if kind == "ddp":
        assert tel.ranks() == [0, 1]
    if kind == "classifier":
        act = "act_sat_frac" if overrides.get("activation") == "sigmoid" else "act_zero_frac"
        assert act in tel.metrics()


def test_probe_does_not_change_the_training(tmp_path):
    plain = programs.run("digits_mlp", {"steps": 20}, seed=3)
    probed = programs.run("digits_mlp", {"steps": 20}, seed=3, run_dir=tmp_path, probe=True)
    np.testing.assert_array_equal(plain.series["loss"], probed.series["loss"])


def test_faults_change_what_they_claim():
    """A few injections measured directly (no probe): the mechanism each fault names is there."""
    short = {"steps": 60}
    healthy = programs.run("digits_mlp", short, seed=0)
    dying = programs.run("digits_mlp", {**short, **FAULTS["DyingReLU"].resolve("digits_mlp", "severe")}, seed=0)
    assert dying.summary["dead_frac"] > 0.5 > healthy.summary["dead_frac"]
    sat = programs.run("digits_mlp", {**short, **FAULTS["SaturatingActivations"].resolve("digits_mlp", "severe")},
                       seed=0)
    assert sat.summary["sat_frac"] > 0.3
    frozen = FAULTS["FrozenParameters"].resolve("digits_mlp", "severe")
    from debugtune.scenarios.classify import build_model, trained_parameters
    from debugtune.scenarios.tabular import load

    cfg = programs.make_config("digits_mlp", frozen, 0)
    model = build_model(cfg, load("digits"))
    assert len(trained_parameters(model, cfg.frozen)) == 2  # only the head's weight and bias


def test_catalogue_covers_the_issue_and_resolves():
    required = {"LearningRateTooHigh", "LearningRateTooLow", "BadWeightInit", "SaturatingActivations", "DyingReLU",
                "UnnormalizedInputs", "LossActivationMismatch", "LabelNoise", "MissingZeroGrad", "FrozenParameters",
                "BadBatch", "GateInitBias", "AuxLossDisabled", "CapacityFactorTooLow", "StragglerRank",
                "DataPipelineStall"}
    assert required <= set(FAULTS)
    assert {"WarmupTransient", "ScheduledLRDrop", "RecoveringSpike", "NormalReLUSparsity"} <= set(LOOKALIKES)
    lr = FAULTS["LearningRateTooHigh"].resolve("digits_mlp", "severe")["lr"]
    assert lr == pytest.approx(programs.PROGRAMS["digits_mlp"].base.lr * 50)
    assert FAULTS["BadBatch"].resolve("blobs_mlp", "mild")["bad_batch_step"] == 120
    assert FAULTS["StragglerRank"].resolve("ddp_mlp", "mild", steps=10)["onset_step"] == 3
    for f in FAULTS.values():
        for p in f.programs:
            for sev in SEVERITIES:
                f.resolve(p, sev)
    assert isinstance(FAULTS["LearningRateTooLow"].overrides["digits_mlp"]["mild"]["lr"], Times)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown program"):
        programs.run("nope")
    with pytest.raises(ValueError, match="unknown config field"):
        programs.run("digits_mlp", {"learning_rate": 1.0})
    with pytest.raises(KeyError, match="unknown fault"):
        injection("CosmicRays")
    with pytest.raises(ValueError, match="no 'severe' injection for program 'moe_lm'"):
        FAULTS["DyingReLU"].resolve("moe_lm", "severe")
    with pytest.raises(ValueError, match="CNN runs on the digits"):
        programs.run("digits_cnn", {"dataset": "blobs"})
    with pytest.raises(ValueError, match="probe=True needs a run_dir"):
        programs.run("blobs_mlp", {"steps": 2}, probe=True)
