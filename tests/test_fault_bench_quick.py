"""The fault benchmark: its criteria and scoring on hand-made outcomes, and the quick subset end to end
(real trainings with the probe, debugtune and the AutoTrainer baseline) against issue 4's goals."""

from __future__ import annotations

import numpy as np
import pytest

from bench.faults import criteria
from bench.faults.diagnosis import Ranked
from bench.faults.matrix import QUICK_FAMILIES, Cell, full_matrix, quick_matrix
from bench.faults.score import Judged, score
from debugtune.scenarios.faults import FAULTS
from debugtune.scenarios.programs import Outcome

FLOORS = {"macro_top1": 0.65, "macro_top3": 0.70, "fpr": 1 / 15, "ece": 0.30}
"""Regression floors of the quick subset held out by family (measured 0.75 / 0.75 / 0 / 0.22 on 8 families when
they were set, see docs/faults.md). They are not the issue's goals: one seed and one severity leave each fold's
calibration a single run per cause and 13-15 controls for its leaks, so the goals (top-1 0.85, top-3 0.95,
FPR 3%, ECE 0.08) are judged on the full matrix by ``python -m bench.faults``."""


def _outcome(loss, **summary) -> Outcome:
    loss = np.asarray(loss, dtype=float)
    return Outcome("digits_mlp", {"loss": loss}, {"chance_loss": np.log(10), **summary})


def test_criteria_file_is_complete_and_valid():
    specs = criteria.load()
    names = {c.name for c in full_matrix()}
    assert names <= set(specs), f"criteria missing for {sorted(names - set(specs))}"


def test_criteria_decide_from_the_programs_outputs():
    healthy = _outcome(np.linspace(2.3, 0.01, 100))
    assert criteria.check("LearningRateTooHigh", _outcome([2.3] * 50 + [np.nan] * 50), healthy, 0).manifested
    assert criteria.check("LearningRateTooLow", _outcome(np.linspace(2.3, 1.0, 100)), healthy, 0).manifested
    assert not criteria.check("LearningRateTooLow", _outcome(np.linspace(2.3, 0.02, 100)), healthy, 0).manifested
    assert criteria.check("DyingReLU", _outcome([1.0] * 10, dead_frac=0.7), healthy, 0).manifested
    assert not criteria.check("DyingReLU", _outcome([1.0] * 10, dead_frac=0.2), healthy, 0).manifested
    flat = np.full(100, 0.1)
    damaged = flat.copy()
    damaged[40], damaged[41:80] = 50.0, 0.5
    recovered = flat.copy()
    recovered[40] = 0.5
    assert criteria.check("BadBatch", _outcome(damaged), healthy, 40).manifested
    assert not criteria.check("BadBatch", _outcome(recovered), healthy, 40).manifested
    assert criteria.check("RecoveringSpike", _outcome(recovered), _outcome(flat), 40).manifested
    with pytest.raises(criteria.CriteriaError, match="no criterion"):
        criteria.check("CosmicRays", healthy, healthy, 0)


def test_criteria_generalise_across_objectives():
    """Chance losses of other units are rescaled; look-alike criteria read the program's own figures."""
    healthy = Outcome("digits_ae", {"loss": np.linspace(1.0, 0.4, 100)}, {"chance_loss": 1.0})
    raw = Outcome("digits_ae", {"loss": np.full(100, 30.0)}, {"chance_loss": 100.0})  # 0.3 in healthy units
    assert not criteria.check("UnnormalizedInputs", raw, healthy, 0).manifested
    raw_bad = Outcome("digits_ae", {"loss": np.full(100, 90.0)}, {"chance_loss": 100.0})
    assert criteria.check("UnnormalizedInputs", raw_bad, healthy, 0).manifested
    assert criteria.check("Healthy", healthy, healthy, 0).manifested
    assert not criteria.check("Healthy", _outcome(np.full(100, 2.2)), healthy, 0).manifested
    told = Outcome("gan", {"loss": np.ones(10)}, {"learned": False, "why": "mode collapse"})
    assert criteria.check("Healthy", told, told, 0) == criteria.Verdict(False, "mode collapse")
    flat = _outcome(np.linspace(2.3, 0.1, 100))
    accum = _outcome(np.linspace(2.3, 0.1, 100), backwards_per_step=4)
    assert criteria.check("GradientAccumulation", accum, flat, 0).manifested
    assert not criteria.check("GradientAccumulation", _outcome(flat.series["loss"], backwards_per_step=1), flat,
                              0).manifested
    moved = _outcome(flat.series["loss"], backbone_max_change=1e-3)
    assert not criteria.check("FrozenBackbone", moved, flat, 0).manifested
    assert criteria.check("FrozenBackbone", _outcome(flat.series["loss"], backbone_max_change=0.0), flat,
                          0).manifested
    moe = _outcome(flat.series["loss"], expert_step_cv_last_half=0.8)
    assert criteria.check("HealthyImbalancedMoE", moe, _outcome(flat.series["loss"], expert_step_cv_last_half=0.4),
                          0).manifested


