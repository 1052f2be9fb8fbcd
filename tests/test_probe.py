"""The live probe on real CPU trainings: bitwise-identical losses, what it records, and that it survives faults."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sklearn_datasets = pytest.importorskip("sklearn.datasets")

import debugtune  # noqa: E402
from debugtune.engine.telemetry import read_run_json, read_telemetry  # noqa: E402

THRESHOLDS = {"probe.grad_tiny_eps": 1e-8, "probe.act_sat_preact": 5.0}


@pytest.fixture(scope="module")
def digits():
    d = sklearn_datasets.load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(7))  # fixed before any training
    return x[order], y[order]


def make_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                               torch.nn.Linear(128, 64), torch.nn.Tanh(), torch.nn.Linear(64, 10))


def train(digits, run_dir=None, steps=50, probe_kwargs=None, per_step=None):
    """SGD+momentum on digits with dropout (so any RNG use by the probe would change the losses)."""
    x, y = digits
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    probe = debugtune.attach(model, opt, run_dir, **(probe_kwargs or {})) if run_dir is not None else None
    losses = []
    try:
        for step in range(steps):
            lo = (step * 64) % (len(x) - 64)
            loss = torch.nn.functional.cross_entropy(model(x[lo:lo + 64]), y[lo:lo + 64])
            opt.zero_grad()
            loss.backward()
            if per_step is not None:
                per_step(step, model)
            opt.step()
            losses.append(loss.item())
            if probe is not None:
                probe.log(loss=losses[-1], lr=0.1)
    finally:
        if probe is not None:
            probe.close()
    return losses, model


def test_losses_are_bitwise_identical_with_and_without_the_probe(digits, tmp_path):
    plain, m0 = train(digits)
    probed, m1 = train(digits, tmp_path / "run", probe_kwargs={"activations": True, "hardware": True})
    assert len(plain) == 50
    assert probed == plain  # float == float: bit for bit
    for a, b in zip(m0.parameters(), m1.parameters(), strict=True):
        assert torch.equal(a, b)
    meta = read_run_json(tmp_path / "run")
    assert meta["probe"]["errors"]["total"] == 0
    assert meta["probe"]["disabled"] == {}  # thresholds came from the shipped knowledge base
    assert (meta["probe"]["detail_every"], meta["probe"]["detail_every_from"]) == (10, "knowledge base")
    tel = read_telemetry(tmp_path / "run")
    steps, loss = tel.series("loss")
    assert steps.tolist() == list(range(50)) and loss.tolist() == plain
    assert tel.series("grad_norm", "")[0].tolist() == list(range(50))  # cheap statistics: every step
    assert tel.series("update_ratio", "")[0].tolist() == [0, 10, 20, 30, 40]  # detail: the knowledge base's cadence


def test_records_gradient_update_activation_and_timing_metrics(digits, tmp_path):
    grads = {}

    def keep(step, model):
        if step == 3:
            grads.update({n: p.grad.detach().clone() for n, p in model.named_parameters()})
            grads["weights"] = {n: p.detach().clone() for n, p in model.named_parameters()}

    _, model = train(digits, tmp_path / "run", steps=6, per_step=keep,
                     probe_kwargs={"activations": True, "hardware": False, "thresholds": THRESHOLDS})
    tel = read_telemetry(tmp_path / "run")
    # per-layer gradient norm at step 3 equals the norm of that layer's weight and bias gradients
    layer = torch.cat([grads["0.weight"].flatten(), grads["0.bias"].flatten()])
    steps, norm = tel.series("grad_norm", "0")
    assert steps.tolist() == list(range(6))
    assert norm[3] == pytest.approx(float(layer.double().norm()), rel=1e-9)
    everything = torch.cat([g.flatten() for k, g in grads.items() if k != "weights"]).double()
    assert tel.series("grad_norm", "")[1][3] == pytest.approx(float(everything.norm()), rel=1e-9)
    assert tel.series("grad_zero_frac", "0")[1][3] == pytest.approx(float((layer == 0).double().mean()))
    assert set(tel.entities("grad_norm")) == {"", "0", "3", "5"}
    # update ratio of the last layer at step 3: ||w4 - w3|| / ||w4|| from the weights around that step
    steps_u, ratio = tel.series("update_ratio", "5")
    assert steps_u.tolist() == list(range(6)) and np.all(ratio > 0)
    assert {"act_zero_frac", "act_sat_frac", "step_time_ms", "grad_tiny_frac", "weight_norm"} <= set(tel.metrics())
    assert tel.entities("act_sat_frac") == ["4"]  # Tanh saturates; ReLU has no saturation
    zero = tel.series("act_zero_frac", "1")[1]
    assert np.all((zero > 0.2) & (zero < 0.8))  # ReLU after a fresh init: about half
    at3 = tel.filter(steps=3)
    hist_total = sum(at3.series(m, "")[1].sum() for m in at3.metrics() if m.startswith("grad_log2_hist:"))
    assert hist_total == sum(g.numel() for k, g in grads.items() if k != "weights")


def test_update_ratio_matches_plain_sgd(tmp_path):
    torch.manual_seed(1)
    model = torch.nn.Linear(20, 5)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 20), torch.randn(32, 5)
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=THRESHOLDS) as probe:
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            g = torch.cat([model.weight.grad.flatten(), model.bias.grad.flatten()]).double()
            opt.step()
            w = torch.cat([model.weight.detach().flatten(), model.bias.detach().flatten()]).double()
            expect = float(0.05 * g.norm() / w.norm())
        assert probe.step == 2
    ratio = read_telemetry(tmp_path / "run").series("update_ratio", "")[1]
    assert ratio[-1] == pytest.approx(expect, rel=1e-6)


class Odd(torch.nn.Module):
    """A frozen layer, a non-contiguous (transposed) parameter and a plain layer."""

    def __init__(self):
        super().__init__()
        self.frozen = torch.nn.Linear(8, 16)
        self.frozen.weight.requires_grad_(False)
        self.w_t = torch.nn.Parameter(torch.randn(4, 16).t())  # [16, 4], strides (1, 16)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.relu(self.frozen(x)) @ self.w_t)


def test_survives_nan_gradients_frozen_and_noncontiguous_parameters(tmp_path):
    torch.manual_seed(2)
    model = Odd()
    assert not model.w_t.is_contiguous()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # the frozen weight is in the optimizer too
    x, y = torch.randn(10, 8), torch.randint(0, 3, (10,))
    wt_norms = []
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=THRESHOLDS) as probe:
        for step in range(5):
            xb = x.clone()
            if step == 2:
                xb[0, 0] = float("nan")
            loss = torch.nn.functional.cross_entropy(model(xb), y)
            opt.zero_grad()
            loss.backward()
            wt_norms.append(float(model.w_t.grad.double().norm()))
            opt.step()
            probe.log(loss=loss)
    meta = read_run_json(tmp_path / "run")["probe"]
    assert meta["errors"]["total"] == 0
    assert meta["params"]["frozen_names"] == ["frozen.weight"]
    tel = read_telemetry(tmp_path / "run")
    nan_steps, nans = tel.series("grad_nan", "")
    assert nans[nan_steps == 2][0] > 0 and nans[nan_steps == 1][0] == 0
    assert tel.series("grad_norm", "w_t")[1][0] == pytest.approx(wt_norms[0], rel=1e-9)
    # the frozen weight is never hooked, but its update (zero) is measured since the optimizer holds it
    assert "frozen.weight" not in tel.entities("grad_norm")
    assert tel.series("grad_norm", "frozen")[1][0] > 0  # the bias of that layer still trains
    assert np.isnan(tel.series("loss")[1][2])


def test_an_internal_failure_is_counted_and_training_continues(digits, tmp_path, monkeypatch):
    from debugtune.engine.capture import probe_measure

    def broken(*args, **kwargs):
        raise RuntimeError("injected failure in the statistics kernel")

    plain, _ = train(digits, steps=8)
    monkeypatch.setattr(probe_measure, "native_stats_start", broken)  # gradients (background)
    monkeypatch.setattr(probe_measure, "native_stats_many", broken)  # activations (inline)
    probed, _ = train(digits, tmp_path / "run", steps=8,
                      probe_kwargs={"hardware": False, "thresholds": THRESHOLDS, "activations": True})
    assert probed == plain
    errors = read_run_json(tmp_path / "run")["probe"]["errors"]
    assert errors["by_kind"]["step_pre_hook:RuntimeError"] == 8
    assert errors["by_kind"]["activation_hook:RuntimeError"] >= 8
    assert "injected failure" in errors["first_message"]["step_pre_hook:RuntimeError"]


def test_detail_cadence_sparse_histogram_and_update_ratios(digits, tmp_path):
    """Cheap statistics on every recorded step, histogram and update ratios on every detail_every-th one; counts
    exact on both kinds of step; every=2 with detail_every=2 puts detail on steps 0, 4, 8."""
    grads = {}

    def keep(step, model):
        grads[step] = torch.cat([p.grad.detach().flatten() for p in model.parameters()])

    train(digits, tmp_path / "a", steps=7, per_step=keep,
          probe_kwargs={"detail_every": 3, "hardware": False, "thresholds": THRESHOLDS})
    tel = read_telemetry(tmp_path / "a")
    assert read_run_json(tmp_path / "a")["probe"]["detail_every_from"] == "argument"
    assert tel.series("grad_norm", "3")[0].tolist() == list(range(7))
    for m in ("update_ratio", "update_norm", "weight_norm"):
        assert tel.series(m, "3")[0].tolist() == [0, 3, 6], m
    for step in range(7):
        g = grads[step]
        zeros = tel.series("grad_zero_frac", "")[1][step] * g.numel()
        assert round(zeros) == int((g == 0).sum())
        at = tel.filter(steps=step)
        total = sum(at.series(m, "")[1].sum() for m in at.metrics() if m.startswith("grad_log2_hist:"))
        assert total == (g.numel() if step % 3 == 0 else 0)
    train(digits, tmp_path / "b", steps=9,
          probe_kwargs={"every": 2, "detail_every": 2, "hardware": False, "thresholds": THRESHOLDS})
    tel = read_telemetry(tmp_path / "b")
    assert tel.series("grad_norm", "")[0].tolist() == [0, 2, 4, 6, 8]
    assert tel.series("update_ratio", "")[0].tolist() == [0, 4, 8]


def test_every_and_log_step_attribution(tmp_path):
    torch.manual_seed(3)
    model = torch.nn.Linear(6, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debugtune.attach(model, opt, tmp_path / "run", every=2, hardware=False, thresholds=THRESHOLDS) as probe:
        for step in range(5):
            out = model(torch.randn(4, 6)).sum()
            probe.log(before=float(step))  # logged before the optimizer step
            opt.zero_grad()
            out.backward()
            opt.step()
            probe.log(after=float(step), grad_norm=1.0)  # after it: still the same step
    tel = read_telemetry(tmp_path / "run")
    for name in ("before", "after"):
        steps, values = tel.series(name)
        assert steps.tolist() == values.tolist() == [0, 1, 2, 3, 4]
    assert tel.series("grad_norm", "weight")[0].tolist() == [0, 2, 4]
    assert tel.series("grad_norm_logged")[0].tolist() == [0, 2, 4]  # steps the probe measured itself
    assert tel.series("grad_norm")[0].tolist() == [0, 1, 2, 3, 4]


def test_a_discarded_backward_is_recorded_as_a_skipped_iteration(tmp_path):
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=THRESHOLDS):
        model(torch.ones(2, 3)).sum().backward()
        opt.zero_grad(set_to_none=True)  # e.g. GradScaler found Inf and skipped optimizer.step()
        model(torch.ones(2, 3)).sum().backward()
        opt.step()
    tel = read_telemetry(tmp_path / "run")
    assert tel.series("skipped_iterations")[0].tolist() == [0]


def test_a_failed_attach_leaves_no_hook_behind(tmp_path):
    model = torch.nn.Linear(3, 2)

    class NotAnOptimizer:  # has param_groups but no step hooks
        param_groups = [{"params": list(model.parameters())}]

    with pytest.raises(AttributeError):
        debugtune.attach(model, NotAnOptimizer(), tmp_path / "run", hardware=False, thresholds=THRESHOLDS)
    assert all(not p._post_accumulate_grad_hooks for p in model.parameters())
    assert not model._forward_pre_hooks


def test_a_probe_never_closed_is_flushed_at_exit(tmp_path):
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import torch, debugtune
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = debugtune.attach(model, opt, {str(tmp_path / "run")!r}, thresholds={THRESHOLDS!r})
        for _ in range(3):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            probe.log(loss=1.0)
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    tel = read_telemetry(tmp_path / "run")
    assert tel.series("loss")[0].tolist() == [0, 1, 2]
    meta = read_run_json(tmp_path / "run")
    assert meta["source"]["status"] == "closed" and meta["probe"]["sampler"]["backend"].startswith("cpu")
    assert "rss_bytes" in tel.metrics()  # the sampler was drained on the way out
