"""The probe's direct evidence on real small CPU trainings: each measurement puts a healthy run and a faulty one
clearly apart (docs/probe.md, "Direct evidence"), and none of it changes the training."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import debugtune  # noqa: E402
from debugtune.engine.diagnose import Thresholds, diagnose_run  # noqa: E402
from debugtune.engine.telemetry import read_run_json, read_telemetry  # noqa: E402
from tests.diagnose_helpers import knowledge_store  # noqa: E402

F = torch.nn.functional



def batches(n_in=16, classes=4, batch=64, seed=0):
    """A fixed stream of (x, y): a linear teacher on standard-normal features, the same for every run."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(n_in, classes, generator=g)
    while True:
        x = torch.randn(batch, n_in, generator=g)
        yield x, (x @ teacher).argmax(dim=1)


def train(run_dir, model, opt, th, *, steps=20, data=None, scale=1.0, loss_fn=F.cross_entropy, zero_every=1,
          accumulate=1, detail_every=5, set_to_none=True, batch_scale=None):
    """Plain supervised loop; ``zero_every=0`` never zeroes, ``accumulate=k`` does k backwards per step."""
    data = data or batches()
    with debugtune.attach(model, opt, run_dir, hardware=False, thresholds=th, detail_every=detail_every) as probe:
        for step in range(steps):
            if zero_every and step % zero_every == 0:
                opt.zero_grad(set_to_none=set_to_none)
            for _ in range(accumulate):
                x, y = next(data)
                if batch_scale or scale != 1.0:
                    x = x * (batch_scale(step) if batch_scale else scale)
                loss = loss_fn(model(x), y) / accumulate
                loss.backward()
            opt.step()
            probe.log(loss=loss.item() * accumulate)
    return read_telemetry(run_dir)


def mlp(width=32, n_in=16, out=4, depth=2, seed=0):
    torch.manual_seed(seed)
    layers, d = [], n_in
    for _ in range(depth):
        layers += [torch.nn.Linear(d, width), torch.nn.ReLU()]
        d = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(d, out))


