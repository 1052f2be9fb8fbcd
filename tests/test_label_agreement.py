"""The labels read from the output gradient (engine/capture/label_agreement.py) and the detector of labels that
contradict the model at random (engine/diagnose/labels.py), on real small CPU trainings."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from debugtune.engine.capture.label_agreement import LabelAgreement  # noqa: E402
from debugtune.engine.capture.loss_identity import identity_hits, sampled_rows  # noqa: E402
from debugtune.engine.diagnose import diagnose_run  # noqa: E402
from tests.test_probe_evidence import mlp, train  # noqa: E402

F = torch.nn.functional
K = 10



def _observe(th, logits, loss_fn, targets):
    y = logits.clone().requires_grad_()
    loss_fn(y, targets).backward()
    cap = int(th["probe.loss_identity_max_elements"])
    rows = sampled_rows(y.detach(), y.grad, cap)
    acc = LabelAgreement(th["convergence.loss_identity.share"], int(th["probe.label_agreement_min_rows"]))
    acc.observe(*rows, *identity_hits(*rows, th["probe.loss_identity_tol"], cap))
    return acc.take()


def test_the_gradient_gives_the_labels_and_the_agreement_beyond_chance(th):
    """Cross-entropy on logits: the agreement share and rank are those of the labels the loss was given."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(400, K, generator=g) * 3
    pred = logits.argmax(dim=1)
    targets = pred.clone()
    flip = torch.arange(400) % 4 == 0  # a quarter replaced by a class the model ranks last
    targets[flip] = logits[flip].argmin(dim=1)
    got = _observe(th, logits, F.cross_entropy, targets)
    agree = 0.75
    m = float(torch.bincount(targets).max()) / 400
    assert got["output_label_kappa"] == pytest.approx((agree - m) / (1 - m), abs=1e-9)
    assert got["output_label_error_rank"] == pytest.approx(1.0)  # every contradicting label ranked last
    # BCE on logits: each element's sign is its target; no ranking
    tags = (torch.rand(400, K, generator=g) < 0.3).float()
    got = _observe(th, logits, F.binary_cross_entropy_with_logits, tags)
    assert "output_label_error_rank" not in got
    a, pos = float(((logits > 0).float() == tags).double().mean()), float(tags.mean())
    m = max(pos, 1 - pos)
    assert got["output_label_kappa"] == pytest.approx((a - m) / (1 - m), abs=1e-6)


def test_soft_targets_and_weighted_rows_give_no_labels(th):
    """Label smoothing leaves no row with one negative gradient element; MSE on logits is no loss on logits."""
    logits = torch.randn(200, K, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, K, (200,), generator=torch.Generator().manual_seed(2))
    assert _observe(th, logits, lambda y, t: F.cross_entropy(y, t, label_smoothing=0.1), targets) is None
    assert _observe(th, logits, lambda y, t: F.mse_loss(y, F.one_hot(t, K).float()), targets) is None


def _stream(noise=0.0, ambiguity=0.0, classes=K, seed=0):
    """Fresh batches from a linear teacher; ``noise``: share of labels replaced by a uniformly random class;
    ``ambiguity``: Gaussian noise on the teacher's logits (hard examples, whose label is a near neighbour)."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(16, classes, generator=g)
    while True:
        x = torch.randn(64, 16, generator=g)
        y = (x @ teacher + ambiguity * torch.randn(64, classes, generator=g)).argmax(dim=1)
        swap = torch.rand(64, generator=g) < noise
        y[swap] = torch.randint(0, classes, (int(swap.sum()),), generator=g)
        yield x, y


@pytest.mark.parametrize("case, noise, ambiguity, lr, steps, fires", [
    ("clean", 0.0, 0.0, 3e-3, 120, False),
    ("hard_examples", 0.0, 3.0, 3e-3, 120, False),
    ("random_labels", 0.4, 0.0, 3e-3, 200, True),
    ("still_learning", 0.0, 0.0, 1e-3, 120, False),
])
def test_labels_replaced_at_random_are_told_from_hard_examples(tmp_path, th, case, noise, ambiguity, lr, steps, fires):
    """A third of the labels wrong either way: replaced at random, they land anywhere in the model's ranking;
    drawn from a noisy teacher (hard examples), they are the model's runner-up. A model that has learnt only a
    little (clean labels, a slower rate) contradicts its labels far from the runner-up too, but its own
    probabilities are flatter still: it is still learning, and is not judged."""
    model = mlp(out=K)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    tel = train(tmp_path / case, model, opt, th, steps=steps, data=_stream(noise, ambiguity), detail_every=4)
    found = diagnose_run(tmp_path / case, th, ["convergence"])
    assert "LabelErrorsAtRandom" in found.judged
    hits = [f for f in found.findings if f.symptom == "LabelErrorsAtRandom"]
    late = len(tel.series("output_label_kappa")[1]) // 2
    kappa = np.median(tel.series("output_label_kappa")[1][late:])
    rank = np.median(tel.series("output_label_error_rank")[1][late:])
    expected = np.median(tel.series("output_label_error_rank_expected")[1][late:])
    assert bool(hits) == fires, (kappa, rank, expected)
    if fires:
        assert hits[0].evidence["error_rank"] > 0.3, hits[0].evidence  # a hard example's label ranks near 0
        assert hits[0].evidence["error_rank"] > hits[0].evidence["error_rank_expected"] - 0.1
    elif case == "hard_examples":
        assert kappa < 0.5 and rank < th["convergence.label_errors.rank"]  # more errors, near the top
    elif case == "still_learning":  # learnt a rule, errors far from the runner-up, yet flatter than its labels
        assert kappa >= th["convergence.label_errors.min_kappa"]
        assert rank < expected - th["convergence.label_errors.calibration_tol"]


class _Autocast(torch.nn.Module):
    """A model whose forward runs under ``torch.autocast`` to bfloat16 (mixed precision, as Lightning's
    ``precision="bf16-mixed"`` wraps it): its output, and the gradient reaching it, are bfloat16."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast("cpu", torch.bfloat16):
            return self.inner(x)


