"""A Lightning module with debugtune's callback: a small CNN classifying synthetic 12x12 images (a bright bar's
orientation), ``self.log("train_loss")`` and a validation pass as Lightning users write them. Injections: the
optimizer's learning rate, pixels fed raw (0-255 with an offset) instead of normalised, a weight init at the wrong
scale, noisy labels."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from bench.harness2.outcome import Outcome


def _images(n: int, seed: int, noise: float, raw: bool) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * torch.randn(n, 1, 12, 12, generator=g)
    pos = torch.randint(2, 10, (n,), generator=g)
    for i in range(n):  # 0 horizontal, 1 vertical, 2 / 3 the diagonals
        p, c = int(pos[i]), int(y[i])
        if c == 0:
            x[i, 0, p, :] += 1.5
        elif c == 1:
            x[i, 0, :, p] += 1.5
        else:
            idx = torch.arange(12)
            x[i, 0, idx, idx if c == 2 else 11 - idx] += 1.5
    if raw:
        x = (x * 60 + 128).clamp(0, 255)
    flip = torch.rand(n, generator=g) < noise
    y = torch.where(flip, torch.randint(0, 4, (n,), generator=g), y)
    return torch.utils.data.TensorDataset(x, y)


def cnn(run_dir: Path, seed: int = 0, *, lr: float = 2e-3, raw_pixels: bool = False, init_scale: float = 1.0,
        label_noise: float = 0.0, epochs: int = 6) -> Outcome:
    import lightning as L

    from debugtune.integrations.lightning import DebugtuneCallback

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                      nn.Flatten(), nn.Linear(16, 4))
            self.seen: list[float] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            self.seen.append(float(loss))
            return loss

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", F.cross_entropy(self(x), y))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=lr)

    L.seed_everything(seed, verbose=False)
    net = Net()
    if init_scale != 1.0:
        with torch.no_grad():
            for p in net.parameters():
                p.mul_(init_scale)
    train = torch.utils.data.DataLoader(_images(1536, seed, label_noise, raw_pixels), batch_size=32, shuffle=True)
    val = torch.utils.data.DataLoader(_images(256, seed + 100, 0.0, raw_pixels), batch_size=128)
    with tempfile.TemporaryDirectory() as scratch:
        trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=scratch,
                            callbacks=[DebugtuneCallback(run_dir)])
        trainer.fit(net, train, val)
    return Outcome(net.seen)
