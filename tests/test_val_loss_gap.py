"""ValidationAboveTraining read from the losses (``convergence.val_loss_gap``) on real small CPU trainings that log
no training accuracy: noisy training labels put the training loss above a clean held-out loss; a healthy run does
not; a model with dropout is not judged (its training-mode loss is higher whatever the labels), and the probe
records which modules make the two modes differ."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

import debugtune  # noqa: E402
from debugtune.engine.capture.probe import knowledge_thresholds  # noqa: E402
from debugtune.engine.diagnose import Thresholds, diagnose_run  # noqa: E402

F = torch.nn.functional
CLASSES, N_IN = 8, 16


def _task(seed: int = 0):
    """A fixed linear teacher, a training pool and a clean held-out set."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(N_IN, CLASSES, generator=g)
    x = torch.randn(1024, N_IN, generator=g)
    x_eval = torch.randn(512, N_IN, generator=g)
    return x, (x @ teacher).argmax(dim=1), x_eval, (x_eval @ teacher).argmax(dim=1), g


def _run(run_dir, *, noise: float = 0.0, dropout: float = 0.0, steps: int = 200):
    """SGD with momentum on an MLP; ``noise`` of the training labels replaced uniformly; loss and eval_loss only."""
    x, y, x_eval, y_eval, g = _task()
    if noise:
        flip = torch.rand(y.shape, generator=g) < noise
        y = torch.where(flip, torch.randint(0, CLASSES, y.shape, generator=g), y)
    torch.manual_seed(0)
    extra = [torch.nn.Dropout(dropout)] if dropout else []
    model = torch.nn.Sequential(torch.nn.Linear(N_IN, 64), torch.nn.ReLU(), *extra, torch.nn.Linear(64, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with debugtune.attach(model, opt, run_dir, hardware=False, activations=False,
                          thresholds=knowledge_thresholds()) as probe:
        for step in range(steps):
            idx = torch.randint(0, len(x), (64,), generator=g)
            model.train()
            opt.zero_grad()
            loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            probe.log(loss=loss.item())
            if step % 20 == 0 or step == steps - 1:
                model.eval()
                with torch.no_grad():
                    probe.log(eval_loss=F.cross_entropy(model(x_eval), y_eval).item())
    return run_dir


@pytest.fixture(scope="module")
def th():
    return Thresholds(dict(knowledge_thresholds().items()))


def _gap(diagnosis):
    return [f for f in diagnosis.findings if f.symptom == "ValidationAboveTraining"]


def test_noisy_labels_put_the_training_loss_above_the_held_out_loss(tmp_path, th):
    diagnosis = diagnose_run(_run(tmp_path / "noisy", noise=0.4), th)
    found = _gap(diagnosis)
    assert [f.detector for f in found] == ["convergence.val_loss_gap"]
    ev = found[0].evidence
    assert ev["train_loss"] > ev["eval_loss"]
    assert 0.4 * 0.5 < ev["gap"]  # g is a lower bound of the corrupted share; here well above the minimum
    assert "ValidationAboveTraining" in diagnosis.judged


def test_a_healthy_run_has_no_gap_and_dropout_is_not_judged(tmp_path, th):
    healthy = diagnose_run(_run(tmp_path / "healthy"), th)
    assert not _gap(healthy) and "ValidationAboveTraining" in healthy.judged
    dropped = diagnose_run(_run(tmp_path / "dropout", noise=0.4, dropout=0.3), th)
    assert not _gap(dropped) and "ValidationAboveTraining" not in dropped.judged
    assert any("ValidationAboveTraining not judged" in n and "dropout" in n for n in dropped.notes)
    meta = json.loads((tmp_path / "dropout" / "run.json").read_text())
    assert meta["probe"]["mode_dependent"] == {"dropout": 1, "batch_norm": 0}


@pytest.mark.parametrize(("module", "expected"), [
    (lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.0)), {"dropout": 0, "batch_norm": 0}),
    (lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)), {"dropout": 0, "batch_norm": 1}),
    (lambda: torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4, track_running_stats=False)),
     {"dropout": 0, "batch_norm": 0}),
    (lambda: torch.nn.LSTM(4, 4, num_layers=2, dropout=0.2), {"dropout": 1, "batch_norm": 0}),
    (lambda: torch.nn.MultiheadAttention(4, 2, dropout=0.1), {"dropout": 1, "batch_norm": 0}),
])
def test_the_probe_counts_the_modules_that_differ_between_modes(tmp_path, module, expected):
    model = module()
    probe = debugtune.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), tmp_path, hardware=False)
    probe.close()
    assert json.loads((tmp_path / "run.json").read_text())["probe"]["mode_dependent"] == expected
