"""An adaptive optimizer at its usual large learning rate: a small CNN on the 8x8 digits with Adadelta lr 1.0.

Adadelta (Zeiler 2012, "ADADELTA: an adaptive learning rate method") scales each step by the ratio of
running RMS of past updates to past gradients; its nominal learning rate is 1.0 (PyTorch's default)
and the effective step is set by rho and eps, not by ``lr``. The model is two 3x3 convolutions with
ReLU and average pooling, then a hidden dense layer and the head, cross-entropy on logits, with an
exponential decay of 0.998 per step.

Its telemetry looks alarming to a rule written for SGD: the logged learning rate is 1.0, and the
update-to-weight ratio is tiny in the first steps (Adadelta's accumulators start at zero, so steps
start at about sqrt(eps)) and then grows. Learning is measured on the held-out split: accuracy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, accuracy, as_series, resolve_steps, verdict
from debugtune.scenarios import tabular
from debugtune.scenarios.common import probe_session, seed_everything

BATCH = 64
LR, RHO, GAMMA = 1.0, 0.9, 0.998
STEPS = 300
MIN_STEPS = 200
EVAL_EVERY = 25
# learned: held-out accuracy of at least 0.9 on ten classes (chance 0.1)
ACCURACY_BAR = 0.9


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 12, 3, padding=1)
        self.conv2 = nn.Conv2d(12, 24, 3, padding=1)
        self.fc = nn.Linear(24 * 4 * 4, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.head(F.relu(self.fc(x.flatten(1))))


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("adadelta_cnn", steps, STEPS)
    seed_everything(seed)
    data = tabular.load("digits")
    x_train = torch.from_numpy(data.x_train).reshape(-1, 1, 8, 8)
    x_test = torch.from_numpy(data.x_test).reshape(-1, 1, 8, 8)
    y_train, y_test = torch.from_numpy(data.y_train), torch.from_numpy(data.y_test)
    model = DigitsCNN()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=LR, rho=RHO)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=GAMMA)
    sampler = tabular.BatchSampler(len(x_train), BATCH, seed)
    start_acc = accuracy(model, x_test, y_test)
    losses, eval_acc = [], []
    meta = {"program": "adadelta_cnn", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, activations=True, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            idx = torch.from_numpy(sampler.next())
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            lr = optimizer.param_groups[0]["lr"]
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            metrics = {"loss": losses[-1], "lr": lr}
            if step % EVAL_EVERY == 0 or step == n_steps - 1:
                eval_acc.append(accuracy(model, x_test, y_test))
                metrics["eval_accuracy"] = eval_acc[-1]
            if pr is not None:
                pr.log(**metrics)
    final_acc = accuracy(model, x_test, y_test)
    checks = [Check("test_accuracy", final_acc, ">=", ACCURACY_BAR)]
    summary = verdict(checks, start_test_accuracy=start_acc, final_loss=float(np.mean(losses[-20:])),
                      chance_loss=float(np.log(10)))
    return as_series(loss=losses), summary
