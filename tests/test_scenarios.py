"""The scenario programs: every family learns healthy and writes the telemetry its logging style names, every
injection of the catalogue resolves to a config change its family implements and trains, the probe never
changes the numerics, and configs reject bad input clearly."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from debugtune.engine.telemetry import read_telemetry
from debugtune.engine.telemetry.aliases import canonical
from debugtune.scenarios import programs
from debugtune.scenarios.faults import FAMILY_PROGRAMS, FAULTS, LEAD, LOOKALIKES, SEVERITIES, Times, injection
from debugtune.scenarios.harness import trained_parameters
from debugtune.scenarios.logstyles import STYLES

torch.set_num_threads(1)

PROBE = {"grad_norm", "grad_zero_frac", "update_ratio", "weight_norm", "step_time_ms"}
HARNESS = [f for f, ps in FAMILY_PROGRAMS.items() if programs.PROGRAMS[ps[0]].kind == "harness"]
LEARN_STEPS = {"recurrent": 150, "transformer": 120, "autoencoder": 300}


@pytest.mark.parametrize("family", HARNESS)
def test_every_family_learns_healthy(family):
    """The family's first program, shortened, ends well below its chance loss (its own measurements)."""
    steps = LEARN_STEPS.get(family, 100)
    out = programs.run(LEAD[family], {"steps": steps}, seed=1)
    s = out.summary
    assert out.steps == steps and math.isfinite(s["final_loss"])
    assert s["final_loss"] < 0.75 * s["chance_loss"], (family, s["final_loss"], s["chance_loss"])
    assert s["final_loss"] < 0.8 * float(np.mean(out.series["loss"][:5]))


@pytest.mark.parametrize("family", [*HARNESS, "ddp"])
def test_every_family_writes_its_telemetry(tmp_path, family):
    program = LEAD[family]
    base = programs.PROGRAMS[program].base
    out = programs.run(program, {"steps": 6}, seed=0, run_dir=tmp_path, probe=True, run_id="t-" + program)
    assert out.steps == 6
    tel = read_telemetry(tmp_path)
    if family == "ddp":
        assert tel.ranks() == [0, 1] and {"collective_ms", "dataloader_wait_ms"} <= set(tel.metrics())
        return
    names = STYLES[base.log_style]
    logged = {names["loss"], names["lr"].format(optimizer=type_name(base.optimizer))}
    have = set(tel.metrics()) | {canonical(m) for m in tel.metrics()}  # a framework's spelling or the probe's
    missing = (PROBE | {canonical(n) for n in logged}) - have
    assert not missing, f"{program}: telemetry lacks {sorted(missing)}"
    assert ("act_zero_frac" in tel.metrics()) == (base.watch_activations and family in ("mlp", "cnn", "transformer",
                                                                                         "autoencoder"))
    if family.startswith("moe"):
        assert {"expert_tokens", "router_grad_norm"} <= set(tel.metrics())
    assert tel.meta["layers"], "run.json lists the layer order"
    assert "fault" not in tel.meta


def type_name(optimizer: str) -> str:
    return {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}[optimizer]


def _injections() -> list[tuple[str, str, str]]:
    cases = [(f.name, p, sev) for f in FAULTS.values() for p in f.programs for sev in SEVERITIES]
    return cases + [(lk.name, p, "mild") for lk in LOOKALIKES.values() if lk.name != "Healthy" for p in lk.programs]


def test_every_injection_resolves_and_changes_the_config():
    families_with_faults = {programs.PROGRAMS[p].family for f in FAULTS.values() for p in f.programs}
    assert len(families_with_faults) >= 12, sorted(families_with_faults)
    for name, program, severity in _injections():
        overrides = injection(name).resolve(program, severity)  # raises on knobs the family lacks
        base = replace(programs.PROGRAMS[program].base, seed=0)
        cfg = programs.make_config(program, overrides, 0)
        assert {k for k in overrides if getattr(cfg, k) != getattr(base, k)}, f"{name}/{severity}: {program} unchanged"


