"""Data-parallel training with 2-4 gloo processes on this machine: the StragglerRank and DataPipelineStall faults.

Each rank trains the digits MLP on its shard of every global batch and averages gradients with one
``torch.distributed.all_reduce`` per step (the probe times collective calls). Per step and rank the
program measures the time spent waiting for the batch, computing, and in the all-reduce.

Faults: ``straggler_rank`` computes ``straggler_ms`` slower per step from ``onset_step`` (a slow or
throttled device); ``stall_ms`` makes every rank's data loader wait that long every ``stall_every``
steps from ``onset_step`` (a slow shared file system or too few loader workers).
"""

from __future__ import annotations

import socket
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from debugtune.scenarios.common import (
    Recorder,
    StepTimer,
    knowledge_thresholds,
    probe_session,
    seed_everything,
    window_mean,
)

if TYPE_CHECKING:
    import torch

PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class DDPConfig:
    world_size: int = 2
    steps: int = 80
    batch_size: int = 64
    lr: float = 0.02
    width: int = 64
    depth: int = 3
    straggler_rank: int = -1
    straggler_ms: float = 0.0
    stall_ms: float = 0.0
    stall_every: int = 1
    onset_step: int = 0
    seed: int = 0
    timeout_s: float = 120.0


@dataclass(frozen=True)
class DDPResult:
    """Per-rank, per-step timings [world, steps] in ms and the loss of every step (rank 0)."""

    losses: np.ndarray
    step_ms: np.ndarray
    data_ms: np.ndarray
    compute_ms: np.ndarray
    comm_ms: np.ndarray
    run_dir: Path | None

    @property
    def final_loss(self) -> float:
        return window_mean(self.losses)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _grad(p: torch.Tensor) -> torch.Tensor:
    """A parameter's gradient after the backward pass (every parameter of the DDP MLP has one)."""
    if p.grad is None:
        raise RuntimeError("a parameter has no gradient after backward")
    return p.grad


def _rank_main(rank: int, cfg: DDPConfig, port: int, run_dir: str | None, probe: bool, out_dir: str,
               run_id: str | None) -> None:
    import torch
    import torch.distributed as dist

    from debugtune.scenarios import tabular
    from debugtune.scenarios.models import MLP, init_weights

    seed_everything(cfg.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=cfg.world_size,
                            timeout=timedelta(seconds=cfg.timeout_s))
    try:
        data = tabular.load("digits")
        model = MLP(data.x_train.shape[1], data.classes, cfg.width, cfg.depth, "relu")
        init_weights(model, 1.0, 0.0)
        params = list(model.parameters())
        optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=0.9)
        sampler = tabular.BatchSampler(len(data.x_train), cfg.batch_size, cfg.seed)
        x_all, y_all = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
        rows: dict[str, list[float]] = {k: [] for k in ("loss", "step", "data", "compute", "comm")}
        meta = {"program": "ddp_mlp", "world_size": cfg.world_size}
        with probe_session(model, optimizer, run_dir, probe, rank=rank, run_id=run_id, meta=meta) as pr:
            rec = Recorder(pr)
            for step in range(cfg.steps):
                timer = StepTimer()
                faulty = step >= cfg.onset_step
                idx = sampler.next()[rank:: cfg.world_size]
                if faulty and cfg.stall_ms > 0 and step % cfg.stall_every == 0:
                    time.sleep(cfg.stall_ms / 1e3)
                x, y = x_all[idx], y_all[idx]
                data_ms = timer.lap()
                optimizer.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                if faulty and rank == cfg.straggler_rank and cfg.straggler_ms > 0:
                    time.sleep(cfg.straggler_ms / 1e3)
                compute_ms = timer.lap()
                grads = [_grad(p) for p in params]
                flat = torch.cat([g.reshape(-1) for g in grads])
                dist.all_reduce(flat)
                flat /= cfg.world_size
                offset = 0
                for g in grads:
                    n = g.numel()
                    g.copy_(flat[offset: offset + n].view_as(g))
                    offset += n
                comm_ms = timer.lap()
                value = float(loss.detach())
                # comm_ms / collective_ms come from the probe's own timing of the all-reduce
                rec.log(loss=value, lr=cfg.lr, dataloader_wait_ms=data_ms, compute_ms=compute_ms)
                optimizer.step()
                step_ms = data_ms + compute_ms + comm_ms + timer.lap()
                for k, v in zip(rows, (value, step_ms, data_ms, compute_ms, comm_ms), strict=True):
                    rows[k].append(v)
        arrays: dict[str, Any] = {k: np.array(v) for k, v in rows.items()}
        np.savez(Path(out_dir) / f"rank{rank}.npz", **arrays)
    finally:
        dist.destroy_process_group()


def train(cfg: DDPConfig, run_dir: str | Path | None = None, probe: bool = False,
          run_id: str | None = None) -> DDPResult:
    """Run ``cfg.world_size`` gloo processes on 127.0.0.1 and collect their per-step timings."""
    import torch.multiprocessing as mp

    if not 2 <= cfg.world_size <= 8:
        raise ValueError(f"world_size must be 2..8, got {cfg.world_size}")
    if cfg.straggler_rank >= cfg.world_size:
        raise ValueError(f"straggler_rank {cfg.straggler_rank} is not a rank of a world of {cfg.world_size}")
    from debugtune.scenarios import tabular

    tabular.load("digits")  # warm the caches before forking, so ranks do not each load them
    if probe:
        knowledge_thresholds()
    with tempfile.TemporaryDirectory(prefix="dt-ddp-") as out:
        for attempt in range(PORT_ATTEMPTS):
            args = (cfg, _free_port(), None if run_dir is None else str(run_dir), probe, out, run_id)
            try:
                mp.start_processes(_rank_main, args=args, nprocs=cfg.world_size, join=True, start_method="fork")
                break
            except mp.ProcessRaisedException as err:  # another job took the port between probe and bind
                if "address already in use" not in str(err).lower() or attempt == PORT_ATTEMPTS - 1:
                    raise
        ranks = [dict(np.load(Path(out) / f"rank{r}.npz")) for r in range(cfg.world_size)]
    stack = {k: np.stack([r[k] for r in ranks]) for k in ("step", "data", "compute", "comm")}
    return DDPResult(ranks[0]["loss"], stack["step"], stack["data"], stack["compute"], stack["comm"],
                     Path(run_dir) if run_dir is not None else None)