def test_labels_replaced_at_random_are_read_under_mixed_precision(tmp_path, th):
    """The output of a bfloat16 autocast forward is 16-bit: its gradient is read in the wider window, and the
    labels replaced at random are found as in float32 (before, nothing was read and only the slow loss showed)."""
    model = _Autocast(mlp(out=K))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    tel = train(tmp_path / "bf16", model, opt, th, steps=200, data=_stream(0.4), detail_every=4)
    assert tel.series("output_label_kappa")[1].size > 0
    found = diagnose_run(tmp_path / "bf16", th, ["convergence"])
    assert "LabelErrorsAtRandom" in {f.symptom for f in found.findings}


def test_two_classes_are_not_judged(tmp_path, th):
    model = mlp(out=2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train(tmp_path / "two", model, opt, th, steps=60, data=_stream(0.4, classes=2), detail_every=4)
    found = diagnose_run(tmp_path / "two", th, ["convergence"])
    assert "LabelErrorsAtRandom" not in found.judged
    assert any("LabelErrorsAtRandom" in n and "output_label_error_rank not recorded" in n for n in found.notes)


def _accumulate(th, y, loss_fn, target):
    """Identity and labels of one output read through ``LossIdentity`` (the layout it picks) with labels attached."""
    from debugtune.engine.capture.loss_identity import LossIdentity

    y = y.clone().requires_grad_()
    loss_fn(y, target).backward()
    labels = LabelAgreement(th["convergence.loss_identity.share"], int(th["probe.label_agreement_min_rows"]))
    acc = LossIdentity(th["probe.loss_identity_tol"], int(th["probe.loss_identity_min_elements"]),
                       int(th["probe.loss_identity_max_elements"]), labels)
    acc.observe(y.detach(), y.grad)
    names, share = acc.take()
    return dict(zip(names, share, strict=True)), labels.take()


def test_a_segmentation_map_is_read_with_its_classes_at_dim_1(th):
    """cross_entropy on (N, C, H, W) normalises over C: the identity and the labels are read per pixel (before, the
    last dimension was taken for the classes, no hypothesis fitted and the labels were never read)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, 12, 12, generator=g) * 3
    target = logits.argmax(dim=1)
    swap = torch.rand(target.shape, generator=g) < 0.25  # a quarter of the pixels labelled with the least likely class
    target[swap] = logits.argmin(dim=1)[swap]
    shares, got = _accumulate(th, logits, F.cross_entropy, target)
    assert shares["softmax_logits"] > 0.95
    assert got is not None and got["output_label_error_rank"] == pytest.approx(1.0)
    assert 0.6 < got["output_label_kappa"] < 0.8


def test_a_sequence_model_keeps_its_classes_last(th):
    """(N, T, V) logits flattened for the loss: the last dimension is the classes, and is kept."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 9, 30, generator=g) * 3
    target = logits.argmax(dim=-1)
    shares, got = _accumulate(th, logits, lambda y, t: F.cross_entropy(y.reshape(-1, 30), t.reshape(-1)), target)
    assert shares["softmax_logits"] > 0.95
    assert got is not None and got["output_label_kappa"] > 0.95


class _Segmenter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1)
        self.out = torch.nn.Conv2d(16, 3, 1)

    def forward(self, x):
        return self.out(F.relu(self.c2(F.relu(self.c1(x)))))


def _shapes(g, n=16):
    """Noisy 16x16 images of a bright rectangle (class 1) and a dimmer disc (class 2) on background 0."""
    x, y = torch.zeros(n, 1, 16, 16), torch.zeros(n, 16, 16, dtype=torch.long)
    rows, cols = torch.meshgrid(torch.arange(16), torch.arange(16), indexing="ij")
    for i in range(n):
        a, b, h, w = (int(v) for v in torch.cat([torch.randint(0, 10, (2,), generator=g),
                                                  torch.randint(3, 7, (2,), generator=g)]))
        x[i, 0, a:a + h, b:b + w], y[i, a:a + h, b:b + w] = 1.0, 1
        c0, c1 = (int(v) for v in torch.randint(3, 13, (2,), generator=g))
        disc = (rows - c0) ** 2 + (cols - c1) ** 2 <= 6.25
        x[i, 0][disc], y[i][disc] = 0.6, 2
    return x + 0.1 * torch.randn(x.shape, generator=g), y


@pytest.mark.parametrize("noise, named", [(0.0, None), (0.5, "LabelNoise")], ids=["clean", "half the pixels"])
def test_a_segmentation_network_with_pixel_labels_replaced_is_label_noise(tmp_path, th, noise, named):
    """A small fully convolutional segmenter (per-pixel cross-entropy, Adam): half the pixel labels replaced at
    random is named LabelNoise; the clean twin, which fits its maps, is named nothing."""
    from debugtune.api import diagnose

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = _Segmenter()
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def data():
        while True:
            x, y = _shapes(g)
            swap = torch.rand(y.shape, generator=g) < noise
            yield x, torch.where(swap, torch.randint(0, 3, y.shape, generator=g), y)
    train(tmp_path, model, opt, th, steps=300, data=data(), detail_every=10)
    report = diagnose(tmp_path)
    assert (report.hypotheses[0].cause if report.hypotheses else None) == named, report.summary()