class Functional(torch.nn.Module):
    """Linear layers with the activation applied functionally (no activation module for a hook to see)."""

    def __init__(self, act, gain=1.0, bias=None, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2, self.head = torch.nn.Linear(16, 48), torch.nn.Linear(48, 48), torch.nn.Linear(48, 4)
        self.act = act
        with torch.no_grad():
            for fc in (self.fc1, self.fc2):
                fc.weight.mul_(gain)
                if bias is not None:
                    fc.bias.fill_(bias)

    def forward(self, x):
        return self.head(self.act(self.fc2(self.act(self.fc1(x)))))


def last(tel, metric, entity=""):
    return tel.series(metric, entity)[1][-1]


def test_init_gain_tells_a_bad_initialisation_apart(tmp_path, th):
    model = mlp()
    healthy = train(tmp_path / "h", model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=2)
    model = mlp()
    with torch.no_grad():
        for m in model:
            if isinstance(m, torch.nn.Linear):
                m.weight.mul_(0.02)
    bad = train(tmp_path / "b", model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=2)
    for layer in ("0", "2", "4"):
        h = healthy.series("init_gain", layer)
        assert h[0].tolist() == [0] and 0.4 < h[1][0] < 0.8  # PyTorch's default Linear init: 1/sqrt(3)
        assert bad.series("init_gain", layer)[1][0] < 0.02
        assert bad.series("init_weight_std", layer)[1][0] == pytest.approx(0.02 * healthy.series(
            "init_weight_std", layer)[1][0], rel=0.3)
    meta = read_run_json(tmp_path / "b")
    assert meta["probe"]["layer_kinds"] == {"0": "Linear", "2": "Linear", "4": "Linear"}


def test_a_model_that_is_one_bare_layer_is_its_own_weight_layer(tmp_path, th):
    """Softmax regression as ``nn.Linear`` itself: its init gain and forward statistics are read under its
    weight's entity, so a weight scaled ×8 is InitWeightsTooLarge there as in any deeper model."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    with torch.no_grad():
        model.weight.mul_(8.0)
    tel = train(tmp_path / "x8", model, torch.optim.SGD(model.parameters(), lr=0.01), th, steps=10)
    assert tel.series("init_gain", "weight")[1][0] == pytest.approx(8 / 3 ** 0.5, rel=0.15)
    assert tel.series("act_out_std", "weight")[0].size > 0
    found = diagnose_run(tmp_path / "x8", th, ["gradient"])
    assert [f.evidence["first_layers_above"] for f in found.findings if f.symptom == "InitWeightsTooLarge"] == [
        "weight"]


def test_recurrent_init_gain_is_the_median_over_its_matrices_and_token_ids_write_no_input(tmp_path, th):
    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.Embedding(50, 16)
            self.rnn = torch.nn.LSTM(16, 24, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(24, 50)

        def forward(self, ids):
            return self.head(self.rnn(self.emb(ids))[0]).reshape(-1, 50)

    model = LM()
    g = torch.Generator().manual_seed(3)
    data = iter(lambda: (torch.randint(0, 50, (8, 12), generator=g), torch.randint(0, 50, (96,), generator=g)), None)
    tel = train(tmp_path / "lm", model, torch.optim.Adam(model.parameters(), lr=1e-3), th, steps=3, data=data,
                detail_every=1)
    # each of the four LSTM matrices has std 1/sqrt(3 * 24), fan-in 16 (layer-0 input) or 24
    gains = sorted(1 / np.sqrt(3 * 24) * np.sqrt(f) for f in (16, 24, 24, 24))
    assert tel.series("init_gain", "rnn")[1][0] == pytest.approx(np.median(gains), rel=0.1)
    assert "emb" not in tel.entities("init_gain")  # a lookup table, not a weight layer
    assert not {"input_mean", "input_std", "input_absmax"} & set(tel.metrics())
    assert tel.series("input_token_distinct_frac")[1].min() > 0.3  # 96 ids drawn from 50
    meta = read_run_json(tmp_path / "lm")
    assert meta["probe"]["input"] == {"floating": False, "dtype": "torch.int64", "shape": [8, 12]}
    assert meta["layers"] == ["emb", "rnn", "head"]
    assert tel.series("act_out_std", "rnn")[1].min() > 0  # the first tensor of the LSTM's tuple output
    assert meta["probe"]["errors"]["total"] == 0


def test_saturated_sigmoid_inputs_seen_through_functional_activations(tmp_path, th):
    def run(name, gain):
        model = Functional(torch.sigmoid, gain=gain)
        return train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=6, scale=2.0)

    healthy, bad = run("h", 1.0), run("b", 12.0)
    for layer in ("fc2", "head"):  # their inputs are sigmoid outputs
        assert healthy.series("act_in_sat_frac", layer)[1].max() < 0.01
        assert bad.series("act_in_sat_frac", layer)[1].min() > 0.25
    assert "fc1" not in healthy.entities("act_in_sat_frac")  # the raw input is not bounded in [-1, 1]
    assert healthy.series("act_in_sat_frac", "fc2")[0].tolist() == [0, 5]  # detail steps only


def test_dead_relu_inputs_from_negative_biases(tmp_path, th):
    def run(name, bias):
        model = Functional(F.relu, bias=bias)
        return train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=6)

    healthy, bad = run("h", None), run("b", -8.0)
    for layer in ("fc2", "head"):
        assert healthy.series("act_in_dead_frac", layer)[1].max() < 0.1
        assert bad.series("act_in_dead_frac", layer)[1].min() > 0.95
    assert "fc2" not in bad.entities("act_in_sat_frac")  # ReLU output: many exact zeros, not a bounded activation
    assert healthy.series("act_out_std", "fc2")[1][0] > 0.1
    assert bad.series("act_out_std", "fc2")[1][0] == 0.0  # its input is all zeros: only the bias is left


def test_units_born_dead_are_told_apart_from_units_killed_by_training(tmp_path):
    """UnitsDeadAtInit needs the units dead before the first update: biases initialised at -8 give it; the same
    biases pushed to -8 half-way through the run (what a huge update does) give DeadUnits alone."""
    th = Thresholds.from_store(knowledge_store())

    def run(name, bias_at):
        model = Functional(F.relu)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        data = batches()
        with debugtune.attach(model, opt, tmp_path / name, hardware=False, thresholds=th, detail_every=4) as probe:
            for step in range(80):
                if step == bias_at:
                    with torch.no_grad():
                        for fc in (model.fc1, model.fc2):
                            fc.bias.fill_(-8.0)
                opt.zero_grad()
                x, y = next(data)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                probe.log(loss=loss.item())
        return diagnose_run(tmp_path / name, th, ["gradient"])

    healthy, born, killed = run("h", None), run("born", 0), run("killed", 40)
    symptoms = {name: {f.symptom for f in d.findings} for name, d in (("h", healthy), ("born", born),
                                                                     ("killed", killed))}
    assert "UnitsDeadAtInit" in healthy.judged and not {"UnitsDeadAtInit", "DeadUnits"} & symptoms["h"]
    assert {"UnitsDeadAtInit", "DeadUnits"} <= symptoms["born"]
    assert "DeadUnits" in symptoms["killed"] and "UnitsDeadAtInit" not in symptoms["killed"]
    (f,) = [f for f in born.findings if f.symptom == "UnitsDeadAtInit"]
    assert f.evidence["act_in_dead_frac_at_init"] == 1.0 and f.evidence["first_step"] == 0


def test_unnormalised_inputs_and_one_bad_batch(tmp_path, th):
    def run(name, **kw):
        model = mlp()
        return train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=1e-4), th, steps=12, **kw)

    healthy, scaled = run("h"), run("x255", scale=255.0)
    assert 0.8 < healthy.series("input_std")[1].min() and healthy.series("input_std")[1].max() < 1.2
    assert scaled.series("input_std")[1].min() > 200 and scaled.series("input_absmax")[1][0] > 500
    assert abs(healthy.series("input_mean")[1]).max() < 0.2
    assert healthy.series("input_std")[0].tolist() == list(range(12))  # every recorded step
    ratio = healthy.series("input_feature_scale_ratio")
    assert ratio[0].tolist() == [0, 5, 10] and ratio[1].max() < 1.6  # same scale for every feature

    spike = run("spike", batch_scale=lambda s: 50.0 if s == 7 else 1.0)
    std = spike.series("input_std")[1]
    assert std[7] > 30 * np.median(std) and np.delete(std, 7).max() < 1.2

    mixed = mlp()  # one feature 1000x the others: the per-feature scale tells it
    scale = torch.ones(16)
    scale[3] = 1000.0
    tel = train(tmp_path / "mixed", mixed, torch.optim.SGD(mixed.parameters(), lr=1e-6), th, steps=1,
                batch_scale=lambda s: scale)
    assert tel.series("input_feature_scale_ratio")[1][0] > 500


def test_a_batch_of_one_repeated_token_is_an_outlier_batch_and_a_padded_one_is_not(tmp_path):
    """Token ids have no scale; their diversity is the batch's level: a batch of one repeated id (a broken shard)
    is found from the probe's input_token_distinct_frac; a healthy stream of varied batches is not, nor are
    batches padded to the longest sequence (the padding id, the most frequent, is left out of the count)."""
    th = Thresholds.from_store(knowledge_store())

    def run(name, bad_steps, padded=()):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(20000, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 96, 200))
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(1)

        def stream():
            for step in range(40):
                ids = torch.randint(1, 20000, (16, 96), generator=g)
                if step in padded:  # one long sequence, the others 2 ids then padding id 0
                    ids[1:, 2:] = 0
                yield (torch.full_like(ids, 7) if step in bad_steps else ids), torch.randint(0, 200, (16,), generator=g)

        tel = train(tmp_path / name, model, opt, th, steps=40, data=stream(), detail_every=10)
        return tel, diagnose_run(tmp_path / name, th, ["convergence"])

    for name, padded in (("h", ()), ("padded", range(10, 40, 3))):
        healthy, found = run(name, (), padded)
        assert 0.4 < healthy.series("input_token_distinct_frac")[1].min()
        assert "InputBatchOutlier" in found.judged and "InputBatchOutlier" not in {f.symptom for f in found.findings}
    bad, found = run("b", (25, 26))
    frac = bad.series("input_token_distinct_frac")[1]
    assert frac[25] == frac[26] == 0.0 and np.delete(frac, [25, 26]).min() > 0.4
    (f,) = [f for f in found.findings if f.symptom == "InputBatchOutlier"]
    assert f.onset_step == 25 and f.evidence["ratio"] > 50 and "batch_distinct_frac" in f.evidence


def test_the_output_gradient_names_the_loss_behind_the_outputs(tmp_path, th):
    """A sigmoid ending the model is correct before BCELoss and a mismatch before BCEWithLogitsLoss; the outputs
    look the same, the output gradient does not. A sigmoid in the loss code is invisible to the output hook."""
    targets = batches(classes=4)
    multi = ((x, F.one_hot(y, 4).float()) for x, y in targets)

    found = {}

    def run(name, squash, loss_fn):
        base = mlp()
        model = torch.nn.Sequential(base, torch.nn.Sigmoid()) if squash else base
        tel = train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=6, data=multi,
                    loss_fn=loss_fn)
        found[name] = {f.symptom for f in diagnose_run(tmp_path / name, Thresholds.from_store(knowledge_store()),
                                                       ["convergence"]).findings}
        return {h: float(np.median(tel.series("output_loss_identity", h)[1]))
                for h in tel.entities("output_loss_identity")}

    bce = run("bce", True, F.binary_cross_entropy)
    twice = run("twice", True, F.binary_cross_entropy_with_logits)
    in_loss = run("in_loss", False, lambda out, y: F.binary_cross_entropy_with_logits(out.sigmoid(), y))
    assert bce["bce_probs"] > 0.9 and bce["sigmoid_logits"] < 0.1
    assert twice["sigmoid_logits"] > 0.9 and twice["bce_probs"] < 0.1
    assert in_loss["sigmoid_twice"] > 0.9 and in_loss["sigmoid_logits"] < 0.1
    wiring = {"OutputsNotLogits", "SquashBeforeLogitLoss"}
    assert found["bce"] & wiring == set()  # correct as wired: not even the set-up fact is reported
    assert found["twice"] & wiring == wiring
    assert found["in_loss"] & wiring == {"SquashBeforeLogitLoss"}


class _Spread(torch.nn.Module):
    """Logits driven hundreds apart, as a learning rate far too high leaves them."""

    def forward(self, x):
        return 1000.0 * x


def test_a_saturated_softmax_is_not_a_relu_before_the_loss(tmp_path, th):
    """Logits hundreds apart round most softmax probabilities to exactly 0, so the negative outputs' gradients are
    exact zeros, as a ReLU in the loss code gives, while the softmax's own ratios lose precision: the ReLU
    hypothesis explains more elements than the loss that produced the gradient. The ReLU hypotheses are not
    judged on such steps; a ReLU in the loss code on logits of the usual spread still is."""
    found = {}

    def run(name, model, loss_fn):
        tel = train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=1e-4), th, steps=6,
                    loss_fn=loss_fn)
        found[name] = {f.symptom for f in diagnose_run(tmp_path / name, Thresholds.from_store(knowledge_store()),
                                                       ["convergence"]).findings}
        return tel

    spread = run("spread", torch.nn.Sequential(mlp(), _Spread()), F.cross_entropy)
    relu = run("relu", mlp(), lambda out, y: F.cross_entropy(out.relu(), y))
    span = spread.series("output_max")[1] - spread.series("output_min")[1]
    assert span.min() > th["convergence.loss_identity.saturation_span"]
    shares = {h: np.median(spread.series("output_loss_identity", h)[1]) for h in ("relu_softmax", "softmax_logits")}
    assert shares["relu_softmax"] > shares["softmax_logits"]  # the zeros look like a ReLU
    assert "SquashBeforeLogitLoss" not in found["spread"]
    assert np.median(relu.series("output_loss_identity", "relu_softmax")[1]) > 0.9
    assert "SquashBeforeLogitLoss" in found["relu"]


def test_log_softmax_before_nll_is_correct_as_wired(tmp_path, th):
    """The PyTorch MNIST example's wiring: log_softmax in the model, NLLLoss after it. Every output is negative
    and only the target has a gradient; that is NLL of log-probabilities, not a ReLU in the loss code."""
    model = torch.nn.Sequential(mlp(), torch.nn.LogSoftmax(dim=1))
    tel = train(tmp_path / "run", model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=6,
                loss_fn=F.nll_loss)
    assert tel.series("output_loss_identity", "nll_logprobs")[1].min() > 0.9
    assert tel.series("output_loss_identity", "relu_softmax")[1].max() == 0.0
    found = {f.symptom for f in diagnose_run(tmp_path / "run", Thresholds.from_store(knowledge_store()),
                                             ["convergence"]).findings}
    assert not found & {"OutputsNotLogits", "SquashBeforeLogitLoss"}


class _Gate(torch.nn.Module):
    """Squeeze-excitation on features: a sigmoid whose output multiplies the signal that flows past it."""

    def __init__(self, d):
        super().__init__()
        self.squeeze, self.excite = torch.nn.Linear(d, d // 4), torch.nn.Linear(d // 4, d)
        self.gate = torch.nn.Sigmoid()

    def forward(self, h):
        return h * self.gate(self.excite(self.squeeze(h).relu()))


def test_gates_are_not_hidden_activations(tmp_path, th):
    """Gates switch a signal on or off, so they sit near 0 or 1 and their slope is small by design: a healthy
    squeeze-excitation MLP is no saturating-activation fault. The probe tells them apart by what a weight layer
    takes as input: a hidden sigmoid's own output (through a dropout too), never a gate's."""
    torch.manual_seed(0)
    gated = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), _Gate(32), torch.nn.Linear(32, 32),
                                torch.nn.ReLU(), _Gate(32), torch.nn.Linear(32, 4))
    hidden = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Sigmoid(), torch.nn.Dropout(0.1),
                                 torch.nn.Linear(32, 32), torch.nn.Sigmoid(), torch.nn.Linear(32, 4))
    probe, found = {}, {}
    for name, model in (("gated", gated), ("hidden", hidden)):
        with torch.no_grad():  # the gates pushed towards their bounds, as trained gates sit
            for m in model.modules():
                if isinstance(m, _Gate):
                    m.excite.bias.fill_(6.0)
        train(tmp_path / name, model, torch.optim.Adam(model.parameters(), lr=1e-3), th, steps=30)
        probe[name] = read_run_json(tmp_path / name)["probe"]
        found[name] = {f.symptom for f in diagnose_run(tmp_path / name, Thresholds.from_store(knowledge_store()),
                                                       ["gradient"]).findings}
    assert probe["gated"]["hidden_bounded"] == [] and probe["gated"]["gates"] == ["2.gate", "5.gate"]
    assert not found["gated"] & {"ActivationSaturation", "BoundedActivationsAttenuate"}
    assert probe["hidden"]["hidden_bounded"] == ["1", "4"] and probe["hidden"]["gates"] == []
    assert "BoundedActivationsAttenuate" in found["hidden"]


def _narrow_logits(seed=0):
    """An MLP whose logits all sit inside (0, 1): small output weights over a bias of 0.3, as a network that
    barely learns (sigmoid hidden layers, a tiny learning rate) leaves them."""
    model = mlp(seed=seed)
    with torch.no_grad():
        model[-1].weight.mul_(0.01)
        model[-1].bias.fill_(0.3)
    return model


def test_logits_inside_the_unit_interval_are_not_a_sigmoid(tmp_path, th):
    """By their range alone such logits look like a sigmoid's outputs; the probe sees that the model returned the
    last weight layer's own tensor, so no activation squashed them, and cross-entropy on them is correctly wired.
    The same logits through a real sigmoid are still squashed before a loss that applies its own softmax, and so
    is the layer's own tensor once an in-place activation rewrote it (its version counter moved)."""
    found, tel = {}, {}
    for name, model in (("logits", _narrow_logits()),
                        ("sigmoid", torch.nn.Sequential(_narrow_logits(), torch.nn.Sigmoid())),
                        ("inplace", torch.nn.Sequential(_narrow_logits(), torch.nn.ReLU(inplace=True)))):
        tel[name] = train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=1e-4), th, steps=6)
        found[name] = {f.symptom for f in diagnose_run(tmp_path / name, Thresholds.from_store(knowledge_store()),
                                                       ["convergence"]).findings}
    assert tel["logits"].series("output_max")[1].max() < 1 and tel["logits"].series("output_min")[1].min() > 0
    assert tel["logits"].series("output_from_layer_frac")[1].min() == 1.0
    assert tel["sigmoid"].series("output_from_layer_frac")[1].max() == 0.0
    assert tel["inplace"].series("output_from_layer_frac")[1].max() == 0.0  # the layer's tensor, rewritten in place
    assert "OutputsNotLogits" in found["inplace"]
    assert not found["logits"] & {"OutputsNotLogits", "SquashBeforeLogitLoss"}
    assert {"OutputsNotLogits", "SquashBeforeLogitLoss"} <= found["sigmoid"]


