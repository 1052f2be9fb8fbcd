"""A recurrent regression: a GRU on the adding problem, MSE, Adam with gradient-norm clipping.

The adding problem (Hochreiter & Schmidhuber 1997, "Long short-term memory", experiment 4): each
sequence has ``LENGTH`` steps of (value in [0, 1], marker); exactly two steps are marked, one in each
half, and the target is the sum of the two marked values. The last hidden state of a one-layer GRU
(32 units) feeds a linear read-out; gradients are clipped to norm 1 before each step.

Its telemetry: the loss sits on the plateau of predicting the mean (1/6, the variance of the sum)
for a while before the GRU finds the markers and it drops (a plateau that is not LearningRateTooLow),
the recurrent weights get most of the gradient, and the clipping makes the logged gradient norm and
the step size disagree. Learning is measured on held-out sequences: MSE far below the mean predictor's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.healthy.base import Check, Series, Summary, as_series, resolve_steps, verdict
from debugtune.scenarios.common import probe_session, seed_everything

LENGTH, HIDDEN, BATCH = 20, 32, 32
LR, CLIP = 1e-2, 1.0
STEPS = 300
MIN_STEPS = 250
# learned: held-out MSE at most a fifth of the mean predictor's (1/6); Hochreiter & Schmidhuber count a
# sequence solved when its absolute error is below 0.04, reported here as the solved fraction
MSE_RATIO_BAR = 0.2
SOLVED_ERROR = 0.04


def adding_batch(n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences [n, LENGTH, 2] and their targets [n, 1]."""
    values = rng.random((n, LENGTH))
    first = rng.integers(0, LENGTH // 2, size=n)
    second = rng.integers(LENGTH // 2, LENGTH, size=n)
    markers = np.zeros((n, LENGTH))
    markers[np.arange(n), first] = 1.0
    markers[np.arange(n), second] = 1.0
    x = np.stack([values, markers], axis=2).astype(np.float32)
    y = (values[np.arange(n), first] + values[np.arange(n), second]).astype(np.float32)[:, None]
    return torch.from_numpy(x), torch.from_numpy(y)


class AddingGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(2, HIDDEN, batch_first=True)
        self.readout = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(x)
        return self.readout(h[-1])


def train(seed: int, run_dir: Path | None, probe: bool, run_id: str | None,
          steps: int | None = None) -> tuple[Series, Summary]:
    n_steps = resolve_steps("gru_adding", steps, STEPS)
    seed_everything(seed)
    rng = np.random.default_rng([seed, 1997])
    x_test, y_test = adding_batch(1000, np.random.default_rng([seed, 1998]))
    baseline = float(((y_test - y_test.mean()) ** 2).mean())
    model = AddingGRU()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses, grad_norms = [], []
    meta = {"program": "gru_adding", "parameters": sum(p.numel() for p in model.parameters())}
    with probe_session(model, optimizer, run_dir, probe, run_id=run_id, meta=meta) as pr:
        for step in range(n_steps):
            x, y = adding_batch(BATCH, rng)
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
            optimizer.step()
            losses.append(loss.item())
            grad_norms.append(norm)
            if pr is not None:
                metrics = {"loss": losses[-1], "grad_norm": norm, "lr": LR}
                if step % 50 == 0 or step == n_steps - 1:
                    with torch.no_grad():
                        metrics["eval_loss"] = F.mse_loss(model(x_test), y_test).item()
                pr.log(**metrics)
    with torch.no_grad():
        err = (model(x_test) - y_test).abs()
    mse = float((err**2).mean())
    checks = [Check("mse_ratio", mse / baseline, "<=", MSE_RATIO_BAR)]
    summary = verdict(checks, test_mse=mse, mean_predictor_mse=baseline,
                      solved_fraction=float((err < SOLVED_ERROR).float().mean()))
    return as_series(loss=losses, grad_norm=grad_norms), summary
