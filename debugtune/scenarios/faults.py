"""The fault catalogue: each injected fault (a DESIGN §2 cause) → how it is injected per program and severity.

An injection is a set of config-field overrides of a program (`debugtune.scenarios.programs`).
``Times(k)`` multiplies the program's healthy value; ``ONSET`` stands for the fault's onset step,
``onset`` × the run's steps (0 = the fault is there from the first step). The benign look-alikes
(healthy runs that resemble a fault) are catalogued the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from debugtune.scenarios.programs import PROGRAMS, make_config

SEVERITIES = ("mild", "severe")
CLASSIFIERS = ("digits_mlp", "digits_cnn", "blobs_mlp", "circles_mlp")


@dataclass(frozen=True)
class Times:
    """A multiple of the program's healthy value of the field."""

    factor: float


ONSET = "@onset"


@dataclass(frozen=True)
class Injection:
    """How one fault (or look-alike) is injected: per program, per severity, the overrides."""

    name: str
    how: str
    overrides: Mapping[str, Mapping[str, Mapping[str, Any]]]
    onset: float = 0.0

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(self.overrides)

    def onset_step(self, program: str, steps: int | None = None) -> int:
        return int(self.onset * (steps or _steps(program)))

    def resolve(self, program: str, severity: str, steps: int | None = None) -> dict[str, Any]:
        """Concrete overrides for ``program`` at ``severity`` (multiples and the onset filled in); ``steps``
        shortens the run (onsets scale with it)."""
        try:
            raw = self.overrides[program][severity]
        except KeyError:
            raise ValueError(f"{self.name} has no {severity!r} injection for program {program!r}") from None
        base = PROGRAMS[program].base
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if isinstance(value, Times):
                value = type(getattr(base, key))(getattr(base, key) * value.factor)
            elif value == ONSET:
                value = self.onset_step(program, steps)
            out[key] = value
        if steps is not None:
            out["steps"] = steps
        make_config(program, out, 0)  # validates the field names now, not mid-benchmark
        return out


def _steps(program: str) -> int:
    return int(PROGRAMS[program].base.steps)


def _each(programs: tuple[str, ...], mild: Mapping[str, Any], severe: Mapping[str, Any]) -> dict:
    return {p: {"mild": dict(mild), "severe": dict(severe)} for p in programs}