@pytest.mark.parametrize("family", HARNESS)
def test_every_injection_of_a_family_trains(family):
    """Each fault and look-alike of the family's first program runs a few steps (mechanisms wired, no crash)."""
    program = LEAD[family]
    cases = [(n, sev) for n, p, sev in _injections() if p == program and (sev == "severe" or n in LOOKALIKES)]
    assert cases
    for name, severity in cases:
        out = programs.run(program, injection(name).resolve(program, severity, steps=4), seed=0)
        assert out.steps == 4, (name, severity)


def test_probe_does_not_change_the_training(tmp_path):
    for program in ("digits_mlp", "markov_lm"):
        plain = programs.run(program, {"steps": 12}, seed=3)
        probed = programs.run(program, {"steps": 12}, seed=3, run_dir=tmp_path / program, probe=True)
        np.testing.assert_array_equal(plain.series["loss"], probed.series["loss"])


def test_runs_are_deterministic_per_seed():
    a, b = (programs.run("domains_moe", {"steps": 8}, seed=2) for _ in range(2))
    np.testing.assert_array_equal(a.series["loss"], b.series["loss"])
    np.testing.assert_array_equal(a.series["tokens_per_expert"], b.series["tokens_per_expert"])
    c = programs.run("domains_moe", {"steps": 8}, seed=3)
    assert not np.array_equal(a.series["loss"], c.series["loss"])


def test_faults_change_what_they_claim():
    """A few injections measured directly (no probe): the mechanism each fault names is there."""
    short = {"steps": 60}
    healthy = programs.run("digits_mlp", short, seed=0)
    dying = programs.run("digits_mlp", {**short, **FAULTS["DyingReLU"].resolve("digits_mlp", "severe")}, seed=0)
    assert dying.summary["dead_frac"] > 0.5 > healthy.summary["dead_frac"]
    functional = programs.run("smooth_mlp", {**short, **FAULTS["DyingReLU"].resolve("smooth_mlp", "severe")}, seed=0)
    assert functional.summary["dead_frac"] > 0.5, "functional ReLUs are measured too"
    sat_cfg = programs.make_config("digits_mlp", FAULTS["SaturatingActivations"].resolve("digits_mlp", "mild"), 0)
    assert sat_cfg.activation == "sigmoid" and sat_cfg.init_scale == 1.0, "sigmoid hidden layers, nothing else"
    from debugtune.scenarios import datasets
    from debugtune.scenarios.families import FAMILIES

    cfg = programs.make_config("digits_mlp", FAULTS["FrozenParameters"].resolve("digits_mlp", "severe"), 0)
    model = FAMILIES["mlp"].build(cfg, datasets.load(cfg))
    assert len(trained_parameters(model, cfg.frozen)) == 2  # only the head's weight and bias
    frozen = programs.run("tags_mlp", {**short, **LOOKALIKES["FrozenBackbone"].resolve("tags_mlp", "mild")}, seed=0)
    assert frozen.summary["backbone_max_change"] == 0.0
    accum = programs.run("tags_mlp", {**short, "accum_steps": 4}, seed=0)
    assert accum.summary["backwards_per_step"] == 4
    assert abs(accum.summary["final_loss"] - programs.run("tags_mlp", short, seed=0).summary["final_loss"]) < 0.05


def test_the_loss_activation_sits_in_the_model_or_in_the_loss(tmp_path):
    """LossActivationMismatch: on even seeds the model's outputs are the activation's (the probe sees a simplex),
    on odd seeds the model emits logits and the loss code squashes them; the loss is the same function either way,
    and the output gradient says so both times (cross-entropy on the simplex; a softmax, then cross-entropy)."""
    over = {"steps": 12, **FAULTS["LossActivationMismatch"].resolve("digits_mlp", "mild")}
    seen, loss = {}, {}
    for seed in (0, 1):
        programs.run("digits_mlp", over, seed=seed, run_dir=tmp_path / str(seed), probe=True)
        tel = read_telemetry(tmp_path / str(seed))
        simplex = tel.series("output_simplex_frac")[1]
        seen[seed] = float(simplex.mean()) if len(simplex) else 0.0
        shares = {h: float(np.median(tel.series("output_loss_identity", h)[1])) for h in tel.entities(
            "output_loss_identity")}
        loss[seed] = shares
    assert seen[0] == pytest.approx(1.0) and seen[1] < 0.5
    assert loss[0]["softmax_logits"] > 0.9 and loss[1]["softmax_twice"] > 0.9
    assert loss[1]["softmax_logits"] < 0.1
    cfg = programs.make_config("digits_mlp", over, 0)
    assert (cfg.model_activation, cfg.loss_activation) == ("softmax", "logits")
    assert (replace(cfg, seed=1).model_activation, replace(cfg, seed=1).loss_activation) == ("logits", "softmax")
    assert replace(cfg, output_site="loss").loss_activation == "softmax"


