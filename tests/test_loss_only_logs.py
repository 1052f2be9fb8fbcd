"""Runs known only from a log of their loss, imported after the fact (``cann-debug import``): what the loss alone
can say, and how sure it may be. The program is written here, not taken from the fault bench's harnesses: a GRU
sequence classifier on SGD with momentum that logs ``{"iteration", "train_loss"}`` lines and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from debugtune.api import diagnose  # noqa: E402
from debugtune.engine.capture.importers.registry import import_path  # noqa: E402


class _GRUClassifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = torch.nn.GRU(4, 32, batch_first=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0][:, -1])


def _train_and_import(run_dir: Path, scratch: Path, lr: float, steps: int = 200) -> None:
    """Four classes: the sign of the sequence's first feature summed, and of its second over the last three steps."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 12, 4, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long() * 2 + (x[:, -3:, 1].sum(1) > 0).long()
    model = _GRUClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    lines = []
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for it, batch in enumerate(torch.randint(0, 2048, (steps, 32), generator=g)):
            model.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
            lines.append(json.dumps({"iteration": it, "train_loss": loss.item()}))
    finally:
        torch.set_num_threads(before)
    log = scratch / "train.jsonl"
    log.write_text("\n".join(lines) + "\n")
    import_path(log, run_dir, replace=True)


def test_a_loss_that_blows_up_in_the_first_steps_points_at_the_learning_rate(tmp_path):
    """lr 20: the loss goes from 1.4 to over 100 within five steps. The learning rate leads, but no higher than
    the ceiling: unnormalised inputs blow the first steps up too, and a loss log cannot rule them out."""
    _train_and_import(tmp_path / "run", tmp_path, lr=20.0)
    report = diagnose(tmp_path / "run")
    assert "EarlyLossBlowup" in {f.symptom for f in report.findings}
    top = report.hypotheses[0]
    assert top.cause == "LearningRateTooHigh"
    assert 0.35 <= top.confidence <= 0.6
    assert "UnnormalizedInputs" in top.basis


def test_the_same_program_at_a_sane_learning_rate_is_not_named(tmp_path):
    _train_and_import(tmp_path / "run", tmp_path, lr=0.05)
    report = diagnose(tmp_path / "run")
    assert not {"EarlyLossBlowup", "LossDivergence", "LossSpike"} & {f.symptom for f in report.findings}
    assert not any("EarlyLossBlowup" in note for note in report.notes)  # judged, and absent
    assert report.hypotheses == []