FAULTS: dict[str, Injection] = {f.name: f for f in (
    Injection("LearningRateTooHigh", "learning rate multiplied by 10 (mild) or 50 (severe); the MoE's (Adam) by "
              "50 (mild) or 100 (severe)",
              {**_each(CLASSIFIERS, {"lr": Times(10)}, {"lr": Times(50)}),
               "moe_lm": {"mild": {"lr": Times(50)}, "severe": {"lr": Times(100)}}}),
    Injection("LearningRateTooLow", "learning rate multiplied by 0.01 (mild) or 0.001 (severe)",
              _each(CLASSIFIERS, {"lr": Times(0.01)}, {"lr": Times(0.001)})),
    Injection("BadWeightInit", "weights initialised at 0.1x (mild) or 0.02x (severe) the He-normal scale "
              "(blobs: 0.05x, 0.01x)",
              {**_each(("digits_mlp", "digits_cnn", "circles_mlp"), {"init_scale": 0.1}, {"init_scale": 0.02}),
               "blobs_mlp": {"mild": {"init_scale": 0.05}, "severe": {"init_scale": 0.01}}}),
    Injection("SaturatingActivations", "sigmoid hidden activations with weights at 6x (mild) or 12x (severe) "
              "the He-normal scale",
              _each(CLASSIFIERS, {"activation": "sigmoid", "init_scale": 6.0},
                    {"activation": "sigmoid", "init_scale": 12.0})),
    Injection("DyingReLU", "hidden biases initialised strongly negative: digits MLP -4 / -8, CNN -6 / -10, "
              "blobs -2.5 / -4, circles -1.5 / -4 (mild / severe)",
              {"digits_mlp": {"mild": {"hidden_bias": -4.0}, "severe": {"hidden_bias": -8.0}},
               "digits_cnn": {"mild": {"hidden_bias": -6.0}, "severe": {"hidden_bias": -10.0}},
               "blobs_mlp": {"mild": {"hidden_bias": -2.5}, "severe": {"hidden_bias": -4.0}},
               "circles_mlp": {"mild": {"hidden_bias": -1.5}, "severe": {"hidden_bias": -4.0}}}),
    Injection("UnnormalizedInputs", "no standardisation: digits raw pixels 0..16 (mild) or as bytes 0..255 "
              "(severe); blobs and circles raw x10 (mild) or x100 (severe, AutoTrainer's abnormal data)",
              {"digits_mlp": {"mild": {"raw_scale": 1.0}, "severe": {"raw_scale": 16.0}},
               "digits_cnn": {"mild": {"raw_scale": 1.0}, "severe": {"raw_scale": 16.0}},
               "blobs_mlp": {"mild": {"raw_scale": 10.0}, "severe": {"raw_scale": 100.0}},
               "circles_mlp": {"mild": {"raw_scale": 10.0}, "severe": {"raw_scale": 100.0}}}),
    Injection("LossActivationMismatch", "a softmax (mild) or a ReLU (severe) on the logits fed to cross-entropy",
              _each(CLASSIFIERS, {"output": "softmax"}, {"output": "relu"})),
    Injection("LabelNoise", "30% (mild) or 60% (severe) of the training labels replaced by another class",
              _each(CLASSIFIERS, {"label_noise": 0.3}, {"label_noise": 0.6})),
    Injection("MissingZeroGrad", "gradients zeroed only every 10th step (mild) or never (severe)",
              _each(CLASSIFIERS, {"zero_grad_every": 10}, {"zero_grad_every": 0})),
    Injection("FrozenParameters", "the first 2 (mild) or 3 (severe: every hidden layer) weight layers left out "
              "of the optimizer (digits programs; on 2-D blobs/circles random features suffice, nothing shows)",
              _each(("digits_mlp", "digits_cnn"), {"frozen": 2}, {"frozen": 3})),
    Injection("BadBatch", "at 40% of training, 1 batch (mild) or 3 batches (severe) of corrupt inputs "
              "(garbage of scale 100 / 300; on circles, whose small net shrugs off one, 2 x 300 / 3 x 1000)",
              {**_each(("digits_mlp", "digits_cnn", "blobs_mlp"),
                       {"bad_batch_step": ONSET, "bad_batch_steps": 1, "bad_batch_scale": 100.0},
                       {"bad_batch_step": ONSET, "bad_batch_steps": 3, "bad_batch_scale": 300.0}),
               "circles_mlp": {"mild": {"bad_batch_step": ONSET, "bad_batch_steps": 2, "bad_batch_scale": 300.0},
                               "severe": {"bad_batch_step": ONSET, "bad_batch_steps": 3, "bad_batch_scale": 1000.0}}},
              onset=0.4),
    Injection("GateInitBias", "router bias of expert 0 initialised at +8 (mild) or +16 (severe)",
              {"moe_lm": {"mild": {"gate_bias": 8.0, "gate_bias_experts": 1},
                          "severe": {"gate_bias": 16.0, "gate_bias_experts": 1}}}),
    Injection("AuxLossDisabled", "load-balancing loss coefficient 1e-4 (mild, ineffective) or 0 (severe)",
              {"moe_lm": {"mild": {"aux_loss_coeff": 1e-4}, "severe": {"aux_loss_coeff": 0.0}}}),
    Injection("CapacityFactorTooLow", "expert capacity factor 0.5 (mild) or 0.25 (severe) instead of 1.25",
              {"moe_lm": {"mild": {"capacity_factor": 0.5}, "severe": {"capacity_factor": 0.25}}}),
    Injection("StragglerRank", "from 30% of training, rank 1 computes 10 ms (mild) or 40 ms (severe) slower per step",
              {"ddp_mlp": {"mild": {"straggler_rank": 1, "straggler_ms": 10.0, "onset_step": ONSET},
                           "severe": {"straggler_rank": 1, "straggler_ms": 40.0, "onset_step": ONSET}}}, onset=0.3),
    Injection("DataPipelineStall", "from 30% of training, every rank's loader waits 15 ms every 2nd step (mild) "
              "or 40 ms every step (severe)",
              {"ddp_mlp": {"mild": {"stall_ms": 15.0, "stall_every": 2, "onset_step": ONSET},
                           "severe": {"stall_ms": 40.0, "stall_every": 1, "onset_step": ONSET}}}, onset=0.3),
)}


LOOKALIKES: dict[str, Injection] = {f.name: f for f in (
    Injection("Healthy", "the program's healthy configuration",
              {p: {"mild": {}} for p in PROGRAMS}),
    Injection("WarmupTransient", "linear LR warm-up over the first 20% of steps to 2x the healthy LR",
              {**{p: {"mild": {"warmup_steps": 60, "lr": Times(2)}} for p in CLASSIFIERS},
               "moe_lm": {"mild": {"warmup_steps": 60, "lr": Times(2)}}}),
    Injection("ScheduledLRDrop", "LR divided by 10 at half of training (a step schedule)",
              {p: {"mild": {"lr_drop_step": ONSET, "lr_drop_factor": 0.1}} for p in CLASSIFIERS}, onset=0.5),
    Injection("RecoveringSpike", "at 40% of training, one batch drawn from the hardest 15% of the training "
              "examples (valid data)",
              {p: {"mild": {"hard_batch_step": ONSET}} for p in CLASSIFIERS}, onset=0.4),
    Injection("NormalReLUSparsity", "wide ReLU layers (256 units; about half the activations are zero)",
              {p: {"mild": {"width": 256}} for p in ("digits_mlp", "blobs_mlp")}),
)}


def injection(name: str) -> Injection:
    """A fault or look-alike by name (KeyError names the known ones)."""
    if name in FAULTS:
        return FAULTS[name]
    if name in LOOKALIKES:
        return LOOKALIKES[name]
    raise KeyError(f"unknown fault or look-alike {name!r}; known: {', '.join([*FAULTS, *LOOKALIKES])}")
