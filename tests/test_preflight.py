"""Preflight at attach: the knowledge base's initialisation checks on the live model, before step 1. Every check
fails on a model that has its symptom and passes on one that does not (the contract, over the CHECKS table);
`attach(..., preflight=True)` stops a biased router before anything is attached or written."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch

import debugtune
from debugtune.engine.prevent.preflight import CHECKS, PreflightError, preflight, routers
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge, thresholds
from debugtune.scenarios.moe import MoEConfig, build_moe, seed_scenario


@pytest.fixture(scope="module")
def store():
    st = open_store(None)
    load_knowledge(st)
    return st


def _dense() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_each_check_fails_on_its_symptom_and_passes_without_it(check, store):
    assert check.threshold_key in thresholds(store)
    biased = build_moe(seed_scenario(seed=3)).model
    healthy = build_moe(replace(MoEConfig(), seed=3)).model
    found = preflight(biased, store, checks=[check])
    assert [f.symptom for f in found.findings] == [check.symptom]
    assert found.findings[0].causes[0] == "GateInitBias" and found.findings[0].fix
    assert preflight(healthy, store, checks=[check]).ok
    assert preflight(_dense(), store, checks=[check]).ok and preflight(_dense(), store).judged[check.id] == ()


def test_routers_are_found_by_path_not_by_any_gate():
    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = torch.nn.Linear(4, 8)  # a gated MLP, not a router

    assert routers(Gated()) == []
    assert [n for n, _ in routers(build_moe(MoEConfig()).model)] == ["blocks.0.moe.router.gate"]


def test_attach_with_preflight_stops_a_biased_router_before_step_one(tmp_path, store):
    job = build_moe(seed_scenario(seed=5))
    with pytest.raises(PreflightError, match="RouterBiasedAtInit") as err:
        debugtune.attach(job.model, job.optimizer, tmp_path / "run", preflight=True, store=store, hardware=False)
    assert err.value.result.findings[0].value == pytest.approx(16.0)
    assert not (tmp_path / "run").exists()  # nothing attached, nothing written
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probe = debugtune.attach(job.model, job.optimizer, tmp_path / "warned", preflight="warn", store=store,
                                 hardware=False)
        probe.close()
    assert any("RouterBiasedAtInit" in str(w.message) for w in caught)
    healthy = build_moe(MoEConfig())
    debugtune.attach(healthy.model, healthy.optimizer, tmp_path / "ok", preflight=True, store=store,
                     hardware=False).close()
    with pytest.raises(ValueError, match="preflight must be"):
        debugtune.attach(healthy.model, healthy.optimizer, tmp_path / "x", preflight="maybe")
