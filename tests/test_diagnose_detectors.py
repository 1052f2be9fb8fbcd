"""Each detector fires on its pattern (with the numbers in its evidence) and stays quiet on a healthy run.

Telemetry is synthetic but shaped like the probe's and written with the real writer, then read back
and diagnosed through `diagnose_run` (the same path as `cann-debug diagnose`).
"""

from __future__ import annotations

import numpy as np
import pytest

from debugtune.engine.diagnose import diagnose_run
from debugtune.engine.telemetry import TelemetryWriter
from tests.diagnose_helpers import (
    finding,
    healthy_gradients,
    healthy_loss,
    replace_row,
    run_and_diagnose,
    symptoms,
    write_run,
)

N = 300



@pytest.fixture
def rng():
    return np.random.default_rng(7)


def classifier_rows(rng, n=N, loss=None):
    rows = healthy_gradients(n, rng)
    rows.append(("convergence", "loss", "", healthy_loss(n, rng) if loss is None else loss))
    rows.append(("convergence", "lr", "", np.full(n, 0.02)))
    return rows


def test_healthy_run_has_no_findings(tmp_path, th, rng):
    d = run_and_diagnose(tmp_path, th, {0: classifier_rows(rng)})
    assert d.findings == []
    assert {"LossSpike", "LossOscillation", "DeadUnits", "GradientExplosion", "ZeroUpdate"} <= d.judged
    assert d.coverage["gradient"] == d.coverage["convergence"] == "diagnosed"
    assert any("communication flow not diagnosed" in n for n in d.notes)


def test_loss_oscillation_reports_period_and_amplitude(tmp_path, th, rng):
    t = np.arange(N)
    loss = healthy_loss(N, rng, floor=0.6) + 0.35 * np.sin(2 * np.pi * t / 24)  # above 0, as a real loss stays
    f = finding(run_and_diagnose(tmp_path, th, {0: classifier_rows(rng, loss=loss)}), "LossOscillation")
    assert f.evidence["period_steps"] == pytest.approx(24, abs=1)
    assert f.evidence["amplitude"] == pytest.approx(0.35, abs=0.06)
    assert f.detector == "convergence.oscillation.acf"


def test_a_wave_that_starts_late_has_its_onset_where_it_starts_not_where_the_noise_is(tmp_path, th, rng):
    """A 128-step wave of 0.1 that appears at step 1,500 of 3,000 under per-step noise of half its amplitude:
    the noise alone reaches half the wave's level at once, so the onset is read from the wave's own component
    (the seed chain's oscillation must follow its cause, docs/tune.md)."""
    n, start = 3000, 1500
    t = np.arange(n)
    loss = healthy_loss(n, rng, floor=0.6) + 0.05 * rng.standard_normal(n)
    loss[start:] += 0.1 * np.sin(2 * np.pi * (t[start:] - start) / 128)
    f = finding(run_and_diagnose(tmp_path, th, {0: classifier_rows(rng, n=n, loss=loss)}), "LossOscillation")
    assert f.evidence["period_steps"] == pytest.approx(128, abs=6)
    assert abs(f.onset_step - start) <= 128


def test_loss_spike_and_megatron_factor(tmp_path, th, rng):
    loss = healthy_loss(N, rng)
    loss[150] = 12 * loss[:30].max()  # ≥ 10 × the early maximum (Megatron)
    f = finding(run_and_diagnose(tmp_path, th, {0: classifier_rows(rng, loss=loss)}), "LossSpike")
    assert f.onset_step == 150 and f.evidence["spikes"] == 1
    assert f.evidence["early_max_ratio"] >= 10
    assert f.detection_step == 150


def test_a_blip_below_the_start_that_recovers_is_not_a_spike(tmp_path, th, rng):
    """A one-step rise that stays below the early window's maximum and is gone the next step (a healthy Adam
    autoencoder's blips) is not reported; the same rise held for longer than the window is."""
    loss = healthy_loss(N, rng)
    loss[200] += 1.0  # to about 1.2, below the untrained 2.3
    d = run_and_diagnose(tmp_path / "blip", th, {0: classifier_rows(rng, loss=loss)})
    assert "LossSpike" in d.judged and "LossSpike" not in symptoms(d)
    held = healthy_loss(N, rng)
    held[200:] += 1.0
    f = finding(run_and_diagnose(tmp_path / "held", th, {0: classifier_rows(rng, loss=held)}), "LossSpike")
    assert f.onset_step == 200 and f.evidence["early_max_ratio"] < 1


