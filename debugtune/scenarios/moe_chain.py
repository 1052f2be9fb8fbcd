"""The seed story's chain on the CPU MoE: a saturated gate over experts placed on four cabinets.

Eight experts, two per cabinet; the batch is split over the data-parallel ranks in order and the ranks over the
cabinets, and each cabinet's ranks read their own domains, whose mixture swings with the shard order (a peak that
goes round the cabinet's domains once per ``cycle_steps`` batches). A locality loss (LocMoE) teaches a healthy
router to keep each token on an expert of its own cabinet, and the balancing loss keeps the experts' shares even.

The fault is the gate's initialisation: weights with std 10 instead of 0.02 saturate the router's softmax, so its
gradient is one to two orders of magnitude below a healthy router's, and Adam's steps (about the learning rate
each) are nothing against weights of that size: the gate stays where it started. It cannot learn to keep tokens in
their cabinet, nor follow the swinging mixture: the experts' utilisation drifts, routed traffic crosses cabinets and
the tokens dropped at capacity swing with the mixture. A re-initialisation
alone does not repair a run that has trained this way for a while (the new router starts with no locality and
disturbs the experts' specialisation), which is why the fix is a search over several knobs.

The trial (`replay_trial`) replays ``HORIZON`` steps from one of the run's training checkpoints
(``cann-tune checkpoint RUN --step N`` makes one the run's replay point) and reports the three figures the targets
are about: the utilisation std in percentage points, the share of dispatched tokens that cross cabinets, and the
replay's loss over the healthy reference's: the healthy configuration resumed from the same checkpoint (the gate
re-initialised as the healthy twin's, std 0.02, nothing else changed). A twin trained healthy from step 0 is no
reference a fix can be held to in a short replay: at step 250 the faulty run's loss already lags it by 20% to 35%
(seeds 1-3 and 100-102), damage done before the replay point that no setting undoes in 32 steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.scenarios.moe import (
    TRIAL_PARAMETERS,
    MoEConfig,
    MoEResult,
    expert_utilisation,
    replay_records,
    train_moe,
)

CHAIN: dict[str, Any] = {"cabinets": 4, "locality_coeff": 0.1, "cycle_steps": 128, "cycle_skew": 3.0, "steps": 3000}
"""The healthy training: four cabinets, LocMoE's locality loss, a mixture that swings with a period of 128 batches."""
FAULT: dict[str, Any] = {"gate_init_std": 10.0}
"""What the seed run gets wrong: the gate's initialisation std (a saturated softmax from step 0)."""
SAVE_EVERY = 250
"""Steps between the run's training checkpoints (its possible replay points)."""
REPLAY_STEP = 250
"""The checkpoint the story replays from (``cann-tune checkpoint RUN --step 250``): the first after step 0, while
a healthy router is still learning its locality, so a fix's loss can be held to the healthy reference's."""
HORIZON = 32
"""Steps each trial replays: about 1% of the 3,000-step training each."""
OBJECTIVES = ("expert_util_std:min", "cross_cabinet_share:min", "loss_ratio:min")
"""What the trial reports for the targets: balance, locality, and the loss against the healthy twin."""
DECLARATION: dict[str, Any] = {"scenario": "moe_chain", "trial": f"{__name__}:replay_trial",
                               "parameters": sorted(TRIAL_PARAMETERS), "objectives": list(OBJECTIVES),
                               "horizon_steps": HORIZON, "trial_dir": ""}
"""What every training checkpoint of a chain run declares (`scenarios.moe.save_training_checkpoint`)."""


def healthy_chain(seed: int = 0, **changes: Any) -> MoEConfig:
    """The chain scenario with a sound gate (the healthy twin's configuration)."""
    return replace(MoEConfig(seed=seed, **CHAIN), **changes)


def seed_chain(seed: int = 0, **changes: Any) -> MoEConfig:
    """The seed run: `healthy_chain` with the gate initialised with std 10 (`FAULT`)."""
    return replace(healthy_chain(seed), **{**FAULT, **changes})


def healthy_twin(cfg: MoEConfig) -> MoEConfig:
    """``cfg`` with the `FAULT` fields back at their defaults (its gate is the healthy reference's)."""
    defaults = MoEConfig()
    return replace(cfg, **{k: getattr(defaults, k) for k in FAULT})


def train_chain(cfg: MoEConfig, run_dir: str | Path, run_id: str | None = None, steps: int | None = None) -> MoEResult:
    """Train with the probe into ``run_dir``, a training checkpoint every `SAVE_EVERY` steps and no replay point
    declared (``cann-tune checkpoint`` records one)."""
    return train_moe(cfg, run_dir, probe=True, run_id=run_id, steps=steps, checkpoint=False, save_every=SAVE_EVERY,
                     declaration=DECLARATION)


def reference_loss(cfg: MoEConfig, checkpoint: Any, steps: int | None) -> float:
    """The healthy reference's loss over the replay's last half: the checkpoint resumed with the healthy twin's gate
    (`healthy_twin`), read once per checkpoint and horizon (kept beside the checkpoint, ``*.reference.json``)."""
    twin = healthy_twin(cfg)
    params = {"init_std": twin.gate_init_std}
    cache = Path(checkpoint.path).with_suffix(".reference.json")
    key = {"step": checkpoint.step, "steps": steps, "params": params, "mtime": Path(checkpoint.path).stat().st_mtime_ns}
    if cache.is_file():
        saved = json.loads(cache.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            return float(saved["loss"])
    records, _cost, _cfg, _ckpt = replay_records(params, checkpoint.path, steps)
    loss = _late_loss(records)
    cache.write_text(json.dumps({"key": key, "loss": loss}), encoding="utf-8")
    return loss


def _late_loss(records: list[dict[str, Any]]) -> float:
    """Mean LM loss of the replay's last half."""
    losses = np.asarray([r["loss"] for r in records], dtype=float)
    return float(losses[len(losses) // 2:].mean())


def replay_trial(params: Mapping[str, Any], checkpoint: str | Path | None = None,
                 steps: int | None = None) -> dict[str, float]:
    """Replay from the checkpoint with the remedies' ``params`` (`scenarios.moe.replay_records`) and report
    ``expert_util_std`` (percentage points, over the replay), ``cross_cabinet_share`` (dispatched tokens whose
    expert is in another cabinet than their rank, over the replay), ``loss`` (mean LM loss of the replay's last
    half), ``loss_ratio`` (that loss over the healthy reference's, `reference_loss`), ``dropped_frac`` and ``cost``
    (card-hours of the replayed steps)."""
    records, cost, cfg, ckpt = replay_records(params, checkpoint, steps)
    tokens = np.array([r["tokens_per_expert"] for r in records])
    loss = _late_loss(records)
    return {"expert_util_std": expert_utilisation(tokens)["std_pp"],
            "cross_cabinet_share": float(np.mean([r["cross_cabinet_share"] for r in records])),
            "loss": loss, "loss_ratio": loss / reference_loss(cfg, ckpt, steps),
            "dropped_frac": float(np.mean([r["dropped_frac"] for r in records])), "cost": cost}
