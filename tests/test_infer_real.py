"""Root cause on real trainings: small CPU runs with an injected fault (the fault benchmark's injections)
are diagnosed through the public API and the injected cause must come first; a healthy run gets none."""

from __future__ import annotations

import pytest
import torch

from debugtune.api import diagnose
from debugtune.scenarios.faults import injection
from debugtune.scenarios.programs import run
from tests.diagnose_helpers import knowledge_store


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.mark.parametrize("program, fault, severity, seed, symptom", [
    ("digits_mlp", "MissingZeroGrad", "mild", 0, "GradNormSawtooth"),
    ("blobs_mlp", "LearningRateTooLow", "severe", 0, "UpdateRatioTooLow"),
    ("digits_mlp", "LossActivationMismatch", "mild", 0, "UnderconfidentOutputs"),
    ("digits_mlp", "LabelNoise", "severe", 0, "ValidationAboveTraining"),
    ("circles_mlp", "UnnormalizedInputs", "severe", 1, "GradientExplosion"),
    ("blobs_mlp", "LearningRateTooHigh", "severe", 1, "UpdateRatioTooHigh"),
])
def test_the_injected_cause_comes_first(tmp_path, program, fault, severity, seed, symptom):
    run(program, injection(fault).resolve(program, severity), seed=seed, run_dir=tmp_path / "run", probe=True)
    report = diagnose(tmp_path / "run", store=knowledge_store(), save=False)
    assert report.hypotheses, report.as_dict()
    top = report.hypotheses[0]
    assert top.cause == fault, [(h.cause, h.confidence) for h in report.hypotheses]
    assert symptom in {f.symptom for f in report.findings}
    assert top.chain[0] == fault and any(f.startswith(symptom) for f in top.findings)


def test_a_healthy_training_gets_no_hypothesis(tmp_path):
    run("digits_mlp", {}, seed=0, run_dir=tmp_path / "run", probe=True)
    report = diagnose(tmp_path / "run", store=knowledge_store(), save=False)
    assert report.hypotheses == [], [(h.cause, h.confidence) for h in report.hypotheses]
