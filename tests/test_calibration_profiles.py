"""The calibration fits one profile per cause, program family and severity, so that which symptoms go together in
one kind of model is not blurred by another's (bench/faults/calibration.py)."""

from __future__ import annotations

import dataclasses

import pytest

from bench.faults.calibration import Sample, fit, presentation
from debugtune.engine.infer import load_model
from debugtune.kg.records import Finding
from tests.diagnose_helpers import knowledge_store, thresholds

JUDGED = frozenset({"ForwardSignalVanishing", "InitWeightsTooLarge", "LossPlateau", "ExpertImbalance",
                    "SquashBeforeLogitLoss"})


def _sample(family: str, seed: int, symptoms: tuple[str, ...], truth: str | None = "BadWeightInit") -> Sample:
    findings = tuple(Finding(f"{s}@{seed}", s, "gradient", "", 0, 99, 0.9, {}, detector="test") for s in symptoms)
    return Sample(f"{family}-{seed}-{truth}", truth, truth or "Healthy", f"{family}_prog", family, "mild", seed,
                  findings, JUDGED, (), (), 100, 0)


@pytest.fixture(scope="module")
def fitted():
    # a too-small init on plain-SGD MLPs starves the forward signal; a too-large one on MoE LMs imbalances the
    # experts and shows its own scale; no run shows both presentations
    runs = [_sample("mlp", i, ("ForwardSignalVanishing", "LossPlateau")) for i in range(3)]
    runs += [_sample("moe_top1", i, ("InitWeightsTooLarge", "ExpertImbalance")) for i in range(3)]
    runs += [_sample("mlp", 10 + i, (), truth=None) for i in range(12)]
    return fit(runs, load_model(knowledge_store()), thresholds())


def test_each_family_gets_its_own_presentation(fitted):
    profiles = fitted.profiles["BadWeightInit"]
    assert set(profiles) == {"mlp-mild", "moe_top1-mild"}
    small, large = profiles["mlp-mild"], profiles["moe_top1-mild"]
    # each presentation keeps its own symptoms together (pooled, every rate would be near one half)
    assert small["ForwardSignalVanishing"] > 0.5 > small["InitWeightsTooLarge"]
    assert large["InitWeightsTooLarge"] > 0.5 > large["ForwardSignalVanishing"]
    assert large["ExpertImbalance"] > 0.5 > small["ExpertImbalance"]


def test_a_run_without_a_family_falls_back_to_its_severity():
    assert presentation(_sample("", 0, ())) == "mild"
    assert presentation(_sample("cnn", 0, ())) == "cnn-mild"


def test_a_symptom_that_observes_its_mechanism_has_its_own_leak_floor(fitted):
    """Healthy runs never show either symptom; the general floor stands for causes outside the knowledge base, which
    a squash measured in the loss's own gradient does not have (cases/thresholds/engine.ttl)."""
    th = thresholds()
    assert fitted.leaks["LossPlateau"][0] == th["infer.leak_floor"] == 0.05
    assert fitted.leaks["SquashBeforeLogitLoss"][0] == th["infer.leak_floor.SquashBeforeLogitLoss"] < 0.05


def test_one_run_of_three_is_an_anecdote_not_a_measured_link():
    """BadWeightInit has no authored link to SquashBeforeLogitLoss. One run of a kind that shows it gives a rate of
    a third, above the link's minimum rate, but no link; two runs of three give one (calibration.link_min_runs)."""
    model, th = load_model(knowledge_store()), thresholds()
    assert not any(link.target == "SquashBeforeLogitLoss" for link in model.children["BadWeightInit"])
    healthy = [_sample("mlp", 10 + i, (), truth=None) for i in range(12)]

    def linked(hits: int) -> bool:
        runs = [_sample("mlp", i, ("LossPlateau", "SquashBeforeLogitLoss") if i < hits else ("LossPlateau",))
                for i in range(3)]
        runs = [dataclasses.replace(r, findings=tuple(dataclasses.replace(f, severity=1.0) for f in r.findings))
                for r in runs]  # at full strength: hits count whole runs
        return ("BadWeightInit", "SquashBeforeLogitLoss") in fit(runs + healthy, model, th).links

    assert 1 / 3 >= th["calibration.link_min_rate"]
    assert not linked(1) and linked(2)
