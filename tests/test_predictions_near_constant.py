"""PredictionsNearConstant (engine/diagnose/outputs.py, ``convergence.explained``): a model whose predictions
explain almost none of its targets' variance, read from the outputs' spread against a squared-error loss, on
real trainings; and not judged where the loss is a classification loss."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.nn import functional as F  # noqa: E402

from debugtune.engine.diagnose import diagnose_run  # noqa: E402
from tests.test_output_reach import Regressor, _regression  # noqa: E402
from tests.test_probe_evidence import mlp, train  # noqa: E402

SYMPTOM = "PredictionsNearConstant"


def _found(tmp_path, th, name, model, *, lr=1e-2, **kw):
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    train(tmp_path / name, model, opt, th, steps=120, detail_every=4, **kw)
    return diagnose_run(tmp_path / name, th, ["convergence"])


def test_a_regression_that_learns_is_not_flagged(tmp_path, th):
    found = _found(tmp_path, th, "learns", Regressor(), data=_regression(), loss_fn=F.mse_loss)
    assert SYMPTOM in found.judged
    assert SYMPTOM not in {f.symptom for f in found.findings}


def test_a_regression_that_can_only_learn_its_mean_is_flagged(tmp_path, th):
    """Every weight frozen and the output layer's zeroed: only the output bias learns, the targets' mean."""
    model = Regressor()
    with torch.no_grad():
        model.body[2].weight.zero_()
    for name, p in model.named_parameters():
        p.requires_grad_(name == "body.2.bias")
    found = _found(tmp_path, th, "mean", model, data=_regression(), loss_fn=F.mse_loss)
    hits = [f for f in found.findings if f.symptom == SYMPTOM]
    assert hits and hits[0].evidence["explained_share"] < 0.01, [f.evidence for f in hits]


def test_a_classifier_is_not_judged(tmp_path, th):
    found = _found(tmp_path, th, "classifier", mlp())
    assert SYMPTOM not in found.judged
