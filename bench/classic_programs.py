"""Healthy programs of the classic example shapes, attached and diagnosed as a user would: how many get a cause.

The held-out suite of issue 31 counts "classic healthy example programs (each verified to learn) named with a
cause" (goal ≤ 1 of 20). These are shapes of well-known examples, written here from their descriptions (layers,
optimizer, rate, schedule), not copied, on data that needs no download: scikit-learn's 8×8 digits (scaled to
28×28 for the image programs), its breast-cancer table, sines and a repeated sentence. None of them is a family
of the fault bench, so none was calibrated on; a program named here is a false positive on an unseen shape.

    python -m bench.classic_programs [--seeds 2] [--only NAME ...] [--json]

Each run trains on the CPU through ``debugtune.attach`` for a few hundred steps, checks that it learnt (its last
tenth of losses below its first loss), and prints the causes, the findings and the signs of health.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

import debugtune
from bench.classic_base import Data, Program, Step, update
from bench.classic_moe import mixtral_rows, switch_lm
from debugtune.api import diagnose
from debugtune.engine.infer import DiagnosisReport

__all__ = ["PROGRAMS", "Data", "Program", "late_loss", "train"]


def _classify(model: nn.Module, opt: torch.optim.Optimizer, d: Data, x: torch.Tensor,
              loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy) -> Step:
    def step() -> float:
        i = d.batch()
        return update(opt, lambda: loss(model(x[i]), d.y[i]))
    return step


def mnist_adadelta(d: Data) -> Program:
    """Two convolutions, dropout, a 128-unit layer; Adadelta at 1.0 with the rate × 0.7 every epoch."""
    model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Dropout(0.25), nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(128, 10), nn.LogSoftmax(1))
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    return Program(model, opt, _classify(model, opt, d, d.img, F.nll_loss), 200,
                   torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7), 28)


def lenet_tanh(d: Data) -> Program:
    """LeNet-5: tanh and average pooling; SGD 0.1 with momentum 0.9."""
    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2), nn.Conv2d(6, 16, 5), nn.Tanh(),
                          nn.AvgPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.Tanh(), nn.Linear(120, 84),
                          nn.Tanh(), nn.Linear(84, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Program(model, opt, _classify(model, opt, d, d.img), 300)


def mlp_sgd(d: Data) -> Program:
    """The beginner tutorial's 784-512-512-10 ReLU MLP; SGD 0.01 with momentum 0.9."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return Program(model, opt, _classify(model, opt, d, d.img), 300)


def logreg_raw(d: Data) -> Program:
    """Softmax regression on the raw pixel intensities (0-16); SGD 0.01."""
    model = nn.Linear(64, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return Program(model, opt, _classify(model, opt, d, d.raw), 400)


class _Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                  nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.body(x))


def resnet_bn(d: Data) -> Program:
    """A small residual network with batch norm; SGD 0.1, momentum 0.9, weight decay 5e-4, cosine schedule."""
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), _Block(16),
                          nn.MaxPool2d(2), _Block(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return Program(model, opt, _classify(model, opt, d, d.img), 300,
                   torch.optim.lr_scheduler.CosineAnnealingLR(opt, 300))


class _RowEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.pos = nn.Linear(8, 64), nn.Parameter(torch.zeros(1, 8, 64))
        self.body = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, 0.1, batch_first=True), 2)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.embed(x.view(-1, 8, 8)) + self.pos).mean(1))


def transformer_rows(d: Data) -> Program:
    """A two-layer Transformer encoder over the image's 8 rows; AdamW 5e-4 with a 30-step linear warm-up."""
    model = _RowEncoder()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    return Program(model, opt, _classify(model, opt, d, d.flat), 300,
                   torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / 30)))


class _RowLSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.drop = nn.LSTM(28, 64, batch_first=True), nn.Dropout(0.25)
        self.head = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10), nn.LogSoftmax(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x.view(-1, 28, 28))
        return self.head(self.drop(out[:, -1]))


def mnist_rnn(d: Data) -> Program:
    """An LSTM reading the image row by row; Adadelta 0.1 with the rate × 0.7 every 100 steps."""
    model = _RowLSTM()
    opt = torch.optim.Adadelta(model.parameters(), lr=0.1)
    return Program(model, opt, _classify(model, opt, d, d.img, F.nll_loss), 300,
                   torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7), 100)


