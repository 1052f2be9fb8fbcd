"""Whether the model is a mixture of experts (engine/diagnose/model_kind.py), read from what a real probe wrote, and
what an undetermined report asks a dense model to record: never an MoE's metrics."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from debugtune.engine.diagnose.model_kind import shows_experts  # noqa: E402
from debugtune.engine.infer.causal import activation  # noqa: E402
from debugtune.engine.infer.engine import rank  # noqa: E402
from debugtune.engine.telemetry import read_run_json, read_telemetry  # noqa: E402
from tests.test_infer import f  # noqa: E402
from tests.test_probe_evidence import mlp, train  # noqa: E402
from tests.test_specific_evidence import DENSE  # noqa: E402


class _Experts(torch.nn.Module):
    """Two expert MLPs picked by a hand-written arg-max, no router the probe is told about."""

    def __init__(self) -> None:
        super().__init__()
        self.pick = torch.nn.Linear(16, 2)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(16, 4) for _ in range(2))

    def forward(self, x):
        choice = self.pick(x).argmax(dim=1)
        return torch.where(choice[:, None] == 0, self.experts[0](x), self.experts[1](x))


def _kind(tmp_path, name, model, th):
    train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=4)
    return shows_experts(read_run_json(tmp_path / name), read_telemetry(tmp_path / name).metrics())


def test_a_probe_tells_a_dense_model_from_one_with_experts(tmp_path, th):
    assert _kind(tmp_path, "dense", mlp(), th) is False
    assert _kind(tmp_path, "experts", _Experts(), th) is True
    assert shows_experts({}, {"loss", "grad_norm"}) is None  # an imported log says nothing of the model
    assert shows_experts({}, {"loss", "aux_loss"}) is True


def test_an_undetermined_dense_model_is_not_asked_for_expert_counts(model, th):
    """A stalled loss alone leaves the learning rate, the initialisation and more open; an MoE's token counts would
    tell some apart, but a model without experts cannot record them, so the report asks for what it can."""
    found = [f("LossPlateau", onset=10, severity=0.8)]
    causes = [c for c in model.causes if {"LossPlateau"} & set(activation(model, c, 4))]
    moe = {"ExpertImbalance", "DeadExperts", "TokenDropping", "RouterBiasedAtInit", "RouterGradVanishing"}
    unknown = rank(model, causes, found, DENSE, [], th, experts=None).undetermined
    dense = rank(model, causes, found, DENSE, [], th, experts=False).undetermined
    assert unknown is not None and dense is not None and dense.deciders
    assert {d.symptom for d in unknown.deciders} & moe  # the case the rule is for
    assert not {d.symptom for d in dense.deciders} & moe
    assert "expert_tokens" not in dense.sentence()
