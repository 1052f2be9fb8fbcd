"""The healthy-only program families: each trains for real with the probe attached and learns by its own
measure; the probe does not change the training; the registry holds what the matrix needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.healthy import HEALTHY
from bench.healthy.base import Check, verdict
from debugtune.engine.telemetry import read_telemetry
from debugtune.engine.telemetry.aliases import canonical

torch.set_num_threads(1)


@pytest.mark.parametrize("name", list(HEALTHY))
def test_program_learns_with_the_probe_attached(tmp_path, name):
    prog = HEALTHY[name]
    series, summary = prog.train(0, tmp_path, True, "h-" + name, prog.min_steps)
    assert summary["learned"], f"{name} did not learn in {prog.min_steps} steps: {summary['why']}"
    loss = series["loss"]
    assert len(loss) == prog.min_steps and np.isfinite(loss).all()
    tel = read_telemetry(tmp_path)
    metrics = set(tel.metrics())
    loss_metric = canonical(prog.loss_metric)  # a known spelling (train_loss) is read as its metric (loss)
    assert {loss_metric, "grad_norm", "update_ratio"} <= metrics, sorted(metrics)
    _, logged = tel.series(loss_metric)
    # every logged value is one of the program's losses; a validation forward after optimizer.step() opens the
    # probe's next step early, so that iteration's value shares a step with the next one and may be overwritten
    assert np.isin(logged.astype(np.float32), loss.astype(np.float32)).all(), f"{name}: not the program's loss"
    assert len(logged) >= 0.95 * len(loss)
    assert tel.meta["layers"], "run.json lists the layer order"
    assert "learned" not in str(tel.meta) and "healthy" not in str(tel.meta), "the run directory holds no label"


@pytest.mark.parametrize("name", ["gan_disc_mixture", "reinforce_cartpole"])
def test_probe_changes_nothing_and_runs_repeat(tmp_path, name):
    """Three backward passes per step into the probed discriminator, sampled actions in the policy: the same
    seed gives the same losses bit for bit, with or without the probe."""
    prog = HEALTHY[name]
    plain, _ = prog.train(3, None, False, None, 12)
    probed, _ = prog.train(3, tmp_path, True, "h-repeat", 12)
    np.testing.assert_array_equal(plain["loss"], probed["loss"])
    other, _ = prog.train(4, None, False, None, 12)
    assert not np.array_equal(plain["loss"], other["loss"]), "the seed drives the run"


def test_registry_covers_the_families_the_matrix_needs():
    families = {p.family for p in HEALTHY.values()}
    assert len(families) >= 8
    assert {"adversarial", "policy_gradient", "contrastive", "embeddings", "graph", "adaptive_optimizer",
            "variational", "recurrent_regression", "residual_bn"} <= families
    for p in HEALTHY.values():
        assert 200 <= p.steps <= 600 and 0 < p.min_steps <= p.steps, p.name
        assert p.description and p.loss_metric in ("loss", "train_loss")
    gan = [p for p in HEALTHY.values() if p.family == "adversarial"]
    assert len(gan) == 2, "the GAN is probed once on the discriminator and once on the generator"


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="steps must be >= 1"):
        HEALTHY["vae_digits"].train(0, None, False, None, 0)
    from bench.healthy import adversarial

    with pytest.raises(ValueError, match="probed must be one of"):
        adversarial.train(0, None, False, None, 5, probed="critic")
    with pytest.raises(ValueError, match="unknown 2-D data set"):
        adversarial.train(0, None, False, None, 5, data="spiral")
    with pytest.raises(ValueError, match="needs a run_dir"):
        HEALTHY["gcn_sbm"].train(0, None, True, None, 5)


def test_verdict_states_every_check():
    summary = verdict([Check("acc", 0.95, ">=", 0.9), Check("err", float("nan"), "<=", 0.1)], extra=1.0)
    assert summary["learned"] is False and summary["acc"] == 0.95 and summary["extra"] == 1.0
    assert "acc 0.95 >= 0.9 (ok)" in summary["why"] and "err nan <= 0.1 (FAILED)" in summary["why"]


def test_a_policy_gradient_loss_that_rises_is_no_overshoot(tmp_path):
    """REINFORCE's loss is minus the advantage-weighted log-probability: it rises and falls by design, so an early
    rise above its first value under large-ish first updates is not the overshoot that names a learning rate
    (gradient.update_ratio.high's early burst reads the loss only where it is a supervised loss)."""
    from debugtune.api import diagnose

    prog = HEALTHY["reinforce_cartpole"]
    _, summary = prog.train(2, tmp_path, True, "h-reinforce", None)
    assert summary["learned"], summary["why"]
    report = diagnose(tmp_path)
    assert "UpdateRatioTooHigh" not in {f.symptom for f in report.findings}
    assert report.hypotheses == []