def conv_autoencoder(d: Data) -> Program:
    """A strided-convolution autoencoder; MSE, Adam 1e-3."""
    model = nn.Sequential(nn.Conv2d(1, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                          nn.ConvTranspose2d(32, 16, 3, 2, 1, 1), nn.ReLU(), nn.ConvTranspose2d(16, 1, 3, 2, 1, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> float:
        x = d.img[d.batch()]
        return update(opt, lambda: F.mse_loss(model(x), x))
    return Program(model, opt, step, 300)


def fcn_segment(d: Data) -> Program:
    """A fully convolutional segmenter (dilated convolutions, so that a pixel sees most of its digit): every stroke
    pixel (above 0.3 on the pixel scale) labelled with its digit's class, the background with an eleventh;
    per-pixel cross-entropy over the (N, 11, 28, 28) map, batches of 32, Adam 1e-3."""
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=2, dilation=2),
                          nn.ReLU(), nn.Conv2d(32, 32, 3, padding=4, dilation=4), nn.ReLU(), nn.Conv2d(32, 11, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    stroke = d.pixels()[:, 0] > 0.3  # the stroke as drawn, whatever the images' later scale

    def step() -> float:
        i = d.batch(32)
        target = torch.where(stroke[i], d.y[i, None, None], 10)  # the digit's label, as the labels say it
        return update(opt, lambda: F.cross_entropy(model(d.img[i]), target))
    return Program(model, opt, step, 200)


def huber_rows(d: Data) -> Program:
    """Regression of the ink in a digit's lower half from its upper four rows: a 32-32 ReLU MLP with one output,
    Huber loss (``smooth_l1_loss``), Adam 1e-3."""
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ink = d.flat[:, 32:].sum(1, keepdim=True)
    target = (ink - ink.mean()) / ink.std()  # standardised once: the inputs' scale is the program's own

    def step() -> float:
        i = d.batch()
        return update(opt, lambda: F.smooth_l1_loss(model(d.flat[i, :32]), target[i]))
    return Program(model, opt, step, 300)


class _VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.mu, self.logvar = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20)
        self.dec = nn.Sequential(nn.Linear(20, 400), nn.ReLU(), nn.Linear(400, 784), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        return self.dec(mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)), mu, logvar


def vae(d: Data) -> Program:
    """The variational autoencoder of the examples: 784-400-20, summed BCE plus KL, Adam 1e-3."""
    model, pixels = _VAE(), d.pixels().clamp(0, 1).view(-1, 784)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(x: torch.Tensor) -> torch.Tensor:
        rec, mu, logvar = model(x)
        return F.binary_cross_entropy(rec, x, reduction="sum") - 0.5 * torch.sum(1 + logvar - mu**2 - logvar.exp())

    def step() -> float:
        x = pixels[d.batch(128)]
        return update(opt, lambda: loss(x)) / len(x)
    return Program(model, opt, step, 300)


class _Siamese(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tower = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                                   nn.Flatten())
        self.head = nn.Sequential(nn.Linear(9216 * 2, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.head(torch.cat([self.tower(a), self.tower(b)], 1))).squeeze(1)


def siamese(d: Data) -> Program:
    """A siamese CNN saying whether two digits are the same class (half the pairs are); BCE, Adadelta 1.0."""
    model = _Siamese()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    by_class = [torch.nonzero(d.y == k).flatten() for k in range(10)]

    def step() -> float:
        a, b = d.batch(), d.batch()
        same = torch.rand(len(a), generator=d.g) < 0.5
        for j in torch.nonzero(same).flatten().tolist():
            pool = by_class[int(d.y[a[j]])]
            b[j] = pool[torch.randint(0, len(pool), (1,), generator=d.g)]
        return update(opt, lambda: F.binary_cross_entropy(model(d.img[a], d.img[b]), (d.y[a] == d.y[b]).float()))
    return Program(model, opt, step, 200)


def tabular_bn(d: Data) -> Program:
    """The breast-cancer table, standardised: an MLP with batch norm and dropout; BCE on logits, Adam 1e-3."""
    from sklearn.datasets import load_breast_cancer

    table = load_breast_cancer()
    x = torch.tensor(table.data, dtype=torch.float32)
    x, y = (x - x.mean(0)) / x.std(0), torch.tensor(table.target, dtype=torch.float32)
    model = nn.Sequential(nn.Linear(30, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 32),
                          nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step() -> float:
        i = torch.randint(0, len(y), (32,), generator=d.g)
        return update(opt, lambda: F.binary_cross_entropy_with_logits(model(x[i]).squeeze(1), y[i]))
    return Program(model, opt, step, 300)


class _Sines(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell1, self.cell2, self.out = nn.LSTMCell(1, 51), nn.LSTMCell(51, 51), nn.Linear(51, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h1 = c1 = h2 = c2 = torch.zeros(x.size(0), 51)
        outs = []
        for t in range(x.size(1)):
            h1, c1 = self.cell1(x[:, t:t + 1], (h1, c1))
            h2, c2 = self.cell2(h1, (h2, c2))
            outs.append(self.out(h2))
        return torch.cat(outs, 1)


def lstm_sines(d: Data) -> Program:
    """The time-sequence example's two LSTM cells of 51 predicting the next value of shifted sines; MSE, Adam
    1e-2 (the example's LBFGS takes too few steps for a loss curve)."""
    model, t = _Sines(), torch.arange(100).float()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)

    def step() -> float:
        x = torch.sin((t + torch.randint(-40, 40, (32, 1), generator=d.g).float()) / 20.0)
        return update(opt, lambda: F.mse_loss(model(x[:, :-1]), x[:, 1:]))
    return Program(model, opt, step, 200)


class _CharGRU(nn.Module):
    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed, self.out = nn.Embedding(vocab, 32), nn.Linear(128, vocab)
        self.rnn = nn.GRU(32, 128, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.embed(x))[0])


def char_gru(d: Data) -> Program:
    """A character-level GRU language model on a repeated sentence; Adam 2e-3, gradients clipped at 5."""
    text = "the quick brown fox jumps over the lazy dog and then the dog sleeps while the fox runs away " * 40
    vocab = sorted(set(text))
    ids = torch.tensor([vocab.index(c) for c in text])
    model = _CharGRU(len(vocab))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def step() -> float:
        starts = torch.randint(0, len(ids) - 65, (32,), generator=d.g).tolist()
        b = torch.stack([ids[k:k + 65] for k in starts])
        return update(opt, lambda: F.cross_entropy(model(b[:, :-1]).reshape(-1, len(vocab)), b[:, 1:].reshape(-1)),
                       clip=5.0)
    return Program(model, opt, step, 300)


PROGRAMS: dict[str, Callable[[Data], Program]] = {f.__name__: f for f in (
    mnist_adadelta, lenet_tanh, mlp_sgd, logreg_raw, resnet_bn, transformer_rows, mnist_rnn, conv_autoencoder, vae,
    siamese, tabular_bn, lstm_sines, char_gru, switch_lm, mixtral_rows, fcn_segment, huber_rows)}


def train(name: str, seed: int, run_dir: Path,
          inject: Callable[[Data, Program], None] | None = None) -> tuple[list[float], DiagnosisReport]:
    """Train one program with the probe attached (after ``inject`` changed its data or set-up, where given), then
    diagnose it: the batch losses and the report."""
    torch.manual_seed(seed)
    d = Data(seed)
    p = PROGRAMS[name](d)
    if inject is not None:
        inject(d, p)
    losses = []
    with debugtune.attach(p.model, p.opt, run_dir) as probe:
        if p.watch is not None:
            p.watch(probe)
        for i in range(p.steps):
            losses.append(p.step())
            probe.log(None, **{"loss": losses[-1], **(p.metrics() if p.metrics is not None else {})})
            if p.sched is not None and (i + 1) % p.sched_every == 0:
                p.sched.step()
    return losses, diagnose(run_dir)


def late_loss(losses: list[float]) -> float:
    """The loss the run ended at: the median of its last tenth (a mini-batch loss is noisy), or NaN when that tenth
    holds a loss that is not finite (a NaN does not sort, so a median could hide it; a run that went non-finite
    at its end has not recovered)."""
    tail = losses[-max(1, len(losses) // 10):]
    if not all(math.isfinite(x) for x in tail):
        return math.nan
    tail = sorted(tail)
    return tail[len(tail) // 2]


def run(name: str, seed: int, run_dir: Path) -> dict:
    """Train one healthy program and diagnose it: whether it learnt, its causes, findings and signs."""
    losses, report = train(name, seed, run_dir)
    tail = late_loss(losses)
    return {"program": name, "seed": seed, "loss_first": losses[0], "loss_last_tenth": tail,
            "learnt": tail < losses[0], "causes": [[h.cause, round(h.confidence, 2)] for h in report.hypotheses],
            "findings": sorted({f.symptom for f in report.findings}), "signs": [s.symptom for s in report.signs],
            "status": report.status}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.classic_programs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2, help="seeds per program (0, 1, ...)")
    ap.add_argument("--only", nargs="*", choices=sorted(PROGRAMS), help="these programs only")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows, t0 = [], time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or list(PROGRAMS):
            for seed in range(args.seeds):
                row = run(name, seed, Path(tmp) / f"{name}-{seed}")
                rows.append(row)
                if not args.json:
                    named = ", ".join(f"{c} {p:.2f}" for c, p in row["causes"]) or "none"
                    print(f"{name:18s} s{seed}  loss {row['loss_first']:.3g} → {row['loss_last_tenth']:.3g}  "
                          f"causes: {named}  findings: {', '.join(row['findings']) or '-'}  "
                          f"signs: {', '.join(row['signs']) or '-'}", flush=True)
    learnt = [r for r in rows if r["learnt"]]
    named = [r for r in learnt if r["causes"]]
    summary = {"runs": len(rows), "learnt": len(learnt), "named": len(named), "seconds": time.perf_counter() - t0}
    if args.json:
        print(json.dumps({"summary": summary, "runs": rows}, indent=2))
    else:
        print(f"{len(named)} of {len(learnt)} healthy runs that learnt were named with a cause "
              f"({len(rows) - len(learnt)} did not learn and are not counted; {summary['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