@pytest.mark.parametrize("shape, found", [("blows up at step 1", True), ("one noisy batch in five", False),
                                          ("blows up, then NaN", True), ("NaN at once", False)])
def test_early_loss_blowup_is_a_smoothed_rise_not_a_noisy_batch(tmp_path, th, rng, shape, found):
    """fastai's range-test stop: the smoothed loss at four times its best within the first steps. A regression's
    per-batch MSE that jumps five-fold on one batch is not it; non-finite values are NaNOrInf's."""
    loss = healthy_loss(N, rng)
    if shape == "blows up at step 1":
        loss[1:8] = [110.0, 110.0, 70.0, 45.0, 30.0, 12.0, 5.0]
    elif shape == "one noisy batch in five":
        loss[1:60:5] *= 5.0
    elif shape == "blows up, then NaN":
        loss[1:4] = [30.0, 200.0, 5000.0]
        loss[4:] = np.nan
    else:
        loss[1:] = np.nan
    d = run_and_diagnose(tmp_path, th, {0: classifier_rows(rng, loss=loss)})
    assert "EarlyLossBlowup" in d.judged
    assert ("EarlyLossBlowup" in symptoms(d)) is found
    if shape == "blows up at step 1":
        f = finding(d, "EarlyLossBlowup")
        assert f.onset_step == 1 and f.end_step == 6 and f.evidence["threshold"] == 4  # 5.0 at step 7 is under 4 × 2.3


@pytest.mark.parametrize("shape, found", [("ends at a two-hundredth of its start", True),
                                          ("ends at a twentieth", False),
                                          ("blows up at step 1, then a two-hundredth of step 0", True)])
def test_a_loss_that_fits_closely_is_a_sign_of_health(tmp_path, th, rng, shape, found):
    """Two orders of magnitude below the untrained loss: R² ≥ 0.99 for a regression. The untrained loss is the
    smallest of the first three, so a blow-up at the first update does not pass for it."""
    floor = 2.3 / 20 if shape == "ends at a twentieth" else 2.3 / 200
    loss = healthy_loss(N, rng, floor=floor, noise=floor / 10)
    if shape.startswith("blows up"):
        loss[1:4] = [110.0, 60.0, 20.0]
    d = run_and_diagnose(tmp_path, th, {0: classifier_rows(rng, loss=loss)})
    assert "LossFitsClosely" in d.judged
    assert ("LossFitsClosely" in symptoms(d)) is found
    if found:
        f = finding(d, "LossFitsClosely")
        assert f.evidence["loss_ratio"] <= 0.01 and f.evidence["loss_untrained"] < 2.5


def test_warmup_and_scheduled_lr_drop_are_not_findings(tmp_path, th, rng):
    lr = np.full(N, 0.04)
    lr[:60] = np.linspace(0.002, 0.04, 60)
    lr[150:] = 0.004
    loss = healthy_loss(N, rng)
    loss[:60] += np.linspace(0.6, 0, 60) * rng.random(60)  # the warm-up transient
    loss[150:] -= 0.05  # the drop after the LR step
    rows = replace_row(classifier_rows(rng, loss=loss), "lr", "", lambda v: lr)
    assert run_and_diagnose(tmp_path, th, {0: rows}).findings == []


def test_divergence_plateau_slow_convergence(tmp_path, th, rng):
    t = np.arange(N)
    rising = 1.0 + np.where(t > 100, (t - 100) * 0.02, 0) + 0.01 * rng.random(N)
    assert "LossDivergence" in symptoms(run_and_diagnose(tmp_path / "a", th, {0: classifier_rows(rng, loss=rising)}))
    flat = 2.30 + 0.01 * rng.standard_normal(N)
    d = run_and_diagnose(tmp_path / "b", th, {0: classifier_rows(rng, loss=flat)})
    assert "LossPlateau" in symptoms(d) and "SlowConvergence" not in symptoms(d)
    slow = 2.3 - 0.002 * t + 0.01 * rng.standard_normal(N)  # still falling steadily at the end
    f = finding(run_and_diagnose(tmp_path / "c", th, {0: classifier_rows(rng, loss=slow)}), "SlowConvergence")
    assert f.evidence["late_share"] > 0.4