def test_softmax_inside_the_model_shows_in_its_output(tmp_path, th):
    def run(name, softmax):
        base = mlp()
        model = torch.nn.Sequential(base, torch.nn.Softmax(dim=1)) if softmax else base
        return train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=6)

    healthy, bad = run("h", False), run("b", True)
    assert healthy.series("output_simplex_frac")[1].max() == 0.0 and healthy.series("output_min")[1][0] < 0
    assert bad.series("output_simplex_frac")[1].min() == 1.0
    assert bad.series("output_min")[1].min() >= 0 and bad.series("output_max")[1].max() <= 1
    assert bad.series("output_std")[0].tolist() == [0, 5]


@pytest.mark.parametrize("kind", ["every step", "set_to_none False", "accumulate 4", "never", "every 10th"])
def test_stale_gradients_and_their_cosine(tmp_path, th, kind):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kw = {"every step": {}, "set_to_none False": {"set_to_none": False}, "accumulate 4": {"accumulate": 4},
          "never": {"zero_every": 0}, "every 10th": {"zero_every": 10}}[kind]
    tel = train(tmp_path / "run", model, opt, th, steps=30, **kw)
    stale = tel.series("grad_stale_frac")[1]
    cos = tel.series("grad_cos_prev")[1]
    if kind == "never":
        assert stale[0] == 0 and stale[1:].min() == 1.0  # step 0: the gradients were None at attach
        assert np.median(cos[5:]) > 0.95
    elif kind == "every 10th":
        assert stale[1:].mean() == pytest.approx(0.9, abs=0.05)
    else:
        assert stale.max() == 0.0
        assert np.median(cos) < 0.8
    for layer in ("0", "2", "4"):
        assert tel.series("grad_stale_frac", layer)[1][1:].mean() == pytest.approx(stale[1:].mean())


