"""Record real PyTorch-profiler traces of small gloo jobs on this machine, each with one planted fault.

Every scenario runs ``world`` processes (torch.distributed, gloo, 127.0.0.1), trains a small MLP and writes one
Kineto Chrome trace per rank (``rank-<r>.json.gz``) with ``torch.profiler`` (CPU activity; this machine has no
accelerator). What is planted, and where:

- ``healthy``: 2-rank data parallel, nothing planted (the control);
- ``straggler``: 4-rank data parallel, rank 2 computes its forward/backward three times per step;
- ``slow_stage``: 4 ranks as 2 pipeline stages × 2 data-parallel replicas (Megatron's layout: stage 0 = ranks
  0 and 1, stage 1 = ranks 2 and 3); stage 1 holds three times the layers of stage 0; activations go from stage
  0 to stage 1 and gradients back with send/recv, each stage all-reduces its gradients within its own
  data-parallel group;
- ``host_bound``: 2-rank data parallel whose step also spends 40 ms in plain Python (host-side work in the loop:
  the host, not the operators, sets the pace);
- ``dataloader_stall``: 2-rank data parallel whose ``DataLoader`` (no workers) sleeps 30 ms per batch.

``plan()`` says what each scenario planted (cause, symptom, where) for ``bench/trace_agreement.py``.
Run: ``python -m bench.trace_record OUT [--only straggler,...] [--steps 24]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

WIDTH = 256
BATCH = 64


@dataclass(frozen=True)
class Scenario:
    name: str
    world: int
    cause: str | None        # the planted root cause (None: the control)
    symptom: str | None      # the finding that must come first
    where: tuple[int, ...]   # the ranks it is located on (empty: the whole run)
    stages: int = 1


SCENARIOS = (
    Scenario("healthy", 2, None, None, ()),
    Scenario("straggler", 4, "StragglerRank", "SlowRank", (2,)),
    Scenario("slow_stage", 4, "PipelineStageImbalance", "SlowPipelineStage", (2, 3), stages=2),
    Scenario("host_bound", 2, "HostDispatchBound", "HostBound", ()),
    Scenario("dataloader_stall", 2, "DataPipelineStall", "DataLoaderWait", ()),
)


def plan() -> dict[str, Scenario]:
    return {s.name: s for s in SCENARIOS}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mlp(layers: int):
    import torch

    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


class _Slow:
    """A map-style dataset whose items take ``delay_s`` to load (a stalled input pipeline)."""

    def __init__(self, n: int, delay_s: float):
        import torch

        self.x = torch.randn(n, WIDTH)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i]


def _rank(rank: int, sc: Scenario, port: int, out: str, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(rank)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=sc.world,
                            timeout=timedelta(seconds=300))
    per_stage = sc.world // sc.stages
    stage, replica = divmod(rank, per_stage)
    # every rank creates every group in the same order (torch.distributed's rule)
    dp_groups = [dist.new_group(list(range(s * per_stage, (s + 1) * per_stage))) for s in range(sc.stages)]
    dp = dp_groups[stage]
    if sc.stages > 1:
        for r in range(per_stage):
            dist.new_group([s * per_stage + r for s in range(sc.stages)])  # the pipeline groups
    layers = 2 if sc.name != "slow_stage" else (2 if stage == 0 else 6)
    model = _mlp(layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stall = 0.03 / BATCH if sc.name == "dataloader_stall" else 0.0
    loader = torch.utils.data.DataLoader(_Slow(BATCH * (steps + 4), stall), batch_size=BATCH)
    batches = iter(loader)
    prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=steps),
                   record_shapes=True)
    prof.start()
    try:
        for _ in range(steps + 2):
            x = next(batches)
            opt.zero_grad(set_to_none=True)
            if sc.stages == 1:
                repeat = 3 if sc.name == "straggler" and rank in sc.where else 1
                for _ in range(repeat):
                    loss = model(x).square().mean()
                    loss.backward()
            elif stage == 0:
                h = model(x)
                dist.send(h.detach(), dst=rank + per_stage)
                g = torch.empty_like(h)
                dist.recv(g, src=rank + per_stage)
                h.backward(g)
            else:
                h = torch.empty(BATCH, WIDTH)
                dist.recv(h, src=rank - per_stage)
                h.requires_grad_(True)
                loss = model(h).square().mean()
                loss.backward()
                dist.send(h.grad, dst=rank - per_stage)
            if sc.name == "host_bound":
                until = time.perf_counter() + 0.04
                while time.perf_counter() < until:  # host-side Python work, no operator runs
                    pass
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(flat, group=dp)
            opt.step()
            prof.step()
    finally:
        prof.stop()
    prof.export_chrome_trace(str(Path(out) / f"rank-{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def record(name: str, out: Path, steps: int = 24) -> Path:
    """Record scenario ``name`` into ``out/<name>/rank-<r>.json.gz``; returns that folder."""
    import gzip
    import shutil

    import torch.multiprocessing as mp

    sc = plan()[name]
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(_rank, args=(sc, _free_port(), str(folder), steps), nprocs=sc.world, join=True,
                       start_method="fork")
    for raw in sorted(folder.glob("rank-*.json")):
        with open(raw, "rb") as src, gzip.open(raw.with_suffix(".json.gz"), "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--steps", type=int, default=24, help="profiled steps per scenario")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or [s.name for s in SCENARIOS]
    for name in names:
        t0 = time.perf_counter()
        folder = record(name, args.out, args.steps)
        print(f"{name}: {folder} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