def test_overfitting_needs_train_loss_falling(tmp_path, th, rng):
    rows = classifier_rows(rng)
    steps = np.arange(0, N, 10)
    ev = 1.3 + np.where(steps > 100, (steps - 100) * 0.004, 0)  # validation loss turns up at step 100
    run_dir = write_run(tmp_path / "run", {0: rows})
    with TelemetryWriter(run_dir, "t", rank=0) as w:
        w.add_columns(steps, "convergence", "eval_loss", "", ev)
    f = finding(diagnose_run(run_dir, th), "Overfitting")
    assert f.onset_step <= 110 and f.evidence["relative_rise"] > 0.5


def test_nan_gradients_located_in_the_first_layer(tmp_path, th, rng):
    rows = classifier_rows(rng)
    rows = replace_row(rows, "grad_norm", "body.2", lambda v: np.where(np.arange(N) >= 200, np.nan, v))
    rows.append(("gradient", "grad_nan", "body.2", np.where(np.arange(N) >= 200, 5.0, 0.0)))
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "NaNOrInf")
    assert f.onset_step == 200 and f.entity == "body.2"


def test_gradient_explosion_first_last_ratio_and_vanishing(tmp_path, th, rng):
    rows = replace_row(classifier_rows(rng), "grad_norm", "body.0", lambda v: v * 500)
    f = finding(run_and_diagnose(tmp_path / "a", th, {0: rows}), "GradientExplosion")
    assert f.entity == "body.0" and f.evidence["peak_ratio"] > 70
    rows = replace_row(classifier_rows(rng), "grad_norm", "body.0", lambda v: v * 1e-5)
    f = finding(run_and_diagnose(tmp_path / "b", th, {0: rows}), "GradientVanishing")
    assert f.evidence["first_last_ratio"] < 1e-3


def test_grad_norm_drift_when_gradients_accumulate(tmp_path, th, rng):
    rows = classifier_rows(rng)
    rows.append(("gradient", "grad_norm", "", 0.5 * (1 + np.arange(N)) * (1 + 0.05 * rng.random(N))))
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "GradNormDrift")
    assert f.evidence["growth"] > 50


def test_dead_units_versus_normal_relu_sparsity(tmp_path, th, rng):
    sparse = replace_row(classifier_rows(rng), "act_zero_frac", "body.3", lambda v: v * 0 + 0.6)
    assert "DeadUnits" not in symptoms(run_and_diagnose(tmp_path / "a", th, {0: sparse}))
    dead = replace_row(classifier_rows(rng), "act_zero_frac", "body.3",
                       lambda v: np.minimum(0.5 + np.arange(N) / 100, 0.99))
    f = finding(run_and_diagnose(tmp_path / "b", th, {0: dead}), "DeadUnits")
    assert f.entity == "body.3" and f.evidence["act_zero_frac"] > 0.95


def test_activation_saturation(tmp_path, th, rng):
    rows = classifier_rows(rng) + [("gradient", "act_sat_frac", "body.1", 0.7 + 0.05 * rng.random(N))]
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "ActivationSaturation")
    assert f.entity == "body.1"


def test_zero_update_for_layers_outside_the_optimizer(tmp_path, th, rng):
    rows = [r for r in classifier_rows(rng) if not (r[1] in ("update_ratio", "update_norm") and r[2] == "body.0")]
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "ZeroUpdate")
    assert f.entity == "body.0" and f.evidence["in_optimizer"] is False and f.evidence["has_gradient"] is True


def test_update_ratio_out_of_band(tmp_path, th, rng):
    rows = replace_row(classifier_rows(rng), "update_ratio", "body.0", lambda v: v * 0 + 1e-5)
    rows = replace_row(rows, "update_ratio", "body.2", lambda v: v * 0 + 1e-5)
    rows = replace_row(rows, "update_ratio", "head", lambda v: v * 0 + 3e-5)
    d = run_and_diagnose(tmp_path / "low", th, {0: rows})
    assert finding(d, "UpdateRatioTooLow").evidence["update_ratio_median"] < 1e-4
    assert "UpdateRatioTooHigh" not in symptoms(d) and {"UpdateRatioTooHigh", "UpdateRatioTooLow"} <= d.judged
    rows = [(d, m, e, v * 80 if m == "update_ratio" else v) for d, m, e, v in classifier_rows(rng)]
    d = run_and_diagnose(tmp_path / "high", th, {0: rows})
    assert finding(d, "UpdateRatioTooHigh").evidence["update_ratio_median"] > 1e-2
    assert "UpdateRatioTooLow" not in symptoms(d)