def test_gan_two_backwards_and_a_second_optimizer(tmp_path, th):
    """D: zero_grad, backward(real), backward(fake), step; G: zero_grad, backward through D, step. The probe sits
    on D's optimizer: D's gradients are never stale; G is outside it but another optimizer updates it."""
    torch.manual_seed(0)

    class GAN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.G = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
            self.D = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LeakyReLU(0.2), torch.nn.Linear(32, 1))

    gan = GAN()
    opt_d = torch.optim.Adam(gan.D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gan.G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = F.binary_cross_entropy_with_logits
    g = torch.Generator().manual_seed(1)
    with debugtune.attach(gan, opt_d, tmp_path / "gan", hardware=False, thresholds=th, detail_every=5):
        for _ in range(12):
            real = torch.randn(32, 16, generator=g) + 2
            fake = gan.G(torch.randn(32, 8, generator=g))
            opt_d.zero_grad()
            bce(gan.D(real), torch.ones(32, 1)).backward()
            bce(gan.D(fake.detach()), torch.zeros(32, 1)).backward()
            opt_d.step()
            opt_g.zero_grad()
            bce(gan.D(fake), torch.ones(32, 1)).backward()  # also accumulates into D's gradients
            opt_g.step()
    tel = read_telemetry(tmp_path / "gan")
    assert tel.series("grad_stale_frac")[1].max() == 0.0
    assert [tel.series("in_optimizer", e)[1][0] for e in ("D.0", "D.2", "G.0", "G.2")] == [1, 1, 0, 0]
    assert tel.series("update_ratio", "G.0")[1].min() > 0  # opt_g moved it between two of opt_d's steps
    assert tel.series("update_ratio", "G.0")[0].tolist() == [0, 5, 10]
    names = read_run_json(tmp_path / "gan")["probe"]["params"]["not_in_optimizer_names"]
    assert names == ["G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias"]


def test_layers_left_out_of_the_optimizer_versus_frozen(tmp_path, th):
    def run(name, mode):
        model = mlp(depth=3)
        first_two = [p for m in (model[0], model[2]) for p in m.parameters()]
        if mode == "frozen":
            for p in first_two:
                p.requires_grad_(False)
        params = [p for p in model.parameters() if all(p is not q for q in first_two)]
        return train(tmp_path / name, model, torch.optim.SGD(params, lr=0.1), th, steps=11), read_run_json(
            tmp_path / name)["probe"]

    left, meta_left = run("left", "left out")
    frozen, meta_frozen = run("frozen", "frozen")
    assert [left.series("in_optimizer", e)[1][0] for e in ("0", "2", "4", "6")] == [0, 0, 1, 1]
    assert frozen.entities("in_optimizer") == ["4", "6"]  # frozen layers have nothing trainable to leave out
    assert meta_left["params"]["not_in_optimizer_names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert meta_frozen["params"]["not_in_optimizer_names"] == []
    # optimizer.zero_grad() clears only the optimizer's parameters: the left-out layers' gradients pile up
    assert left.series("grad_stale_frac", "0")[1][1:].min() == 1.0
    assert left.series("grad_stale_frac", "4")[1].max() == 0.0
    assert frozen.entities("grad_stale_frac") == ["", "4", "6"] and frozen.series("grad_stale_frac")[1].max() == 0
    assert left.series("update_ratio", "0")[1].max() == 0.0  # nothing moves them
    assert left.series("update_ratio", "4")[1].min() > 0


def test_router_bias_and_logit_spread(tmp_path, th):
    class MoE(torch.nn.Module):
        def __init__(self, bias):
            super().__init__()
            torch.manual_seed(0)
            self.gate = torch.nn.Linear(16, 4)
            self.experts = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))
            self.head = torch.nn.Linear(16, 4)
            with torch.no_grad():
                self.gate.bias.zero_()
                self.gate.bias[0] = bias

        def forward(self, x):
            logits = self.gate(x)
            idx = logits.argmax(dim=1)
            w = torch.softmax(logits, dim=1).gather(1, idx[:, None])
            h = torch.stack([self.experts[i](x[k]) for k, i in enumerate(idx.tolist())]) * w
            return self.head(h)

    def run(name, bias):
        model = MoE(bias)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        data = batches()
        with debugtune.attach(model, opt, tmp_path / name, hardware=False, thresholds=th, detail_every=2) as probe:
            probe.watch_router(model.gate, num_experts=4, top_k=1, name="gate")
            for _ in range(5):
                x, y = next(data)
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
        return read_telemetry(tmp_path / name)

    healthy, biased = run("h", 0.0), run("b", 8.0)
    assert healthy.series("router_bias_spread", "gate")[1][0] == 0.0
    assert biased.series("router_bias_spread", "gate")[1][0] == pytest.approx(8.0)
    assert healthy.series("router_weight_std", "gate")[1][0] > 0
    assert healthy.series("router_logit_spread", "gate")[1].max() < 1.0
    assert biased.series("router_logit_spread", "gate")[1].min() > 6.0
    assert biased.series("router_logit_spread", "gate")[0].tolist() == [0, 2, 4]


