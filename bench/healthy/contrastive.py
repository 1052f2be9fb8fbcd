"""Contrastive: SimCLR-style InfoNCE (NT-Xent) on the 8x8 digits, without labels.

Two random views of each image (a shift of up to one pixel, 15% of the pixels dropped, Gaussian
noise) go through an MLP encoder and a projection head; the loss is NT-Xent with temperature 0.5
(Chen et al. 2020, "A simple framework for contrastive learning of visual representations", eq. 1):
cross-entropy of each view against its partner among the 2N-1 other views of the batch.

Its telemetry is not a steadily falling objective: the loss falls fast and then sits on a floor set
by the temperature and the batch (log(2N-1) at chance, never zero), and each step's value depends on
which images share the batch. Learning is measured on held-out digits: two views of one image are more
similar than views of different images (on average, and pair by pair).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios import tabular
from debugtune.scenarios.common import probe_session, seed_everything

BATCH = 64
TEMPERATURE = 0.5
LR = 1e-3
STEPS = 300
MIN_STEPS = 200
POOL = 200
# learned: on held-out digits, positives at least 0.3 more cosine-similar than negatives on average and
# more similar than 85% of the negatives (an untrained encoder: about 0.55; raw pixels: about 0.6)
GAP_BAR, AUC_BAR = 0.3, 0.85


class Encoder(nn.Module):
    """Image → representation (64-128-32, ReLU) → projection (32-32) on which the loss is computed."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))
        self.projection = nn.Sequential(nn.ReLU(), nn.Linear(32, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.backbone(x))


def augment(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random view of each 8x8 image (values 0..1): shifted by -1..1 pixels (zeros fill in), 15% of the
    pixels dropped, Gaussian noise of 0.1 added."""
    n = len(images)
    padded = np.pad(images.reshape(n, 8, 8), ((0, 0), (1, 1), (1, 1)))
    dy, dx = rng.integers(0, 3, size=(2, n, 1, 1))
    grid = np.arange(8)
    out = padded[np.arange(n)[:, None, None], grid[None, :, None] + dy, grid[None, None, :] + dx]
    out = out * (rng.random(out.shape) >= 0.15) + rng.normal(0.0, 0.1, size=out.shape)
    return out.reshape(n, 64).astype(np.float32)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    sim = z @ z.T / TEMPERATURE
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool), float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, target)


def similarity_figures(model: Encoder, images: np.ndarray, seed: int) -> tuple[float, float]:
    """On two held-out views of ``POOL`` images: (mean positive minus mean negative cosine similarity,
    the fraction of (positive, negative) pairs in which the positive is the more similar: an AUC)."""
    rng = np.random.default_rng([seed, 606])
    x = images[:POOL]
    model.eval()
    with torch.no_grad():
        a = F.normalize(model(torch.from_numpy(augment(x, rng))), dim=1)
        b = F.normalize(model(torch.from_numpy(augment(x, rng))), dim=1)
    model.train()
    sim = (a @ b.T).numpy()
    pos = np.diag(sim)
    neg = sim[~np.eye(len(sim), dtype=bool)].reshape(len(sim), -1)
    return float(pos.mean() - neg.mean()), float((pos[:, None] > neg).mean())


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("simclr_digits", steps, STEPS)
    seed_everything(seed)
    data = tabular.load("digits", raw_scale=1.0 / 16.0)  # pixels 0..1, not standardised: views are augmented
    model = Encoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler = tabular.BatchSampler(len(data.x_train), BATCH, seed)
    rng = np.random.default_rng([seed, 505])
    start_gap, start_auc = similarity_figures(model, data.x_test, seed)
    losses: list[float] = []
    meta = {"program": "simclr_digits", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, activations=True, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            x = data.x_train[sampler.next()]
            z1, z2 = model(torch.from_numpy(augment(x, rng))), model(torch.from_numpy(augment(x, rng)))
            loss = nt_xent(z1, z2)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            metrics = {"train_loss": losses[-1], "lr": LR}
            if step % 50 == 0 or step == n_steps - 1:  # a validation pass, as a user's loop would run
                metrics["val_similarity_gap"], _ = similarity_figures(model, data.x_test, seed)
            if pr is not None:
                pr.log(**metrics)
    gap, auc = similarity_figures(model, data.x_test, seed)
    checks = [Check("similarity_gap", gap, ">=", GAP_BAR), Check("positive_auc", auc, ">=", AUC_BAR)]
    summary = verdict(checks, start_similarity_gap=start_gap, start_positive_auc=start_auc,
                      chance_loss=float(np.log(2 * BATCH - 1)), final_loss=float(np.mean(losses[-30:])))
    return as_series(loss=losses), summary
