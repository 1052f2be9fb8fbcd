"""The one configuration of every harness program: its training recipe and the shared fault / look-alike knobs.

A program of the scenarios (`debugtune.scenarios.programs`) is a family (architecture, loss, optimizer
style) plus a ``TrainConfig``. Every fault of the catalogue (`debugtune.scenarios.faults`) is one or two of
these fields set otherwise, applied by the shared harness (`debugtune.scenarios.harness`) the same way in
every family; a family lists the knobs it implements (``Family.knobs``), and an override of a knob the
family does not implement is an error, not a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from debugtune.scenarios.moe import SequenceModelConfig

OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("constant", "cosine")
OUTPUTS = ("logits", "softmax", "relu", "sigmoid")
OUTPUT_SITES = ("seeded", "model", "loss")
ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu")


@dataclass(frozen=True)
class TrainConfig(SequenceModelConfig):
    """One training; frozen (``dataclasses.replace`` for variants). Groups: the sequence/MoE model (inherited),
    recipe, faults, look-alikes."""

    # -- the recipe (per program) -------------------------------------------------------------------
    task: str = "digits"            # the data set (debugtune.scenarios.datasets)
    arch: str = "mlp"               # the family's architecture variant (mlp/cnn, lstm/gru, ...)
    width: int = 64                 # hidden width (MLP units, FFN width, recurrent state)
    depth: int = 3                  # hidden layers / blocks
    activation: str = "relu"        # the hidden activation
    functional: bool = False        # applied as F.relu in forward (no module a hook can see) or as a module
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9           # SGD only (0: plain SGD)
    weight_decay: float = 0.0       # AdamW decoupled decay (matrices only) / SGD L2
    dropout: float = 0.0
    grad_clip: float = 0.0          # max global gradient norm (0: no clipping)
    schedule: str = "constant"      # cosine: decay to 0 over the steps after warm-up
    warmup_steps: int = 0           # linear warm-up to ``lr``
    steps: int = 300
    batch_size: int = 32
    eval_every: int = 10            # held-out loss every N steps (0: no evaluation logged)
    log_style: str = "plain"        # metric names (debugtune.scenarios.logstyles)
    watch_activations: bool = True  # ``attach(..., activations=True)``
    # -- sequence and mixture-of-experts models: SequenceModelConfig's fields, and
    domain_skew: float = 0.0        # look-alike: Zipf exponent of the domain mixture (0: uniform)
    # -- fault knobs -------------------------------------------------------------------------------
    init_scale: float = 1.0         # BadWeightInit / SaturatingActivations: the weight layers' init times this
    hidden_bias: float = 0.0        # DyingReLU: biases of the layers feeding the hidden activation
    output: str = "logits"          # LossActivationMismatch: an activation between the output and the loss
    output_site: str = "seeded"     # where it sits: the model's forward, the loss code, or by seed (even: model)
    raw_scale: float = 0.0          # UnnormalizedInputs: > 0 skips standardisation, raw features times this
    label_noise: float = 0.0        # LabelNoise: share of the targets corrupted uniformly
    zero_grad_every: int = 1        # MissingZeroGrad: zero_grad every N steps (0: never)
    frozen: int = 0                 # FrozenParameters: leading weight layers left out of the optimizer
    bad_batch_step: int = -1        # BadBatch: corrupt batches from this step
    bad_batch_steps: int = 1
    bad_batch_scale: float = 0.0
    # -- look-alike knobs (healthy) ----------------------------------------------------------------
    hard_batch_step: int = -1       # RecoveringSpike: one batch of the hardest valid training examples
    lr_drop_step: int = -1          # ScheduledLRDrop
    lr_drop_factor: float = 0.1
    accum_steps: int = 1            # GradientAccumulation: micro-batches (backwards) per optimizer step
    freeze_backbone: int = 0        # FrozenBackbone: leading weight layers with requires_grad=False, on purpose
    seed: int = 0

    @property
    def output_in_model(self) -> bool:
        """Whether the LossActivationMismatch activation is the model's last operation (an ``nn.Softmax`` ending
        the network: what the output hook sees) rather than applied in the loss code (invisible to it). Real
        programs do both, so by default it alternates with the seed."""
        if self.output == "logits":
            return False
        return self.output_site == "model" or (self.output_site == "seeded" and self.seed % 2 == 0)

    @property
    def model_activation(self) -> str:
        """The activation the model itself applies to its output ("logits": none)."""
        return self.output if self.output_in_model else "logits"

    @property
    def loss_activation(self) -> str:
        """The activation the loss code applies before a loss that expects logits ("logits": none)."""
        return "logits" if self.output_in_model else self.output

    def validate(self) -> None:
        checks = ((self.optimizer, OPTIMIZERS, "optimizer"), (self.schedule, SCHEDULES, "schedule"),
                  (self.output, OUTPUTS, "output"), (self.activation, ACTIVATIONS, "activation"),
                  (self.output_site, OUTPUT_SITES, "output_site"))
        for value, allowed, name in checks:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.frozen < 0 or self.freeze_backbone < 0:
            raise ValueError("frozen / freeze_backbone (leading weight layers) must be >= 0")
        if self.accum_steps < 1 or self.batch_size % self.accum_steps:
            raise ValueError(f"accum_steps must be >= 1 and divide batch_size {self.batch_size}, "
                             f"got {self.accum_steps}")


RECIPE = frozenset(f.name for f in fields(TrainConfig)) - {
    "activation", "init_scale", "hidden_bias", "output", "raw_scale", "label_noise", "zero_grad_every", "frozen",
    "bad_batch_step", "bad_batch_steps", "bad_batch_scale", "hard_batch_step", "accum_steps", "freeze_backbone",
    "gate_bias", "gate_bias_experts", "aux_loss_coeff", "capacity_factor", "domain_skew"}
"""Fields every family honours (the recipe); the others are knobs a family implements or not (``Family.knobs``)."""
