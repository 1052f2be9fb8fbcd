"""Programs that know nothing of debugtune: they write their own logs — JSON lines (``step``, ``loss``, ``lr``,
``grad_norm``) or TensorBoard scalars — and the run is imported afterwards (``import_path``, what
``cann-debug import`` runs), as a user brings the logs of a run that already happened."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from bench.harness2.outcome import Outcome, sgd_step
from debugtune.engine.capture.importers.registry import import_path


def _tabular(seed: int, noise: float) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4096, 20, generator=g)
    y = (x[:, :5] @ torch.randn(5, 3, generator=g)).argmax(1)
    flip = torch.rand(4096, generator=g) < noise
    return x, torch.where(flip, torch.randint(0, 3, (4096,), generator=g), y)


def _train(write: object, seed: int, *, lr: float, label_noise: float, zero_grad_every: int,
           steps: int) -> list[float]:
    """An MLP classifier on Adam; ``write(step, metrics)`` is the program's own logger."""
    torch.manual_seed(seed)
    x, y = _tabular(seed, label_noise)
    g = torch.Generator().manual_seed(seed + 1)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        i = torch.randint(0, 4096, (64,), generator=g)
        loss, norm = sgd_step(opt, step, zero_grad_every, lambda: F.cross_entropy(model(x[i]), y[i]),  # noqa: B023
                              model.parameters())
        losses.append(loss)
        write(step, {"loss": loss, "lr": lr, "grad_norm": norm})  # type: ignore[operator]
    return losses


def jsonl_mlp(run_dir: Path, seed: int = 0, *, lr: float = 1e-3, label_noise: float = 0.0, zero_grad_every: int = 1,
              steps: int = 300) -> Outcome:
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "metrics.jsonl"
        with log.open("w") as fh:
            losses = _train(lambda s, m: fh.write(json.dumps({"step": s, **m}) + "\n"), seed, lr=lr,
                            label_noise=label_noise, zero_grad_every=zero_grad_every, steps=steps)
        import_path(log, run_dir, replace=True)
    return Outcome(losses)


def tensorboard_mlp(run_dir: Path, seed: int = 0, *, lr: float = 1e-3, label_noise: float = 0.0,
                    zero_grad_every: int = 1, steps: int = 300) -> Outcome:
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as scratch:
        writer = SummaryWriter(scratch)

        def write(step: int, metrics: dict[str, float]) -> None:
            writer.add_scalar("train/loss", metrics["loss"], step)
            writer.add_scalar("train/learning_rate", metrics["lr"], step)
            writer.add_scalar("train/grad_norm", metrics["grad_norm"], step)

        losses = _train(write, seed, lr=lr, label_noise=label_noise, zero_grad_every=zero_grad_every, steps=steps)
        writer.close()
        import_path(Path(scratch), run_dir, replace=True)
    return Outcome(losses)
