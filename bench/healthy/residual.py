"""A tiny residual CNN with batch norm on synthetic 12x12 shapes, SGD with Nesterov momentum and a cosine schedule.

The images: one of four shapes (a horizontal bar, a vertical bar, a hollow square, a cross) of random
size, position and brightness on a noisy background. The network: a 3x3 stem, two basic residual
blocks (He et al. 2016, "Deep residual learning for image recognition": conv-BN-ReLU-conv-BN plus the
identity, the second block strided with a 1x1 projection), global average pooling and a linear head;
SGD lr 0.1, Nesterov momentum 0.9, weight decay 5e-4, cosine annealing to zero over the run.

Its telemetry: batch norm makes the loss and the gradient scale-free in the weights before it, so
weight decay shrinks those weights while the function is unchanged and the update-to-weight ratio rises
over the run; the learning rate falls to zero at the end, so the last updates are tiny by design;
the training-mode (batch-statistics) loss differs from the eval-mode one. Learning is measured on
held-out images in eval mode: accuracy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, accuracy, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

SIZE, CLASSES = 12, 4
BATCH = 32
LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.9, 5e-4
STEPS = 250
MIN_STEPS = 200
TRAIN_IMAGES, TEST_IMAGES = 2000, 500
# learned: held-out accuracy (eval mode) of at least 0.9 on four classes (chance 0.25)
ACCURACY_BAR = 0.9


def shapes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images [n, 1, SIZE, SIZE] and labels: 0 horizontal bar, 1 vertical bar, 2 hollow square, 3 cross."""
    y = rng.integers(0, CLASSES, size=n)
    x = rng.normal(0.0, 0.4, size=(n, SIZE, SIZE))
    for i in range(n):
        k = int(rng.integers(4, 8))
        r0, c0 = rng.integers(0, SIZE - k + 1, size=2)
        b = rng.uniform(0.8, 1.5)
        mid = k // 2
        patch = np.zeros((k, k))
        if y[i] == 0:
            patch[mid - 1:mid + 1, :] = 1
        elif y[i] == 1:
            patch[:, mid - 1:mid + 1] = 1
        elif y[i] == 2:
            patch[[0, -1], :] = 1
            patch[:, [0, -1]] = 1
        else:
            patch[mid, :] = 1
            patch[:, mid] = 1
        x[i, r0:r0 + k, c0:c0 + k] += b * patch
    return x[:, None].astype(np.float32), y.astype(np.int64)


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class TinyResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("resnet_shapes", steps, STEPS)
    seed_everything(seed)
    rng = np.random.default_rng([seed, 2016])
    x_np, y_np = shapes(TRAIN_IMAGES + TEST_IMAGES, rng)
    x_train, y_train = torch.from_numpy(x_np[:TRAIN_IMAGES]), torch.from_numpy(y_np[:TRAIN_IMAGES])
    x_test, y_test = torch.from_numpy(x_np[TRAIN_IMAGES:]), torch.from_numpy(y_np[TRAIN_IMAGES:])
    model = TinyResNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, nesterov=True,
                                weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=n_steps)
    losses, accs = [], []
    meta = {"program": "resnet_shapes", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            idx = torch.from_numpy(rng.integers(0, TRAIN_IMAGES, size=BATCH))
            logits = model(x_train[idx])
            loss = F.cross_entropy(logits, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            accs.append((logits.argmax(1) == y_train[idx]).float().mean().item())
            if pr is not None:
                metrics = {"train_loss": losses[-1], "train_acc": accs[-1], "lr-SGD": lr}
                if step % 50 == 0 or step == n_steps - 1:
                    metrics["val_acc"] = accuracy(model, x_test, y_test)
                pr.log(**metrics)
    test_acc = accuracy(model, x_test, y_test)
    checks = [Check("test_accuracy", test_acc, ">=", ACCURACY_BAR)]
    summary = verdict(checks, final_train_accuracy=float(np.mean(accs[-20:])), chance_accuracy=1.0 / CLASSES)
    return as_series(loss=losses, accuracy=accs), summary