def test_layers_stepping_from_zero_are_not_a_too_large_update(tmp_path, th, rng):
    """Every layer all zeros before its first steps (word2vec's output vectors): the probe's ratio is then
    ‖ΔW‖ / ‖W after‖ = 1 exactly, which says nothing of the step's size; the same ratio 1 off a real scale
    is judged."""
    def first_steps(value):
        def put(v):
            v = v.copy()
            v[:20] = value
            return v
        return put

    rows = classifier_rows(rng)
    for layer in ("body.0", "body.2", "head"):
        rows = replace_row(rows, "update_ratio", layer, first_steps(1.0))
    assert "UpdateRatioTooHigh" not in symptoms(run_and_diagnose(tmp_path / "zero", th, {0: rows}))
    rows = classifier_rows(rng)
    for layer in ("body.0", "body.2", "head"):
        rows = replace_row(rows, "update_ratio", layer, first_steps(0.9))
    assert "UpdateRatioTooHigh" in symptoms(run_and_diagnose(tmp_path / "large", th, {0: rows}))


def moe_rows(rng, n=N, hot_share=None, router_scale=1.0, dropped=0.0):
    rows = healthy_gradients(n, rng, layers=("embed", "blocks.0.attn", "head"))
    rows.append(("convergence", "loss", "", healthy_loss(n, rng, start=3.4, floor=0.9)))
    e = 8
    base = rng.multinomial(512, np.full(e, 1 / e), size=n).astype(float)
    if hot_share is not None:
        hot = rng.binomial(512, hot_share, size=n).astype(float)
        rest = rng.multinomial(1, np.full(e - 1, 1 / (e - 1)), size=(n,)) * 0 + (512 - hot)[:, None] / (e - 1)
        base = np.column_stack([hot, rest])
    for i in range(e):
        rows.append(("convergence", "expert_tokens", f"blocks.0.moe.router/expert:{i}", base[:, i]))
    rows.append(("gradient", "router_grad_norm", "blocks.0.moe.router",
                 router_scale * 0.1 * (1 + 0.1 * rng.random(n))))
    rows.append(("convergence", "dropped_tokens", "", dropped * 512 * np.ones(n)))
    return rows


def test_expert_metrics_quiet_on_balanced_routing(tmp_path, th, rng):
    d = run_and_diagnose(tmp_path, th, {0: moe_rows(rng)})
    assert not symptoms(d) & {"ExpertImbalance", "DeadExperts", "TokenDropping", "RouterGradVanishing"}
    assert {"ExpertImbalance", "DeadExperts", "TokenDropping", "RouterGradVanishing"} <= d.judged


def test_gate_bias_pattern(tmp_path, th, rng):
    d = run_and_diagnose(tmp_path, th, {0: moe_rows(rng, hot_share=0.9, router_scale=1e-6, dropped=0.6)})
    imb = finding(d, "ExpertImbalance")
    assert imb.entity == "blocks.0.moe.router/expert:0" and imb.evidence["token_share"] > 0.85
    assert imb.evidence["cv"] > 2 and imb.evidence["entropy"] < 0.5
    assert finding(d, "RouterGradVanishing").evidence["router_grad_norm"] < 1e-6
    assert finding(d, "TokenDropping").evidence["drop_fraction"] == pytest.approx(0.6)


def comm_rows(rng, rank, n=N, slow=False, stall=0.0):
    compute = 5.0 * (1 + 0.05 * rng.random(n)) + (np.where(np.arange(n) >= 90, 20.0, 0.0) if slow else 0.0)
    wait = np.full(n, 0.2) + (np.where(np.arange(n) >= 90, stall, 0.0))
    return [("communication", "compute_ms", "", compute), ("hardware", "dataloader_wait_ms", "", wait)]


