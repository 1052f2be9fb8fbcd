"""A body frozen at its constructors' values is a fault by definition; one frozen after training is a recipe
(engine/capture/frozen_init.py, the gradient.frozen_untrained detector, FrozenAtInitialisation)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from debugtune.api import diagnose  # noqa: E402
from debugtune.engine.capture.frozen_init import as_constructed  # noqa: E402
from tests.diagnose_helpers import train_attached  # noqa: E402


@pytest.mark.parametrize("layer", [nn.Linear(256, 128), nn.Conv2d(16, 32, 3), nn.GRU(32, 64),
                                   nn.MultiheadAttention(64, 4)], ids=lambda m: type(m).__name__)
def test_every_constructor_drawn_weight_reads_as_constructed(layer):
    torch.manual_seed(0)
    verdicts = [as_constructed(p, 1000, 0.05) for p in layer.parameters()]
    assert True in verdicts and False not in verdicts  # small biases are not judged (None)


def test_trained_normal_constant_and_small_tensors_do_not():
    torch.manual_seed(0)
    layer = nn.Linear(64, 64)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randn(256, 64)
    for _ in range(10):
        opt.zero_grad()
        F.mse_loss(layer(x), y).backward()
        opt.step()
    assert as_constructed(layer.weight, 1000, 0.05) is False
    assert as_constructed(torch.randn(64, 64) * 0.02, 1000, 0.05) is False  # BERT's init is not claimed
    assert as_constructed(torch.ones(4096), 1000, 0.05) is None
    assert as_constructed(nn.Linear(8, 8).weight, 1000, 0.05) is None


def _probe(run_dir: Path, pretrain: int) -> None:
    """A 3-layer MLP classifier whose body is trained ``pretrain`` steps, then frozen under a new head."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 32, generator=g)
    y = (x[:, :8] @ torch.randn(8, 4, generator=g)).argmax(1)
    body = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
    if pretrain:
        head = nn.Linear(128, 4)
        opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-3)
        for _ in range(pretrain):
            i = torch.randint(0, 2048, (64,), generator=g)
            opt.zero_grad()
            F.cross_entropy(head(body(x[i])), y[i]).backward()
            opt.step()
    body.requires_grad_(False)
    model = nn.Sequential(body, nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def batch_loss() -> torch.Tensor:
        i = torch.randint(0, 2048, (64,), generator=g)
        return F.cross_entropy(model(x[i]), y[i])
    train_attached(model, opt, run_dir, 200, batch_loss)


def test_a_body_frozen_at_its_initialisation_names_frozen_parameters(tmp_path):
    torch.set_num_threads(1)
    _probe(tmp_path, pretrain=0)
    report = diagnose(tmp_path)
    assert "FrozenAtInitialisation" in {f.symptom for f in report.findings}
    assert report.hypotheses and report.hypotheses[0].cause == "FrozenParameters"


def test_a_linear_probe_on_a_trained_body_is_not_frozen_at_initialisation(tmp_path):
    torch.set_num_threads(1)
    _probe(tmp_path, pretrain=300)
    report = diagnose(tmp_path)
    assert "FrozenAtInitialisation" not in {f.symptom for f in report.findings}
    assert "FrozenParameters" not in [h.cause for h in report.hypotheses]
