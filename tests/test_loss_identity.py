"""The output gradient names the loss behind it: real PyTorch losses, each wired correctly and wrongly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from debugtune.engine.capture.loss_identity import HYPOTHESES, LossIdentity, identity_hits, sampled_rows  # noqa: E402

F = torch.nn.functional
N, K = 128, 10



def shares(th, loss, squash=None, shape=(N, K), seed=0, half=False):
    """Shares per hypothesis for the gradient of ``loss`` at the output ``squash(y)`` of real-valued ``y``; with
    ``half``, as under ``torch.autocast`` to bfloat16: the output is bfloat16, the loss runs in float32 on it
    upcast, and the gradient reaching the output is rounded back to bfloat16."""
    torch.manual_seed(seed)
    y = (torch.randn(*shape) * 2).requires_grad_()
    out = y if squash is None else squash(y)
    if half:
        out = out.bfloat16()
    out.retain_grad()
    loss(out.float() if half else out).backward()
    cap = int(th["probe.loss_identity_max_elements"])
    dtypes, tol = ((torch.bfloat16,), th["probe.loss_identity_tol_half"]) if half else \
        (None, th["probe.loss_identity_tol"])
    got = identity_hits(*sampled_rows(out.detach(), out.grad, cap, dtypes=dtypes), tol, cap)
    assert got is not None
    hits, n = got
    return {h: v / n for h, v in hits.items()}


T = torch.randint(0, K, (N,), generator=torch.Generator().manual_seed(1))
TM = (torch.rand(N, K, generator=torch.Generator().manual_seed(2)) < 0.3).float()
LM_T = torch.randint(0, 500, (8 * 64,), generator=torch.Generator().manual_seed(3))
CASES = {
    # correct wirings: logits into a loss that normalises them, probabilities into a loss built for them
    "cross-entropy on logits": (lambda o: F.cross_entropy(o, T), None, "softmax_logits"),
    "cross-entropy, half the rows ignored": (
        lambda o: F.cross_entropy(o, torch.where(torch.arange(N) < 64, T, -100)), None, "softmax_logits"),
    "BCEWithLogits with pos_weight": (
        lambda o: F.binary_cross_entropy_with_logits(o, TM, pos_weight=torch.full((K,), 3.0)), None,
        "sigmoid_logits"),
    "sigmoid then BCELoss": (lambda o: F.binary_cross_entropy(o, TM), torch.sigmoid, "bce_probs"),
    "softmax then NLL of the log": (lambda o: F.nll_loss(o.log(), T), lambda y: y.softmax(-1), "nll_probs"),
    "sigmoid then MSE on 0/1": (lambda o: F.mse_loss(o, TM), torch.sigmoid, "mse"),
    "log_softmax then NLL": (lambda o: F.nll_loss(o, T), lambda y: y.log_softmax(-1), "nll_logprobs"),
    "LM cross-entropy": (lambda o: F.cross_entropy(o.reshape(-1, 500), LM_T), None, "softmax_logits"),
    # an activation in the loss code before a loss that applies its own
    "sigmoid then BCEWithLogits": (lambda o: F.binary_cross_entropy_with_logits(o.sigmoid(), TM), None,
                                   "sigmoid_twice"),
    "ReLU then cross-entropy": (lambda o: F.cross_entropy(o.relu(), T), None, "relu_softmax"),
    "softmax then cross-entropy": (lambda o: F.cross_entropy(o.softmax(-1), T), None, "softmax_twice"),
    "sigmoid then cross-entropy": (lambda o: F.cross_entropy(o.sigmoid(), T), None, "sigmoid_softmax"),
    "ReLU then BCEWithLogits": (lambda o: F.binary_cross_entropy_with_logits(o.relu(), TM), None, "relu_sigmoid"),
    "LM softmax then cross-entropy": (lambda o: F.cross_entropy(o.softmax(-1).reshape(-1, 500), LM_T), None,
                                      "softmax_twice"),
}


@pytest.mark.parametrize("half", [False, True], ids=["float32", "bfloat16 autocast"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_loss_that_produced_the_gradient_explains_it(th, case, half):
    loss, squash, expected = CASES[case]
    shape = (8, 64, 500) if case.startswith("LM") else (N, K)
    got = shares(th, loss, squash, shape, half=half)
    assert got[expected] == max(got.values()), got
    assert got[expected] >= (0.7 if case.startswith("LM softmax") else 0.9), got
    # another share near the truth only where two losses have the same gradient on these elements (NLL and BCE
    # on the target); a ReLU hypothesis explains the positive outputs or the zeros (about half)
    tied = {"nll_probs", "bce_probs"}
    close = {h for h, v in got.items() if h != expected and v > got[expected] - 0.3}
    assert not close or close | {expected} <= tied, got


NO_HARD_TARGETS = {
    "label smoothing": lambda o: F.cross_entropy(o, T, label_smoothing=0.1),
    "MSE on continuous targets": lambda o: F.mse_loss(o, torch.randn(N, K, generator=torch.Generator().manual_seed(4))),
    # zero gradients where the margin holds, on negative outputs too: not a ReLU in the loss code
    "multi-class hinge": lambda o: F.multi_margin_loss(o, T),
}


@pytest.mark.parametrize("half", [False, True], ids=["float32", "bfloat16 autocast"])
@pytest.mark.parametrize("case", NO_HARD_TARGETS, ids=list(NO_HARD_TARGETS))
def test_losses_without_a_closed_form_are_explained_by_no_hypothesis(th, case, half):
    got = shares(th, NO_HARD_TARGETS[case], half=half)
    assert max(got.values()) < th["convergence.loss_identity.share"], got


def test_half_precision_and_too_few_elements_give_nothing(th):
    y = torch.randn(N, K)
    assert sampled_rows(y.half(), y.half(), 1000) is None
    acc = LossIdentity(th["probe.loss_identity_tol"], int(th["probe.loss_identity_min_elements"]), 1000)
    small = torch.randn(2, 3, requires_grad=True)
    F.cross_entropy(small, torch.tensor([0, 1])).backward()
    acc.observe(small.detach(), small.grad)
    assert acc.take() is None
    big = torch.randn(N, K, requires_grad=True)
    F.cross_entropy(big, T).backward()
    acc.observe(big.detach(), big.grad)
    names, values = acc.take()
    assert names == sorted(HYPOTHESES) and max(values) > 0.9
    assert acc.take() is None  # taking resets


@pytest.mark.parametrize("width", [1, K], ids=["one output", "ten outputs"])
@pytest.mark.parametrize("loss", [F.l1_loss, F.smooth_l1_loss], ids=["L1", "Huber"])
def test_a_regression_under_a_sign_only_loss_is_no_loss_with_hard_targets(th, loss, width):
    """L1 (and Huber far from its target) has a gradient of one magnitude on every element. On one output column
    a softmax is 1, and the positive elements all fell in the softmax hypotheses' window (a Huber regression on raw
    inputs was named a squash before a loss on logits at 0.98); on any width the negative ones fell in NLL's. A
    loss over a row's classes needs two classes, and NLL's gradient is on one element of its row."""
    from debugtune.engine.capture.loss_identity import ROW_WISE

    target = torch.full((N, width), 40.0)
    got = shares(th, lambda o: loss(o, target), shape=(N, width))
    if width == 1:
        assert all(got[h] == 0 for h in ROW_WISE)
    assert max(got.values()) < th["convergence.loss_identity.share"], got
