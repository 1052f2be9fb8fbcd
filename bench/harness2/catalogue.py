"""The second harness's programs and what is injected into each: ``(program, cause, variant, knobs, criterion)``.

Every supervised program has a ``Healthy`` control (the reference its faults are judged against, per seed); the
programs whose loss is not a supervised loss (GAN, policy gradient, contrastive, full-batch graph, skip-gram) are
healthy-only families, as is a gated classifier (GLU and squeeze-excitation gates: sigmoid modules that are no
hidden activations). A fault counts only when it manifested by the program's own record (:mod:`.manifest`):
``loss`` — the run trained measurably worse than its healthy reference; ``balance`` — the expert load is
measurably less even.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from bench.harness2 import imported, lightning, plain, trainer
from bench.harness2.outcome import Outcome

PROGRAMS: dict[str, Callable[..., Outcome]] = {
    "mlp_regression": plain.regression_mlp,
    "encoder": plain.encoder,
    "moe": plain.moe_classifier,
    "bert_trainer": trainer.bert_classifier,
    "cnn_lightning": lightning.cnn,
    "jsonl_mlp": imported.jsonl_mlp,
    "tensorboard_mlp": imported.tensorboard_mlp,
    "gan_discriminator": partial(plain.gan, probe_on="discriminator"),
    "gan_generator": partial(plain.gan, probe_on="generator"),
    "reinforce": plain.reinforce,
    "gcn": plain.gcn,
    "contrastive": plain.contrastive,
    "skipgram": plain.skipgram,
    "gated_mlp": plain.gated_mlp,
}
HEALTHY_ONLY = ("gan_discriminator", "gan_generator", "reinforce", "gcn", "contrastive", "skipgram", "gated_mlp")
SEEDS = (0, 1, 2)
VERSION = 1  # bump when a cell's meaning changes without its code changing


@dataclass(frozen=True)
class Cell:
    program: str
    name: str                    # the injected cause, or "Healthy"
    variant: str                 # what distinguishes cells of one cause on one program ("every-20", "x8" …)
    knobs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    criterion: str = "loss"      # loss | balance (faults); learned (controls)
    seed: int = 0

    @property
    def is_fault(self) -> bool:
        return self.name != "Healthy"

    @property
    def family(self) -> str:
        return f"h2.{self.program}"

    @property
    def run_id(self) -> str:
        key = json.dumps([VERSION, self.program, self.name, self.variant, self.knobs, self.seed], sort_keys=True)
        return "h2" + hashlib.sha256(key.encode()).hexdigest()[:10]

    def label(self) -> dict[str, Any]:
        return {"kind": "fault" if self.is_fault else "control", "name": self.name, "program": self.program,
                "family": self.family, "severity": self.variant, "seed": self.seed, "onset_step": 0,
                "overrides": self.knobs, "criterion": self.criterion, "run_id": self.run_id}


_FAULTS: dict[str, list[tuple[str, str, dict[str, Any], str]]] = {
    "mlp_regression": [
        ("MissingZeroGrad", "every-20", {"zero_grad_every": 20}, "loss"),
        ("MissingZeroGrad", "never", {"zero_grad_every": 0}, "loss"),
        ("BadWeightInit", "x8", {"gain": 8.0}, "loss"),
        ("BadWeightInit", "x25", {"gain": 25.0}, "loss"),
        ("SaturatingActivations", "sigmoid", {"act": "sigmoid"}, "loss"),
        ("SaturatingActivations", "sigmoid-x4", {"act": "sigmoid", "gain": 4.0}, "loss"),  # Glorot's sigmoid init
        ("FrozenParameters", "body", {"frozen_body": True}, "loss"),
        ("LearningRateTooHigh", "lr-1.0", {"lr": 1.0}, "loss"),
        ("LearningRateTooLow", "lr-5e-5", {"lr": 5e-5}, "loss"),
    ],
    "encoder": [
        ("MissingZeroGrad", "every-20", {"zero_grad_every": 20}, "loss"),
        ("LabelNoise", "40%", {"label_noise": 0.4}, "loss"),
        ("LabelNoise", "70%", {"label_noise": 0.7}, "loss"),
        ("LearningRateTooHigh", "lr-0.1", {"lr": 0.1}, "loss"),
        ("LearningRateTooLow", "lr-1e-6", {"lr": 1e-6}, "loss"),
    ],
    "moe": [
        ("UnnormalizedInputs", "raw", {"raw_inputs": True}, "loss"),
        ("LearningRateTooLow", "div-100", {"lr": 3e-5}, "loss"),
        ("LearningRateTooLow", "div-1000", {"lr": 3e-6}, "loss"),
        ("AuxLossDisabled", "aux-0.001", {"aux": 0.001}, "balance"),
        ("AuxLossDisabled", "aux-0", {"aux": 0.0}, "balance"),
        ("GateInitBias", "bias-4", {"gate_bias": 4.0}, "balance"),
    ],
    "bert_trainer": [
        ("LearningRateTooHigh", "lr-0.05", {"lr": 0.05}, "loss"),
        ("LearningRateTooLow", "lr-1e-6", {"lr": 1e-6}, "loss"),
        ("LabelNoise", "40%", {"label_noise": 0.4}, "loss"),
        ("FrozenParameters", "encoder", {"freeze_encoder": True}, "loss"),
        ("BadWeightInit", "x8", {"init_scale": 8.0}, "loss"),
    ],
    "cnn_lightning": [
        ("LearningRateTooHigh", "lr-1.0", {"lr": 1.0}, "loss"),
        ("LearningRateTooLow", "lr-1e-6", {"lr": 1e-6}, "loss"),
        ("UnnormalizedInputs", "raw-pixels", {"raw_pixels": True}, "loss"),
        ("BadWeightInit", "x6", {"init_scale": 6.0}, "loss"),
        ("LabelNoise", "50%", {"label_noise": 0.5}, "loss"),
    ],
}
_IMPORTED_FAULTS = [
    ("LearningRateTooHigh", "lr-0.5", {"lr": 0.5}, "loss"),
    ("LearningRateTooLow", "lr-1e-6", {"lr": 1e-6}, "loss"),
    ("LabelNoise", "40%", {"label_noise": 0.4}, "loss"),
    ("MissingZeroGrad", "never", {"zero_grad_every": 0}, "loss"),
]
_FAULTS["jsonl_mlp"] = _IMPORTED_FAULTS
_FAULTS["tensorboard_mlp"] = _IMPORTED_FAULTS


def cells(seeds: tuple[int, ...] = SEEDS, programs: list[str] | None = None) -> list[Cell]:
    """Every cell of the catalogue, controls first (they are the references)."""
    chosen = [p for p in PROGRAMS if not programs or p in programs]
    out = [Cell(p, "Healthy", "control", {}, "learned", s) for s in seeds for p in chosen]
    out += [Cell(p, name, variant, knobs, crit, s)
            for s in seeds for p in chosen for name, variant, knobs, crit in _FAULTS.get(p, [])]
    return out