def _finish_comm(ranks: dict[int, list]) -> dict[int, list]:
    """Collective time = wait for the slowest rank + transfer; step time = slowest compute + loader + comm."""
    n = len(ranks[0][0][3])
    compute = np.array([dict((m, v) for _, m, _, v in rows)["compute_ms"] for rows in ranks.values()])
    wait = np.array([dict((m, v) for _, m, _, v in rows)["dataloader_wait_ms"] for rows in ranks.values()])
    arrive = compute + wait
    for i, rows in enumerate(ranks.values()):
        coll = arrive.max(axis=0) - arrive[i] + 1.0 + 0.02 * np.random.default_rng(i).random(n)
        rows.append(("communication", "collective_ms", "allreduce", coll))
        rows.append(("communication", "step_time_ms", "", arrive.max(axis=0) + 1.0))
    return ranks


@pytest.mark.parametrize("world", [2, 4, 128])
def test_slow_rank_found_by_vote(tmp_path, th, rng, world):
    ranks = _finish_comm({r: comm_rows(rng, r, slow=(r == 1)) for r in range(world)})
    f = finding(run_and_diagnose(tmp_path, th, ranks), "SlowRank")
    assert f.entity == "rank:1" and f.onset_step == pytest.approx(90, abs=5)
    assert f.evidence["spread"] > 0.5 and f.evidence["vote_fraction"] > 0.5


def test_no_slow_rank_without_one(tmp_path, th, rng):
    ranks = _finish_comm({r: comm_rows(rng, r) for r in range(4)})
    d = run_and_diagnose(tmp_path, th, ranks)
    assert "SlowRank" in d.judged and "SlowRank" not in symptoms(d)
    assert "DataLoaderWait" not in symptoms(d)


def test_data_loader_stall_on_every_rank(tmp_path, th, rng):
    ranks = _finish_comm({r: comm_rows(rng, r, stall=30.0) for r in range(2)})
    d = run_and_diagnose(tmp_path, th, ranks)
    f = finding(d, "DataLoaderWait")
    assert f.entity == "" and f.evidence["wait_ms"] > 25
    assert "StepTimeRegression" in symptoms(d)


def _step_times(rng, slow_every=0, stall=0.0, pause_at=()):
    """5 ms steps with noise; from step 90 every ``slow_every``-th step also waits ``stall`` ms (a loader that
    keeps up on some steps only); a 200 ms pause at each step of ``pause_at`` (a checkpoint)."""
    t = 5.0 * (1 + 0.2 * rng.random(N))
    if slow_every:
        t[90::slow_every] += stall
    for i in pause_at:
        t[i] += 200.0
    return t


@pytest.mark.parametrize("slow_every, stall", [(2, 15.0), (3, 30.0)])
def test_a_stall_on_every_kth_step_is_a_step_time_regression(tmp_path, th, rng, slow_every, stall):
    """The wall time per step more than doubles although the median step does not move (one step in two or
    three stalls)."""
    rows = [("communication", "step_time_ms", "", _step_times(rng, slow_every, stall))]
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "StepTimeRegression")
    assert f.onset_step == pytest.approx(90, abs=N * 0.1)
    assert f.evidence["step_time_ms_after"] > 2 * f.evidence["step_time_ms_before"]


def test_isolated_pauses_are_not_a_step_time_regression(tmp_path, th, rng):
    rows = [("communication", "step_time_ms", "", _step_times(rng, pause_at=(100, 200, 290)))]
    d = run_and_diagnose(tmp_path, th, {0: rows})
    assert "StepTimeRegression" in d.judged and "StepTimeRegression" not in symptoms(d)


def test_a_loader_wait_is_as_severe_as_its_share_of_a_short_step(tmp_path, th, rng):
    """7.5 ms of 20 ms steps is a mild wait by the advisor's 10 ms but more than a third of the step."""
    wait = np.where(np.arange(N) >= 90, 7.5, 0.2)
    rows = [("hardware", "dataloader_wait_ms", "", wait), ("communication", "step_time_ms", "", 12.5 + wait)]
    f = finding(run_and_diagnose(tmp_path, th, {0: rows}), "DataLoaderWait")
    share_sev = 0.5 + 0.5 * np.log(f.evidence["share_of_step"] / 0.05) / np.log(20)
    assert f.evidence["share_of_step"] == pytest.approx(0.375, abs=0.01)
    assert f.severity == pytest.approx(share_sev * f.evidence["evidence_weight"], rel=1e-6)
    # its evidence rests on the steps since the wait began, as its persistence test does, not on the whole run
    assert f.evidence["steps_judged"] <= N - 90 + 5 and f.evidence["confidence"] == "confirmed"


