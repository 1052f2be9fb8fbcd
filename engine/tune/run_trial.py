"""A run's own trial: the replay checkpoint in its run directory says how to replay it.

``<run_dir>/replay-checkpoint.pt`` is a `Checkpoint` whose ``extra`` names the trial function
(``module:function``, called as ``fn(params, checkpoint=path)``), the tuning parameters it can set, the
objectives it reports (``name:min|max``, the first one optimised first), optionally a target for the first
objective and the folder to import the module from. The project's scenarios write one before their first
step; a user's training loop writes one with `save_run_checkpoint` (``debugtune.checkpoint``). With it,
``cann-tune auto RUN --top-suggestion`` needs no other flag. The module named is imported like
``--trial-fn`` would import it: only point the tuner at run directories you trust.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from debugtune.engine.tune.errors import CheckpointError, TrialSpecError

RUN_CHECKPOINT = "replay-checkpoint.pt"
"""The replay checkpoint's file name inside a run directory."""


@dataclass(frozen=True)
class RunTrial:
    """What a run's checkpoint declares about its trial."""

    checkpoint: str
    trial: str
    parameters: tuple[str, ...]
    objectives: tuple[str, ...]
    target: float | None = None
    trial_dir: str | None = None
    step: int = 0

    def load(self) -> Any:
        """The trial as a `CallableTrial` (its folder put on ``sys.path`` first: spawned trials inherit it)."""
        from debugtune.engine.tune.trials import load_callable

        if self.trial_dir and self.trial_dir not in sys.path:
            sys.path.insert(0, self.trial_dir)
        return load_callable(self.trial)

    def as_dict(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "trial": self.trial, "parameters": list(self.parameters),
                "objectives": list(self.objectives), "target": self.target, "step": self.step}


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / RUN_CHECKPOINT


def find_run_trial(run_dir: str | Path | None) -> RunTrial | None:
    """The trial the run's checkpoint declares; None when the run has no replay checkpoint. A checkpoint
    that declares no trial, or a malformed declaration, raises TrialSpecError naming the file."""
    if run_dir is None:
        return None
    path = checkpoint_path(run_dir)
    if not path.is_file():
        return None
    from debugtune.engine.tune.replay import Checkpoint  # needs torch

    try:
        ckpt = Checkpoint.load(path)
    except CheckpointError as err:
        raise TrialSpecError(str(err)) from None
    extra = ckpt.extra
    trial, params = extra.get("trial"), extra.get("parameters")
    if not isinstance(trial, str) or ":" not in trial:
        raise TrialSpecError(f"{path}: the checkpoint declares no trial ('trial': 'module:function'); save it with "
                             "debugtune.checkpoint(..., trial=...) or give --trial / --trial-fn")
    if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
        raise TrialSpecError(f"{path}: 'parameters' must list the tuning parameters the trial sets")
    objectives = extra.get("objectives") or ["loss"]
    target = extra.get("target")
    return RunTrial(str(path.resolve()), trial, tuple(params), tuple(str(o) for o in objectives),
                    None if target is None else float(target), extra.get("trial_dir"), ckpt.step)


def save_run_checkpoint(run_dir: str | Path, model: Any, optimizer: Any, scheduler: Any = None, sampler: Any = None,
                        *, step: int, trial: str, parameters: Sequence[str], objectives: Sequence[str] = ("loss",),
                        target: float | None = None, trial_dir: str | Path | None = None,
                        extra: Mapping[str, Any] | None = None) -> Any:
    """Write ``<run_dir>/replay-checkpoint.pt`` (the whole training state, see `Checkpoint`) declaring the trial.

    ``trial`` is ``module:function``; ``trial_dir`` is where that module lives (default: the folder of the
    running script, so ``trial="train:replay_trial"`` works for a ``train.py`` run as ``python train.py``)."""
    from debugtune.engine.tune.replay import Checkpoint  # needs torch

    if ":" not in trial:
        raise TrialSpecError(f"trial {trial!r}: expected module:function, e.g. train:replay_trial")
    if not parameters:
        raise TrialSpecError("parameters: name the tuning parameters the trial sets (e.g. ['init_std'])")
    if trial_dir is None:
        main = getattr(sys.modules.get("__main__"), "__file__", None)
        trial_dir = Path(main).resolve().parent if main else Path.cwd()
    declared = {**dict(extra or {}), "trial": trial, "parameters": sorted(map(str, parameters)),
                "objectives": [str(o) for o in objectives], "target": target, "trial_dir": str(trial_dir)}
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    return Checkpoint.save(checkpoint_path(run_dir), model, optimizer, scheduler, sampler, step=step, extra=declared)


TRAINING_CHECKPOINTS = "checkpoints"
"""The folder of a run's training checkpoints (``step-<N>.pt``), from which ``cann-tune checkpoint`` picks."""


def training_checkpoints(run_dir: str | Path) -> dict[int, Path]:
    """The run's training checkpoints by step (``run_dir/checkpoints/step-<N>.pt``)."""
    folder = Path(run_dir) / TRAINING_CHECKPOINTS
    out: dict[int, Path] = {}
    for p in folder.glob("step-*.pt") if folder.is_dir() else ():
        step = p.stem.removeprefix("step-")
        if step.isdigit():
            out[int(step)] = p
    return dict(sorted(out.items()))


def record_replay_point(run_dir: str | Path, step: int, *, trial: str | None = None,
                        parameters: Sequence[str] | None = None, objectives: Sequence[str] | None = None,
                        target: float | None = None) -> RunTrial:
    """Make the run's training checkpoint at ``step`` (the latest one at or before it) its replay point
    (``run_dir/replay-checkpoint.pt``), declaring the trial the checkpoint names or the one given."""
    from debugtune.engine.tune.replay import Checkpoint  # needs torch

    saved = training_checkpoints(run_dir)
    usable = [s for s in saved if s <= step]
    if not usable:
        where = Path(run_dir) / TRAINING_CHECKPOINTS
        have = ", ".join(map(str, saved)) or "none"
        raise TrialSpecError(f"{where}: no training checkpoint at or before step {step} (steps saved: {have})")
    try:
        ckpt = Checkpoint.load(saved[max(usable)])
    except CheckpointError as err:
        raise TrialSpecError(str(err)) from None
    declared = dict(ckpt.extra)
    for key, value in (("trial", trial), ("parameters", None if parameters is None else sorted(parameters)),
                       ("objectives", None if objectives is None else list(objectives)), ("target", target)):
        if value is not None:
            declared[key] = value
    if not isinstance(declared.get("trial"), str) or ":" not in declared["trial"]:
        raise TrialSpecError(f"{ckpt.path}: the checkpoint names no trial; give --trial module:function")
    if not declared.get("parameters"):
        raise TrialSpecError(f"{ckpt.path}: the checkpoint names no tuning parameters; give --parameters a,b")
    ckpt.copy_to(checkpoint_path(run_dir), declared)
    found = find_run_trial(run_dir)
    assert found is not None
    return found