def test_matrices_cover_the_families():
    full = full_matrix()
    for f in FAULTS.values():
        cells = [c for c in full if c.name == f.name]
        assert len(cells) == len(f.programs) * 2 * 3, f.name
    families = {c.family for c in full}
    assert len({c.family for c in full if c.is_fault}) >= 12
    assert {c.family for c in full if c.name == "Healthy"} == families
    quick = quick_matrix()
    assert len({c.family for c in quick}) >= 4
    assert {c.severity for c in quick if c.is_fault} == {"severe"} and {c.seed for c in quick} == {0}
    quick_families = {c.family for c in quick}
    for f in FAULTS.values():
        reachable = {c.family for c in full if c.name == f.name} & set(QUICK_FAMILIES)
        got = {c.family for c in quick if c.name == f.name}
        assert len(got) >= min(2, len(reachable)) and got, f.name
    assert {c.program for c in quick if c.name == "Healthy"} == {c.program for c in quick}
    assert quick_families <= set(QUICK_FAMILIES)
    assert all(c.label()["family"] == c.family for c in quick)


def test_malformed_criteria_name_the_entry(tmp_path):
    bad = tmp_path / "criteria.yaml"
    bad.write_text("faults:\n  DyingReLU:\n    dead_unitz: {min: 0.5}\n")
    with pytest.raises(criteria.CriteriaError, match="DyingReLU: unknown criterion kind 'dead_unitz'"):
        criteria.load(bad)


def test_run_ids_do_not_reveal_the_fault():
    cells = quick_matrix()
    ids = [c.run_id for c in cells]
    assert len(set(ids)) == len(ids)
    for c in cells:
        assert c.name.lower() not in c.run_id.lower() and c.program not in c.run_id


def test_scoring_is_macro_over_fault_types():
    def cell(name: str, seed: int = 0, kind: str = "fault") -> Cell:
        return Cell(kind, name, "digits_mlp", "severe", seed)

    judged = [
        Judged(cell("DyingReLU", 0), True, "", {"debugtune": Ranked(("DyingReLU",), detection={"DyingReLU": 7})}),
        Judged(cell("DyingReLU", 1), True, "", {"debugtune": Ranked(("BadWeightInit", "DyingReLU"))}),
        Judged(cell("LabelNoise"), True, "", {"debugtune": Ranked(("LabelNoise",), detection={"LabelNoise": 3})}),
        Judged(cell("BadBatch"), False, "no spike", {}),
        Judged(Cell("control", "Healthy", "digits_mlp", "mild", 0), True, "", {"debugtune": Ranked(())}),
        Judged(Cell("control", "Healthy", "blobs_mlp", "mild", 0), True, "",
               {"debugtune": Ranked(("LearningRateTooHigh",))}),
    ]
    s = score(judged, "debugtune")
    assert s["faults"]["DyingReLU"] == {"total": 2, "manifested": 2, "top1": 0.5, "top3": 1.0, "median_delay": 7.0,
                                         "errors": 0}
    assert s["macro_top1"] == pytest.approx(0.75) and s["macro_top3"] == 1.0
    assert s["faults"]["BadBatch"]["manifested"] == 0 and s["fpr"] == 0.5
    assert s["median_delay"] == 5.0


def test_quick_benchmark_leave_one_family_out(quick_bench):
    """The quick subset end to end (real trainings with the probe): every run manifests, both diagnosers answer,
    and the figures held out by family stay above their floors; the in-distribution figures are never asserted."""
    res = quick_bench
    apart = [f"{j.cell}: {j.why}" for j in res.judged if not j.manifested and j.cell.is_fault]
    assert not apart, f"quick-subset faults that did not manifest: {apart}"
    controls = [j for j in res.judged if not j.cell.is_fault]
    assert sum(not j.manifested for j in controls) <= 1, "more than one look-alike did not look like what it imitates"
    dt, at = res.figures["debugtune"], res.figures["autotrainer"]
    errors = sum(f["errors"] for f in dt["faults"].values()) + dt["controls"]["errors"]
    assert errors == 0, "debugtune.diagnose failed on some runs (see results-quick.json)"
    assert at["faults"]["DyingReLU"]["top1"] > 0, "the AutoTrainer port finds a dying-ReLU run"
    lofo = res.lofo.pooled
    assert len(res.lofo.folds) >= 4, "the quick subset covers at least four families"
    misses = {c: f"{a}/{n}" for c, (a, _, n) in lofo.per_cause.items() if a < n}
    assert lofo.top1 >= FLOORS["macro_top1"], f"held-out top-1 {lofo.top1:.2f}; missed: {misses}"
    assert lofo.top3 >= FLOORS["macro_top3"], f"held-out top-3 {lofo.top3:.2f}"
    assert lofo.fpr <= FLOORS["fpr"], f"held-out false positives: {lofo.false_positives}"
    assert lofo.ece <= FLOORS["ece"], f"held-out ECE {lofo.ece:.3f}: {lofo.bins}"
    assert lofo.top1 > at["macro_top1"] and lofo.fpr <= at["fpr"] + FLOORS["fpr"]
    assert (res.out / "results-quick.json").is_file()