def test_links_bandwidth_and_share(tmp_path, th, rng):
    rows = [("communication", "link_bw_gbps", f"link:0-{i}", np.full(N, 40.0 if i != 3 else 4.0)) for i in range(1, 5)]
    rows += [("communication", "busbw_gbps", "allreduce", np.full(N, 100.0)),
             ("communication", "comm_not_overlapped_ms", "", np.full(N, 40.0)),
             ("communication", "step_time_ms", "", np.full(N, 100.0) + rng.random(N)),
             ("communication", "alltoall_bytes", "", np.full(N, 1e6))]
    other = [("communication", "alltoall_bytes", "", np.full(N, 3e6)),
             ("communication", "step_time_ms", "", np.full(N, 100.0) + rng.random(N)),
             ("communication", "comm_not_overlapped_ms", "", np.full(N, 40.0))]
    d = run_and_diagnose(tmp_path, th, {0: rows, 1: other}, meta={"interconnect": "nvlink_h100"})
    assert finding(d, "SlowLink").entity == "link:0-3"
    assert finding(d, "LowBandwidthUtilization").evidence["utilisation"] == pytest.approx(100 / 450, rel=0.01)
    assert finding(d, "HighCommunicationShare").evidence["share"] == pytest.approx(0.4, abs=0.01)
    assert finding(d, "AllToAllImbalance").entity == "rank:1"


@pytest.mark.parametrize("shape, onset", [("soars late", 210), ("spread early, then local", None),
                                          ("an early excursion, then soars", 180), ("high throughout", 0)])
def test_cross_cabinet_traffic_is_found_where_it_sets_in_and_stays(tmp_path, th, rng, shape, onset):
    """The seed story's traffic soars late: found from where it stays above 15%, not only once half the run had
    it. A router that starts spread over the cabinets and learns its locality is healthy."""
    steps = np.arange(N)
    share = {"soars late": np.where(steps >= 210, 0.35, 0.05),
             "spread early, then local": np.where(steps < 30, 0.6, 0.03),
             "an early excursion, then soars": np.select([steps < 20, steps >= 180], [0.5, 0.3], 0.04),
             "high throughout": np.full(N, 0.4)}[shape] + 0.01 * rng.random(N)
    ranks = {r: [*moe_rows(rng), ("communication", "cross_cabinet_share", "", share)] for r in (0, 1)}
    d = run_and_diagnose(tmp_path, th, ranks)
    assert "CrossCabinetTraffic" in d.judged
    if onset is None:
        assert "CrossCabinetTraffic" not in symptoms(d)
        return
    f = finding(d, "CrossCabinetTraffic")
    assert f.onset_step == onset and f.evidence["share"] == pytest.approx(float(np.median(share[onset:])), abs=0.01)


def test_hardware_counters(tmp_path, th, rng):
    rows = [("hardware", "util_pct", "device:0", 30 + rng.random(N)),
            ("hardware", "mem_used_bytes", "device:0", np.full(N, 79e9)),
            ("hardware", "mem_total_bytes", "device:0", np.full(N, 80e9)),
            ("hardware", "clock_mhz", "device:0", np.where(np.arange(N) > 100, 1400.0, 1980.0)),
            ("hardware", "temp_c", "device:0", np.full(N, 88.0))]
    d = run_and_diagnose(tmp_path, th, {0: rows}, meta={"device_kind": "cuda"})
    assert {"LowAcceleratorUtilization", "MemoryPressure", "ThermalThrottling"} <= symptoms(d)
    assert finding(d, "ThermalThrottling").evidence["clock_deficit"] > 0.1