def test_forward_order_is_the_run_order_not_the_registration_order(tmp_path, th):
    class Backwards(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.out = torch.nn.Linear(32, 4)  # registered first, runs last
            self.norm = torch.nn.LayerNorm(32)
            self.inp = torch.nn.Linear(16, 32)

        def forward(self, x):
            return self.out(self.norm(F.relu(self.inp(x))))

    model = Backwards()
    tel = train(tmp_path / "run", model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=2)
    meta = read_run_json(tmp_path / "run")
    assert meta["layers"] == ["inp", "norm", "out"] == meta["probe"]["forward_order"]
    assert meta["probe"]["layer_kinds"] == {"out": "Linear", "norm": "LayerNorm", "inp": "Linear"}
    assert sorted(tel.entities("init_gain")) == ["inp", "out"]  # a norm is not a weight layer


def test_evidence_never_changes_the_training(tmp_path, th):
    """Every hook active on every step (detail_every=1) on a model with an embedding, an LSTM, dropout, a
    functional activation and a second backward per step: losses and parameters bit for bit equal."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(30, 8)
            self.rnn = torch.nn.GRU(8, 16, batch_first=True)
            self.drop = torch.nn.Dropout(0.3)
            self.head = torch.nn.Linear(16, 30)

        def forward(self, ids):
            return self.head(torch.tanh(self.drop(self.rnn(self.emb(ids))[0][:, -1])))

    def run(run_dir):
        torch.manual_seed(5)
        torch.use_deterministic_algorithms(True)
        model = Net()
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(9)
        probe = debugtune.attach(model, opt, run_dir, hardware=False, thresholds=th, detail_every=1) \
            if run_dir else None
        losses = []
        for _ in range(8):
            opt.zero_grad()
            for _ in range(2):
                ids = torch.randint(0, 30, (6, 5), generator=g)
                loss = F.cross_entropy(model(ids), ids[:, 0])
                loss.backward()
            opt.step()
            losses.append(loss.item())
        if probe:
            probe.close()
        return losses, [p.detach().clone() for p in model.parameters()]

    plain, p0 = run(None)
    probed, p1 = run(tmp_path / "run")
    assert probed == plain
    assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))
    meta = read_run_json(tmp_path / "run")["probe"]
    assert meta["errors"]["total"] == 0
    tel = read_telemetry(tmp_path / "run")
    assert len(tel.series("grad_cos_prev")[1]) == 7
    assert tel.series("output_loss_identity", "softmax_logits")[1].min() > 0.9  # the gradient hook ran, read only


def test_a_step_skipped_by_grad_scaler_leaves_no_stale_gradient(tmp_path, th):
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4)
    data = batches()
    with debugtune.attach(model, opt, tmp_path / "run", hardware=False, thresholds=th):
        for step in range(8):
            x, y = next(data)
            if step == 3:
                x[0, 0] = float("inf")  # inf gradients: the scaler skips optimizer.step()
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
    tel = read_telemetry(tmp_path / "run")
    assert tel.series("skipped_iterations")[0].tolist() == [3]
    assert tel.series("grad_stale_frac")[1].max() == 0.0


def test_forward_gain_is_not_judged_on_probability_outputs(tmp_path, th):
    """A too-small initialisation shrinks the logits (ForwardSignalVanishing); the same layers in front of a
    sigmoid are not judged, since the sigmoid's slope and not the layers would set the output's spread."""
    from debugtune.engine.diagnose import diagnose_run

    def run(name, squash):
        base = mlp(depth=3)
        with torch.no_grad():
            for m in base:
                if isinstance(m, torch.nn.Linear):
                    m.weight.mul_(0.05)
                    m.bias.zero_()
        model = torch.nn.Sequential(base, torch.nn.Sigmoid()) if squash else base
        train(tmp_path / name, model, torch.optim.SGD(model.parameters(), lr=0.1), th, steps=12)
        return diagnose_run(tmp_path / name, th)

    logits, probs = run("logits", False), run("probs", True)
    assert "ForwardSignalVanishing" in {f.symptom for f in logits.findings}
    assert "ForwardSignalVanishing" not in probs.judged
    assert any("ForwardSignalVanishing" in n and "within [0, 1]" in n for n in probs.notes)


def test_a_relu_network_is_judged_to_have_nothing_that_attenuates(tmp_path, th):
    """No bounded module and no weight layer whose input looked bounded: BoundedActivationsAttenuate is judged and
    absent, not "not judged". A cause that reaches a symptom only through it (a learning rate too high, whose large
    updates would push sigmoids into their tails) then cannot claim what lies behind it. Functional sigmoids are
    seen at the layers they feed and keep it judged and found."""
    model = mlp()
    train(tmp_path / "relu", model, torch.optim.Adam(model.parameters(), lr=1e-3), th, steps=20)
    d = diagnose_run(tmp_path / "relu", Thresholds.from_store(knowledge_store()), ["gradient"])
    assert "BoundedActivationsAttenuate" in d.judged
    assert "BoundedActivationsAttenuate" not in {f.symptom for f in d.findings}
    functional = Functional(torch.sigmoid)
    train(tmp_path / "sigmoid", functional, torch.optim.Adam(functional.parameters(), lr=1e-3), th, steps=60)
    d = diagnose_run(tmp_path / "sigmoid", Thresholds.from_store(knowledge_store()), ["gradient"])
    assert "BoundedActivationsAttenuate" in {f.symptom for f in d.findings}