def test_chance_losses_follow_the_objective():
    s = {f: programs.run(LEAD[f], {"steps": 1}, seed=0).summary for f in ("mlp", "decoder_lm", "multilabel",
                                                                           "regression")}
    assert s["mlp"]["chance_loss"] == pytest.approx(math.log(10))
    assert s["decoder_lm"]["chance_loss"] == pytest.approx(math.log(32))
    assert 0.3 < s["multilabel"]["chance_loss"] < math.log(2)  # binary entropy of the label priors
    assert s["regression"]["chance_loss"] == pytest.approx(1.0, abs=0.1)  # the target variance


def test_catalogue_covers_the_issue():
    required = {"LearningRateTooHigh", "LearningRateTooLow", "BadWeightInit", "SaturatingActivations", "DyingReLU",
                "UnnormalizedInputs", "LossActivationMismatch", "LabelNoise", "MissingZeroGrad", "FrozenParameters",
                "BadBatch", "GateInitBias", "AuxLossDisabled", "CapacityFactorTooLow", "StragglerRank",
                "DataPipelineStall"}
    assert required <= set(FAULTS)
    assert {"WarmupTransient", "ScheduledLRDrop", "RecoveringSpike", "NormalReLUSparsity", "GradientAccumulation",
            "FrozenBackbone", "ClippingAtStart", "HealthyImbalancedMoE"} <= set(LOOKALIKES)
    for lk in ("Healthy", "WarmupTransient", "GradientAccumulation", "FrozenBackbone"):
        assert set(HARNESS) <= set(LOOKALIKES[lk].families), lk
    optimizers = {programs.PROGRAMS[p].base.optimizer for f in HARNESS for p in FAMILY_PROGRAMS[f]}
    assert optimizers == {"sgd", "adam", "adamw"}
    lr = FAULTS["LearningRateTooHigh"].resolve("digits_mlp", "severe")["lr"]
    assert lr == pytest.approx(programs.PROGRAMS["digits_mlp"].base.lr * 50)
    assert FAULTS["BadBatch"].resolve("blobs_mlp", "mild")["bad_batch_step"] == 120
    assert FAULTS["StragglerRank"].resolve("ddp_mlp", "mild", steps=10)["onset_step"] == 3
    assert isinstance(FAULTS["LearningRateTooLow"].overrides["digits_mlp"]["mild"]["lr"], Times)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown program"):
        programs.run("nope")
    with pytest.raises(ValueError, match="unknown or unimplemented config field"):
        programs.run("digits_mlp", {"learning_rate": 1.0})
    with pytest.raises(ValueError, match=r"sines_lstm \(recurrent\): unknown or unimplemented .* hidden_bias"):
        programs.make_config("sines_lstm", {"hidden_bias": -4.0}, 0)
    with pytest.raises(ValueError, match="not a mismatch defined for the bce loss"):
        programs.make_config("tags_mlp", {"output": "softmax"}, 0)
    with pytest.raises(KeyError, match="unknown fault"):
        injection("CosmicRays")
    with pytest.raises(ValueError, match="no 'severe' injection for program 'moe_lm'"):
        FAULTS["DyingReLU"].resolve("moe_lm", "severe")
    with pytest.raises(ValueError, match="the CNN needs image data"):
        programs.run("digits_cnn", {"task": "blobs", "steps": 1})
    with pytest.raises(ValueError, match="accum_steps must be"):
        programs.run("digits_mlp", {"accum_steps": 5, "steps": 1})
    with pytest.raises(ValueError, match="probe=True needs a run_dir"):
        programs.run("blobs_mlp", {"steps": 2}, probe=True)
