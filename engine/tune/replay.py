"""Deterministic replay: a checkpoint of the whole training state, and resuming from it with overrides.

A :class:`Checkpoint` holds the model, optimizer and scheduler state, the RNG states of python,
numpy, torch (CPU and every CUDA device), the data sampler's position (its ``state_dict()``), the
step counter and an environment snapshot (versions, thread count, determinism flags). It is written
atomically (temp file + rename) and read back with ``torch.load(weights_only=True)``, so a checkpoint
from elsewhere cannot run code. :func:`replay` restores it into a freshly built job, applies the
trial's overrides and runs ``steps`` training steps with deterministic algorithms and the recorded
thread count, returning the per-step losses: on CPU two replays with the same overrides agree bit for
bit (notes §6). Trials of a tuning session replay from a checkpoint taken before the problem showed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from debugtune.engine.telemetry import environment_snapshot
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.engine.tune.errors import CheckpointError

FORMAT = "debugtune-replay"
VERSION = 1


def torch_environment() -> dict[str, Any]:
    """What changes numerics between two replays on one machine: threads, flags, versions, device."""
    return {
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "default_dtype": str(torch.get_default_dtype()),
    }


def rng_state() -> dict[str, Any]:
    """The RNG states of python, numpy's global generator, torch CPU and every CUDA device."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
    }


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass(frozen=True)
class Checkpoint:
    """A saved training state (see module doc); ``path`` is where it lives."""

    path: Path
    step: int
    payload: dict[str, Any]

    @property
    def environment(self) -> dict[str, Any]:
        return json.loads(self.payload["environment"])

    @property
    def extra(self) -> dict[str, Any]:
        return json.loads(self.payload["extra"])

    @classmethod
    def save(cls, path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
             sampler: Any = None, *, step: int, extra: Mapping[str, Any] | None = None) -> Checkpoint:
        """Capture the state now and write it atomically to ``path``."""
        path = Path(path)
        payload = {
            "format": FORMAT, "version": VERSION, "step": int(step),
            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "sampler": None if sampler is None else sampler.state_dict(),
            "rng": rng_state(),
            "environment": json.dumps({**environment_snapshot(), "torch_state": torch_environment()}, sort_keys=True),
            "extra": json.dumps(dict(extra or {}), sort_keys=True, default=str),
        }
        buf = io.BytesIO()
        torch.save(payload, buf)
        try:
            atomic_write_bytes(path, buf.getvalue())
        except OSError as err:
            raise CheckpointError(f"{path}: cannot write checkpoint: {err}") from err
        # state_dict() shares storage with the live model and optimizer: keep what was written instead
        return cls(path, int(step), torch.load(io.BytesIO(buf.getvalue()), map_location="cpu", weights_only=True))

    def copy_to(self, path: str | Path, extra: Mapping[str, Any]) -> Checkpoint:
        """The same state written atomically to ``path`` with ``extra`` merged into its declaration."""
        payload = {**self.payload, "extra": json.dumps({**self.extra, **dict(extra)}, sort_keys=True, default=str)}
        buf = io.BytesIO()
        torch.save(payload, buf)
        try:
            atomic_write_bytes(Path(path), buf.getvalue())
        except OSError as err:
            raise CheckpointError(f"{path}: cannot write checkpoint: {err}") from err
        return Checkpoint(Path(path), self.step, payload)

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        """Read a checkpoint; a missing, foreign or corrupt file raises CheckpointError naming it."""
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path}: checkpoint not found")
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 — torch raises many kinds for a bad file
            raise CheckpointError(f"{path}: not a readable checkpoint ({type(err).__name__}: {err})") from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not a debugtune replay checkpoint (no '{FORMAT}' format tag)")
        if payload.get("version") != VERSION:
            raise CheckpointError(f"{path}: checkpoint version {payload.get('version')} is not {VERSION}")
        return cls(path, int(payload["step"]), payload)

    def restore(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any = None,
                sampler: Any = None) -> None:
        """Load every state into the given objects and set the RNGs as they were.

        The checkpoint is left as it was: ``Optimizer.load_state_dict`` keeps the given state tensors
        (Adam's moments) and updates them in place, so it gets a copy; the same object replays again."""
        p = copy.deepcopy(self.payload)
        model.load_state_dict(p["model"])
        optimizer.load_state_dict(p["optimizer"])
        for name, obj in (("scheduler", scheduler), ("sampler", sampler)):
            if obj is None:
                continue
            if p[name] is None:
                raise CheckpointError(f"{self.path}: the checkpoint holds no {name} state")
            obj.load_state_dict(p[name])
        set_rng_state(p["rng"])

    def environment_differences(self) -> list[str]:
        """Differences between the recorded torch environment and this process's (each breaks bit-exactness)."""
        then, now = self.environment.get("torch_state", {}), torch_environment()
        return [f"{k}: checkpoint {then.get(k)!r}, now {now[k]!r}" for k in sorted(now)
                if k not in ("deterministic", "threads") and then.get(k) != now[k]]


@contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Deterministic algorithms and a fixed thread count for the block; the previous settings come back."""
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    old_threads, old_bench = torch.get_num_threads(), torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.set_num_threads(max(1, int(threads)))
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)
        torch.backends.cudnn.benchmark = old_bench
        torch.set_num_threads(old_threads)


@dataclass(frozen=True)
class ReplayResult:
    """Per-step losses and records of a replay, a digest of losses + final parameters, and warnings."""

    losses: tuple[float, ...]
    records: tuple[Any, ...]
    digest: str
    warnings: tuple[str, ...] = ()


def _loss(out: Any) -> float:
    if isinstance(out, Mapping):
        if "loss" not in out:
            raise CheckpointError("train_step returned a dict without 'loss'")
        out = out["loss"]
    return float(out.detach()) if isinstance(out, torch.Tensor) else float(out)


def state_digest(losses: Any, model: torch.nn.Module) -> str:
    """sha256 of the losses (float64) and every parameter and buffer (name order)."""
    h = hashlib.sha256(np.asarray(losses, dtype=np.float64).tobytes())
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def replay(checkpoint: Checkpoint | str | Path, overrides: Mapping[str, Any], steps: int,
           train_step: Callable[[Any], Any], *, job: Any,
           apply_overrides: Callable[[Any, dict[str, Any]], Any] | None = None) -> ReplayResult:
    """Restore ``checkpoint`` into ``job`` (its ``model``, ``optimizer``, optional ``scheduler`` and
    ``sampler``), apply ``overrides`` and run ``train_step(job)`` ``steps`` times.

    ``train_step`` returns the loss or a dict with ``loss``. Without ``apply_overrides``, keys of the
    optimizer's param groups (``lr``, ``weight_decay``...) are set there; any other key is an error.
    """
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint.load(checkpoint)
    if steps < 0:
        raise CheckpointError(f"steps must be >= 0, got {steps}")
    threads = ckpt.environment.get("torch_state", {}).get("threads", torch.get_num_threads())
    with deterministic_torch(threads):
        ckpt.restore(job.model, job.optimizer, getattr(job, "scheduler", None), getattr(job, "sampler", None))
        if hasattr(job, "step"):
            job.step = ckpt.step
        if overrides:
            (apply_overrides or _optimizer_overrides)(job, dict(overrides))
        records = [train_step(job) for _ in range(steps)]
        losses = tuple(_loss(r) for r in records)
        digest = state_digest(losses, job.model)
    return ReplayResult(losses, tuple(records), digest, tuple(ckpt.environment_differences()))


def _optimizer_overrides(job: Any, overrides: dict[str, Any]) -> None:
    groups = job.optimizer.param_groups
    for key, value in overrides.items():
        if key not in groups[0]:
            raise CheckpointError(f"override {key!r} is not an optimizer setting ({', '.join(sorted(groups[0]))}); "
                                  "pass apply_overrides= to apply model or data parameters")
        for g in groups:
            g[key] = value