def test_balance_loss_negligible_only_without_a_balancing_term(tmp_path, th, rng):
    def rows(coeff):
        base = moe_rows(rng)
        loss = next(v for _d, m, _e, v in base if m == "loss")
        return [*base, ("convergence", "aux_loss", "", coeff * (1.0 + 0.2 * rng.random(loss.size)))]

    d = run_and_diagnose(tmp_path / "usual", th, {0: rows(1e-2)})
    assert "BalanceLossNegligible" in d.judged and "BalanceLossNegligible" not in symptoms(d)
    f = finding(run_and_diagnose(tmp_path / "off", th, {0: rows(0.0)}), "BalanceLossNegligible")
    assert f.evidence["aux_share_of_loss"] == 0.0 and f.severity == 1.0
    weak = finding(run_and_diagnose(tmp_path / "weak", th, {0: rows(1e-4)}), "BalanceLossNegligible")
    assert 0.5 < weak.severity < 1.0 and weak.evidence["aux_share_of_loss"] < th["moe.balance_loss.max_share"]
    d = run_and_diagnose(tmp_path / "unlogged", th, {0: moe_rows(rng)})
    assert "BalanceLossNegligible" not in d.judged


@pytest.mark.parametrize("moe, found", [
    ({"aux_loss_coeff": 0.0, "aux_loss_coeff_from": "config.moe_aux_loss_coeff"}, True),  # Megatron's default
    ({"load_balancing": "none", "aux_loss_coeff": 0.01}, True),
    ({"aux_loss_coeff": 0.01}, False),
    ({"aux_loss_coeff": 0.0, "expert_bias": True}, None),  # DeepSeek-V3's bias balancing: not judged
    ({}, None)])
def test_the_balancing_term_read_from_the_runs_configuration(tmp_path, th, rng, moe, found):
    """With no balancing term logged, run.json's ``moe`` section (a Megatron argument dump, the transformers
    callback's record of the forward's aux_loss) says whether the router gets a balancing gradient."""
    d = run_and_diagnose(tmp_path, th, {0: moe_rows(rng)}, meta={"moe": moe})
    judged = [f for f in d.findings if f.detector == "moe.balance_config"]
    if found is None:
        assert not judged and "BalanceLossNegligible" not in symptoms(d)
        return
    assert bool(judged) is found
    if found:
        assert judged[0].severity == 1.0 and judged[0].evidence["configured"]


def test_a_balancing_term_negligible_in_itself_once_the_loss_has_fallen(tmp_path, th, rng):
    """A classifier's loss falls a hundredfold: a coefficient of 1e-4 is then a large share of it, yet the term
    (coefficient times a balance loss of about 1) still bounds the coefficient far below the 1e-3 in common use."""
    def rows(coeff):
        base = [r for r in moe_rows(rng) if r[1] != "loss"]
        loss = 2.0 * np.exp(-np.arange(N) / (N / 6)) + 0.004
        return [*base, ("convergence", "loss", "", loss),
                ("convergence", "aux_loss", "", coeff * (1.0 + 0.2 * rng.random(N)))]

    weak = finding(run_and_diagnose(tmp_path / "weak", th, {0: rows(1e-4)}), "BalanceLossNegligible")
    assert weak.evidence["aux_share_of_loss"] > th["moe.balance_loss.max_share"]  # the share alone misses it
    assert weak.evidence["aux_loss"] < th["moe.balance_loss.max_term"]
    d = run_and_diagnose(tmp_path / "mixtral", th, {0: rows(1e-3)})  # Mixtral's coefficient
    assert "BalanceLossNegligible" in d.judged and "BalanceLossNegligible" not in symptoms(d)


def test_underconfident_only_where_the_loss_stays_above_the_squashed_floor(tmp_path, th, rng):
    """Ten classes: a softmax fed to cross-entropy cannot take the loss below ln(1 + 9/e) = 1.46. A run at 85%
    accuracy whose loss stays near 1.7 is squashed; one at the same accuracy whose loss fell to 1.0 is a model
    still learning (its logits small, its loss above Fano's bound, yet below anything a squashed output reaches)."""
    t = np.arange(N)
    acc = 0.1 + 0.75 * (1 - np.exp(-t / 40))

    def run(name, end):
        loss = end + (2.3 - end) * np.exp(-t / 40) + 0.01 * rng.standard_normal(N)
        rows = classifier_rows(rng, loss=loss) + [("convergence", "accuracy", "", acc)]
        return run_and_diagnose(tmp_path / name, th, {0: rows})

    squashed = finding(run("squashed", 1.7), "UnderconfidentOutputs")
    assert squashed.evidence["classes_estimate"] == pytest.approx(10, abs=0.5)
    learning = run("learning", 1.0)
    assert "UnderconfidentOutputs" in learning.judged and "UnderconfidentOutputs" not in symptoms(learning)
