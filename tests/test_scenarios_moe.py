"""The MoE scenario: the seed scenario's biased gate shows imbalance and a vanishing router gradient; the
remedy parameters (applied from the start or from an early checkpoint) restore balance; replay is exact."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pytest
import torch

from debugtune.engine.telemetry import read_telemetry
from debugtune.scenarios.moe import (
    REMEDY,
    MoEConfig,
    apply_overrides,
    build_moe,
    expert_balance,
    seed_scenario,
    train_moe,
    train_step,
)

torch.set_num_threads(1)


def test_seed_scenario_is_imbalanced_with_a_vanishing_router_gradient():
    biased = train_moe(seed_scenario(), steps=40)
    healthy = train_moe(MoEConfig(), steps=40)
    assert biased.expert_cv > 2.0 > 1.0 > healthy.expert_cv
    assert biased.balance()["max_vio"] > 5.0
    top = biased.tokens_per_expert.argmax(axis=1)
    assert (top == 0).all(), "expert 0 (the biased one) takes the most tokens at every step"
    assert np.median(biased.router_grad_norm) < 1e-3 * np.median(healthy.router_grad_norm)
    assert biased.dropped_frac.mean() > 0.5 > healthy.dropped_frac.mean()
    assert biased.final_loss > healthy.final_loss


@pytest.mark.parametrize("at_step", [0, 20])
def test_remedy_restores_balance(at_step):
    job = build_moe(seed_scenario())
    if at_step:
        train_moe(job.cfg, steps=at_step, job=job)
    apply_overrides(job, REMEDY)
    assert job.cfg.gate_bias == 0.0 and float(job.model.blocks[0].moe.router.gate.bias.detach().abs().max()) == 0.0
    res = train_moe(job.cfg, steps=120, job=job)
    assert res.balance(window=0.5)["cv"] < 0.8
    assert res.balance(window=0.5)["entropy"] > 0.85


def test_replay_from_a_checkpoint_is_bitwise_identical():
    job = build_moe(seed_scenario(steps=20))
    train_moe(job.cfg, steps=10, job=job)
    state = {"model": copy.deepcopy(job.model.state_dict()), "opt": copy.deepcopy(job.optimizer.state_dict()),
             "sampler": job.sampler.state_dict(), "rng": torch.get_rng_state(), "step": job.step}

    def replay() -> list[float]:
        j = build_moe(job.cfg)
        j.model.load_state_dict(state["model"])
        j.optimizer.load_state_dict(copy.deepcopy(state["opt"]))  # Adam would update the saved moments in place
        j.sampler.load_state_dict(state["sampler"])
        j.step = state["step"]
        torch.set_rng_state(state["rng"])
        apply_overrides(j, {"gate_init_std": 0.02, "aux_loss_coeff": 3e-2, "lr": 1e-3})
        return [train_step(j)["loss"] for _ in range(5)]

    a, b = replay(), replay()
    assert a == b
    assert len(set(a)) == 5


def test_apply_overrides_rejects_unknown_names():
    job = build_moe(MoEConfig(steps=1))
    with pytest.raises(ValueError, match="unknown MoE override"):
        apply_overrides(job, {"gate_std": 0.1})


def test_expert_balance_definitions():
    even = expert_balance(np.full(8, 10))
    assert even == {"cv": 0.0, "max_vio": 0.0, "entropy": pytest.approx(1.0)}
    one = expert_balance(np.array([[8, 0, 0, 0], [8, 0, 0, 0]]))
    assert one["cv"] == pytest.approx(np.sqrt(3)) and one["max_vio"] == pytest.approx(3.0)
    assert one["entropy"] == 0.0
    with pytest.raises(ValueError):
        expert_balance(np.array([3]))


def test_probe_records_tokens_per_expert_and_router_gradient(tmp_path):
    cfg = seed_scenario(steps=6)
    res = train_moe(cfg, run_dir=tmp_path, probe=True)
    tel = read_telemetry(tmp_path, metrics=["expert_tokens", "router_grad_norm", "aux_loss", "loss"])
    steps, experts, grid = tel.pivot("expert_tokens")
    assert experts == [f"blocks.0.moe.router/expert:{i}" for i in range(cfg.num_experts)]
    np.testing.assert_array_equal(grid, res.tokens_per_expert)
    _, rg = tel.series("router_grad_norm", "blocks.0.moe.router")
    assert len(rg) == 6 and np.all(rg < 1e-4)
    _, loss = tel.series("loss")
    np.testing.assert_array_equal(loss, res.losses)


def test_config_is_frozen():
    cfg = MoEConfig()
    with pytest.raises(AttributeError):
        cfg.lr = 1.0  # type: ignore[misc]
    assert replace(cfg, lr=1.0).lr == 1.0


def test_the_moe_lm_program_is_the_seed_scenario_training():
    """The benchmark's moe_lm (shared harness) trains exactly what ``train_moe`` trains (the demo's path)."""
    from debugtune.scenarios.programs import run

    for gate_bias in (0.0, 16.0):
        direct = train_moe(MoEConfig(steps=15, gate_bias=gate_bias, gate_bias_experts=1))
        program = run("moe_lm", {"steps": 15, "gate_bias": gate_bias, "gate_bias_experts": 1})
        np.testing.assert_array_equal(program.series["loss"], direct.losses)
        np.testing.assert_array_equal(program.series["tokens_per_expert"], direct.tokens_per_expert)
        np.testing.assert_array_equal(program.series["router_grad_norm"], direct.router_grad_norm)


def test_the_gate_learning_rate_multiplier_is_opt_in_and_survives_a_learning_rate_override():
    assert len(build_moe(MoEConfig()).optimizer.param_groups) == 1  # off: one group, today's optimizer
    job = build_moe(MoEConfig(gate_lr_scale=10.0))
    rest, gate = job.optimizer.param_groups
    assert gate["lr"] == pytest.approx(10 * rest["lr"])
    gate_params = {id(p) for _, r in job.model.routers() for p in r.gate.parameters()}
    assert {id(p) for p in gate["params"]} == gate_params
    apply_overrides(job, {"lr": 1e-3})
    assert (rest["lr"], gate["lr"]) == (pytest.approx(1e-3), pytest.approx(1e-2))


def test_the_locality_prior_keeps_a_small_gate_s_dispatch_in_the_token_s_cabinet():
    base = MoEConfig(cabinets=4, cycle_steps=128, cycle_skew=3.0)
    free = train_step(build_moe(base))["cross_cabinet_share"]
    local = train_step(build_moe(replace(base, locality_prior=3.0)))["cross_cabinet_share"]
    assert free > 0.5  # a gate of std 0.02 routes at random: about 3 tokens in 4 leave their cabinet
    assert local == 0.0


def test_cabinet_limited_routing_sends_only_the_overflow_across_cabinets():
    base = MoEConfig(cabinets=4, num_experts=16, cycle_steps=128, cycle_skew=3.0, cabinet_limited=True)
    roomy = train_step(build_moe(replace(base, capacity_factor=4.0)))
    assert roomy["cross_cabinet_share"] == 0.0 and roomy["dropped_frac"] == 0.0  # every token stays home
    job = build_moe(replace(base, capacity_factor=1.0))
    tight = train_step(job)
    layer = job.model.moe_layers()[0]
    st, cap = layer.routed(), layer.capacity(base.batch_size * base.seq_len)
    overflow = int(np.maximum(st.tokens - cap, 0).sum())
    assert overflow > 0 and st.remote == overflow - st.dropped  # exactly the overflow crossed (or was dropped)
    assert st.dispatched == base.batch_size * base.seq_len - st.dropped
    assert tight["cross_cabinet_share"] == pytest.approx(st.remote / st.dispatched)
