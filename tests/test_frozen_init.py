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
    assert as_constructed(torch.randn(64, 64) * 0.02, 1000, 0.05) is False  # a normal law only at a std given
    assert as_constructed(torch.ones(4096), 1000, 0.05) is None
    assert as_constructed(nn.Linear(8, 8).weight, 1000, 0.05) is None


def test_a_normal_draw_reads_as_constructed_only_at_a_constructors_std():
    torch.manual_seed(0)
    draw = torch.randn(128, 128)
    assert as_constructed(draw * 0.02, 1000, 0.05, [0.02, 1.0], 0.6) is True  # transformers' initializer_range
    assert as_constructed(draw, 1000, 0.05, [0.02, 1.0], 0.6) is True  # nn.Embedding's N(0, 1)
    assert as_constructed(draw * 0.05, 1000, 0.05, [0.02, 1.0], 0.6) is False  # a std no constructor declared
    assert as_constructed(draw * 0.05, 1000, 0.05, [0.02, 1.0, 0.05], 0.6) is True  # the model declares 0.05
    heavy = torch.distributions.StudentT(4.0).sample((128, 128))
    assert as_constructed(heavy * 0.02 / heavy.std(), 1000, 0.05, [0.02], 0.6) is False  # tails of a trained law
    body = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128))
    for m in (body[0], body[2]):
        nn.init.normal_(m.weight, 0.0, 0.02)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2048, 32, generator=g), torch.randint(0, 4, (2048,), generator=g)
    head = nn.Linear(128, 4)
    opt = torch.optim.Adam([*body.parameters(), *head.parameters()], lr=1e-3)
    for _ in range(100):
        i = torch.randint(0, 2048, (64,), generator=g)
        opt.zero_grad()
        F.cross_entropy(head(torch.relu(body(x[i]))), y[i]).backward()
        opt.step()
    assert as_constructed(body[2].weight, 1000, 0.05, [0.02], 0.6) is False  # trained: the std moved off


def test_a_transformers_model_built_from_its_config_and_frozen_is_frozen_at_initialisation(tmp_path):
    """The common slip: ``BertForSequenceClassification(config)`` where ``from_pretrained`` was meant, the body
    then frozen for a linear probe. Its weights are N(0, config.initializer_range), not uniform."""
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=16, num_labels=2,
                                     initializer_range=0.03)  # read from the model, not the knowledge base
    model = transformers.BertForSequenceClassification(config)
    model.bert.requires_grad_(False)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 64, (1024, 16), generator=g)
    y = ((x == 3).sum(1) > (x == 7).sum(1)).long()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def batch_loss() -> torch.Tensor:
        i = torch.randint(0, 1024, (32,), generator=g)
        return model(input_ids=x[i], labels=y[i]).loss
    train_attached(model, opt, tmp_path, 30, batch_loss)
    report = diagnose(tmp_path)
    found = {f.symptom: f for f in report.findings}
    assert "FrozenAtInitialisation" in found, report.notes
    assert found["FrozenAtInitialisation"].evidence["as_constructed"] >= found["FrozenAtInitialisation"].evidence[
        "judged"] / 2


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


def test_a_large_tensor_is_read_on_a_sample_with_the_same_verdict():
    """A frozen tensor above the cap is read on an evenly strided sample, never copied whole; the verdicts agree."""
    torch.manual_seed(0)
    uniform = torch.empty(3000, 1000).uniform_(-0.1, 0.1)
    normal = torch.randn(3000, 1000) * 0.02
    trained = normal + 0.01 * torch.randn(3000, 1000) ** 3  # heavier tails at a moved std
    for w, want in ((uniform, True), (normal, True), (trained, False)):
        assert as_constructed(w, 1000, 0.05, [0.02], 0.6) is want
        assert as_constructed(w, 1000, 0.05, [0.02], 0.6, max_elements=50_000) is want
        assert as_constructed(w.t(), 1000, 0.05, [0.02], 0.6, max_elements=50_000) is want  # a strided view
