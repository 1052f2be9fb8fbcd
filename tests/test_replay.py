"""Deterministic replay: a checkpoint of the tiny MoE training replays bit for bit on CPU."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from debugtune.engine.tune import CheckpointError
from debugtune.engine.tune.replay import Checkpoint, replay
from debugtune.scenarios.moe import MoEConfig, apply_overrides, build_moe, expert_balance, train_step

CFG = MoEConfig(gate_bias=2.0, steps=40)
OVERRIDES = {"gate_init_std": 0.01, "aux_loss_coeff": 0.05}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Ten steps into the faulty run (before the imbalance is fixed), saved with its full state."""
    torch.set_num_threads(1)
    job = build_moe(CFG)
    for _ in range(10):
        train_step(job)
    path = tmp_path_factory.mktemp("ckpt") / "moe.pt"
    return Checkpoint.save(path, job.model, job.optimizer, job.scheduler, job.sampler, step=job.step,
                           extra={"scenario": "moe", "gate_bias": CFG.gate_bias})


def _replay(ckpt, overrides, steps=15):
    return replay(ckpt.path, overrides, steps, train_step, job=build_moe(CFG), apply_overrides=apply_overrides)


def test_replaying_twice_with_the_same_overrides_is_bitwise_identical(checkpoint):
    a = _replay(checkpoint, OVERRIDES)
    b = _replay(checkpoint, OVERRIDES)
    assert len(a.losses) == 15
    assert np.array_equal(np.array(a.losses).view(np.uint64), np.array(b.losses).view(np.uint64))
    assert a.digest == b.digest  # losses and every final parameter, byte for byte
    assert a.warnings == ()
    tokens_a = np.array([r["tokens_per_expert"] for r in a.records])
    tokens_b = np.array([r["tokens_per_expert"] for r in b.records])
    assert np.array_equal(tokens_a, tokens_b)


def test_an_in_memory_checkpoint_is_a_snapshot_that_replays_leave_untouched(tmp_path):
    """Replays from the same Checkpoint object (as a tuning session does, trial after trial) and training
    the saved job further change nothing in it: Adam's state loaded by load_state_dict would otherwise
    alias the checkpoint's tensors and each replay would start from the previous one's end."""
    torch.set_num_threads(1)
    job = build_moe(CFG)
    for _ in range(10):
        train_step(job)
    ckpt = Checkpoint.save(tmp_path / "m.pt", job.model, job.optimizer, job.scheduler, job.sampler, step=job.step)
    from_disk = _replay(ckpt, OVERRIDES)  # _replay reads the file
    for _ in range(5):
        train_step(job)  # the saved job goes on training
    runs = [replay(ckpt, ov, 15, train_step, job=build_moe(CFG), apply_overrides=apply_overrides)
            for ov in (OVERRIDES, {}, OVERRIDES)]
    assert runs[0].digest == runs[2].digest == from_disk.digest
    assert runs[1].digest == _replay(ckpt, {}).digest


def test_overrides_change_the_trajectory_and_the_balance(checkpoint):
    fixed = _replay(checkpoint, OVERRIDES, steps=25)
    faulty = _replay(checkpoint, {}, steps=25)
    assert fixed.losses != faulty.losses
    cv = [expert_balance(np.array([r["tokens_per_expert"] for r in x.records[-10:]]))["cv"] for x in (fixed, faulty)]
    assert cv[0] < cv[1]


def test_the_replay_continues_the_original_run_exactly(checkpoint):
    """Replaying without overrides reproduces what the uninterrupted training did next."""
    torch.set_num_threads(1)
    job = build_moe(CFG)
    with torch.random.fork_rng():
        straight = [train_step(job)["loss"] for _ in range(16)][10:]
    again = _replay(checkpoint, {}, steps=6)
    assert list(again.losses) == straight


def test_rng_states_are_restored(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    ckpt = Checkpoint.save(tmp_path / "c.pt", model, opt, step=0)
    draws = (random.random(), np.random.rand(), torch.rand(1).item())

    class Job:
        pass

    job = Job()
    job.model, job.optimizer = model, opt

    def step(j):
        return {"loss": random.random() + np.random.rand() + torch.rand(1).item()}

    out = replay(ckpt, {"lr": 0.5}, 1, step, job=job)
    assert out.losses[0] == pytest.approx(sum(draws))
    assert opt.param_groups[0]["lr"] == 0.5
    with pytest.raises(CheckpointError, match="not an optimizer setting"):
        replay(ckpt, {"dropout": 0.1}, 1, step, job=job)


def test_checkpoints_are_written_atomically_and_bad_files_are_named(tmp_path, checkpoint):
    assert [p.name for p in checkpoint.path.parent.iterdir()] == ["moe.pt"]  # no temp file left
    loaded = Checkpoint.load(checkpoint.path)
    assert loaded.step == 10 and loaded.extra["scenario"] == "moe"
    assert loaded.environment["torch_state"]["threads"] == 1
    assert "packages" in loaded.environment
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="bad.pt: not a readable checkpoint"):
        Checkpoint.load(bad)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="other.pt: not a debugtune replay checkpoint"):
        Checkpoint.load(other)
    with pytest.raises(CheckpointError, match="missing.pt: checkpoint not found"):
        Checkpoint.load(tmp_path / "missing.pt")
