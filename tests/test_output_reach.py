"""Whether the output can reach the targets of a loss on continuous values (engine/capture/output_reach.py) and
the detector of an output that cannot (engine/diagnose/reach.py), on real backward passes and small CPU
regressions."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from debugtune.engine.capture.loss_identity import identity_hits, sampled_rows  # noqa: E402
from debugtune.engine.capture.output_reach import KEYS, OutputReach  # noqa: E402
from debugtune.engine.diagnose import diagnose_run  # noqa: E402
from tests.test_probe_evidence import train  # noqa: E402

F = torch.nn.functional



def _observe(th, out, loss_fn, targets, head=lambda y: y):
    """The metrics of one backward pass of ``loss_fn(head(out), targets)``, read at ``out`` as the probe does."""
    y = out.clone().requires_grad_()
    loss_fn(head(y), targets).backward()
    cap = int(th["probe.loss_identity_max_elements"])
    rows = sampled_rows(y.detach(), y.grad, cap)
    reach = OutputReach(*(float(th[k]) for k in KEYS))
    reach.observe(*rows, *identity_hits(*rows, th["probe.loss_identity_tol"], cap))
    return reach.take()


def test_targets_beyond_a_bound_show_as_gradient_against_it(th):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(256, 1, generator=g)  # standardised targets: half below 0
    # a ReLU at the end: outputs held at 0 where the target is negative, the loss pushing them lower
    held = torch.where(t < 0, torch.zeros_like(t), (t + 0.1 * torch.randn(256, 1, generator=g)).clamp(min=0))
    got = _observe(th, held, F.mse_loss, t)
    assert got["output_bound_push"] > 0.5
    # a sigmoid at the end: outputs near 0 and 1 where the targets lie beyond
    squashed = torch.sigmoid(t * 8)
    assert _observe(th, squashed, F.mse_loss, t)["output_bound_push"] > 0.5
    # a linear output nothing bounds
    free = t + 0.1 * torch.randn(256, 1, generator=g)
    got = _observe(th, free, F.mse_loss, t)
    assert got["output_bound_push"] == 0.0 and got["output_gated_frac"] == 0.0


def test_a_target_the_bound_only_touches_is_not_beyond_it(th):
    """Dark pixels under a sigmoid: outputs near 0 with the loss pushing some lower, but their errors are only
    their own distance to targets inside the range, small beside the errors elsewhere. (Exact 0/1 targets are
    hard targets, which the identity claims, and are not judged.)"""
    g = torch.Generator().manual_seed(1)
    dark = torch.rand(128, 64, generator=g) < 0.7
    pixels = torch.where(dark, 0.005 * torch.rand(128, 64, generator=g), torch.rand(128, 64, generator=g))
    noise = torch.where(dark, 0.003, 0.1) * torch.randn(128, 64, generator=g)
    out = (pixels + noise).clamp(0.0005, 0.9995)
    got = _observe(th, out, F.mse_loss, pixels)
    assert got["output_bound_push"] < th["convergence.output_reach.push"]


def test_a_relu_in_the_loss_code_cuts_the_negative_outputs_gradient(th):
    g = torch.Generator().manual_seed(2)
    t = torch.randn(256, 1, generator=g)
    out = t + 0.3 * torch.randn(256, 1, generator=g)
    got = _observe(th, out, F.mse_loss, t, head=F.relu)
    assert got["output_gated_frac"] == pytest.approx(1.0)
    # a mask that drops elements of either sign alike is not a ReLU
    mask = (torch.rand(256, 1, generator=g) < 0.5).float()
    got = _observe(th, out, lambda y, t: ((y - t) ** 2 * mask).mean(), t)
    assert abs(got["output_gated_frac"]) < 0.2


def test_a_loss_with_hard_targets_is_not_judged(th):
    """Under cross-entropy the gradient at a confident probability pushes outwards by design."""
    logits = torch.randn(200, 10, generator=torch.Generator().manual_seed(3))
    targets = torch.randint(0, 10, (200,), generator=torch.Generator().manual_seed(4))
    assert _observe(th, logits, F.cross_entropy, targets) is None
    probs = torch.sigmoid(logits)
    tags = (torch.rand(200, 10, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    assert _observe(th, probs, F.binary_cross_entropy, tags) is None


class Regressor(torch.nn.Module):
    def __init__(self, head=None):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        self.head = head

    def forward(self, x):
        y = self.body(x)
        return self.head(y) if self.head is not None else y


def _regression(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8, 1, generator=g)
    while True:
        x = torch.randn(64, 8, generator=g)
        yield x, x @ w / 8 ** 0.5 + 0.05 * torch.randn(64, 1, generator=g)


@pytest.mark.parametrize("case, head, loss_fn, fires", [
    ("linear", None, F.mse_loss, False),
    ("sigmoid_output", torch.nn.Sigmoid(), F.mse_loss, True),
    ("relu_output", torch.nn.ReLU(), F.mse_loss, True),
    ("relu_in_loss", None, lambda y, t: F.mse_loss(F.relu(y), t), True),
])
def test_a_bounded_regression_output_is_found(tmp_path, th, case, head, loss_fn, fires):
    model = Regressor(head)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    train(tmp_path / case, model, opt, th, steps=120, data=_regression(), loss_fn=loss_fn, detail_every=4)
    found = diagnose_run(tmp_path / case, th, ["convergence"])
    assert "OutputCannotReachTargets" in found.judged
    hits = [f for f in found.findings if f.symptom == "OutputCannotReachTargets"]
    assert bool(hits) == fires, [f.evidence for f in hits]
    if fires:
        assert hits[0].evidence["how"] == ("gated" if case == "relu_in_loss" else "bound")
