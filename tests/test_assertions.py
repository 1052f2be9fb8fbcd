"""Findings, hypotheses and experiments written into a run graph read back unchanged."""

from __future__ import annotations

import pytest

from debugtune.kg import open_store
from debugtune.kg.assertions import (
    add_experiments,
    read_experiments,
    read_findings,
    read_hypotheses,
    replace_diagnosis,
    runs,
)
from debugtune.kg.namespaces import check_run_id, run_graph
from debugtune.kg.records import CorrelationEdge, Experiment, Finding, Hypothesis, location_kind

FINDINGS = [
    Finding("RouterGradVanishing@layers.0.router#12", "RouterGradVanishing", "gradient", "layers.0.router", 12, 200,
            0.9, {"router_grad_norm": 2e-6, "ratio": 1e-4}, "gradient.router_vanishing", 14),
    Finding("ExpertImbalance@layers.0.router/expert:3#40", "ExpertImbalance", "convergence",
            "layers.0.router/expert:3", 40, 300, 0.8, {"cv": 1.8, "share": 0.71}, "convergence.experts"),
    Finding("LossOscillation@#60", "LossOscillation", "convergence", "", 60, 300, 0.6,
            {"period": 24.0, "amplitude": 0.35}, "convergence.oscillation", 90),
]
HYPOTHESES = [
    Hypothesis("GateInitBias", 0.93, ("GateInitBias", "RouterGradVanishing", "ExpertImbalance", "LossOscillation"),
               tuple(f.id for f in FINDINGS), 'Router "init" <b>bias</b>\nline two', rank=1),
    Hypothesis("AuxLossDisabled", 0.04, ("AuxLossDisabled", "ExpertImbalance"), (FINDINGS[1].id,), "less likely",
               rank=2),
]


def test_diagnosis_round_trip_and_replace():
    store = open_store(None)
    edges = [CorrelationEdge(FINDINGS[0].id, FINDINGS[1].id, 28, 0.81)]
    replace_diagnosis(store, "moe-1", {"run_dir": "/tmp/x", "steps": 300, "world_size": 1}, FINDINGS, edges, HYPOTHESES)
    assert read_findings(store, "moe-1") == sorted(FINDINGS, key=lambda f: (f.onset_step, f.id))
    assert read_hypotheses(store, "moe-1") == HYPOTHESES
    assert store.query("ASK { ?e a dt:CorrelationEdge ; dt:lagSteps 28 }").value
    # replacing keeps experiments but drops the old diagnosis
    add_experiments(store, "moe-1", [Experiment("e1", "RouterInitRescale", {"init_std": 0.02, "opt": "adam"},
                                                {"expert_cv": 0.1, "loss": 2.0}, 0.5, 7, "ok", "ckpt-40")])
    replace_diagnosis(store, "moe-1", {"steps": 300}, FINDINGS[:1], (), HYPOTHESES[1:])
    assert [f.id for f in read_findings(store, "moe-1")] == [FINDINGS[0].id]
    assert [h.cause for h in read_hypotheses(store, "moe-1")] == ["AuxLossDisabled"]
    assert not store.query("ASK { ?e a dt:CorrelationEdge }").value
    [(run, exp)] = read_experiments(store)
    assert run == "moe-1" and exp.parameters == {"init_std": 0.02, "opt": "adam"}
    assert exp.objectives == {"expert_cv": 0.1, "loss": 2.0} and exp.replay_ref == "ckpt-40"
    assert runs(store)[0]["run"] == "moe-1"
    assert store.graphs() == [run_graph("moe-1")]


def test_findings_are_sosa_observations_with_provenance():
    store = open_store(None)
    replace_diagnosis(store, "r", {}, FINDINGS, (), HYPOTHESES)
    assert store.query("SELECT ?f WHERE { ?f a sosa:Observation ; sosa:hasFeatureOfInterest ?r }").__len__() == 3
    derived = store.query("SELECT ?f WHERE { ?h a dt:Hypothesis ; dt:hypothesisRank 1 ; prov:wasDerivedFrom ?f }")
    assert len(derived) == 3


@pytest.mark.parametrize("bad", ["", "a b", "../x", "x>y", "a" * 200])
def test_run_ids_are_checked(bad):
    with pytest.raises(ValueError):
        check_run_id(bad)


def test_location_kinds():
    assert [location_kind(e) for e in ("", "layers.1.fc", "moe/expert:2", "rank:5", "link:0-1", "device:npu0")] == [
        "run", "layer", "expert", "rank", "link", "device"]
