"""The fault catalogue: each injected fault (a DESIGN §2 cause) → how it is injected per program and severity.

An injection is a set of config-field overrides of a program (`debugtune.scenarios.programs`), the same
knobs in every family (`debugtune.scenarios.config`), applied by the shared harness. ``Times(k)`` multiplies
the program's healthy value; ``ONSET`` stands for the fault's onset step, ``onset`` × the run's steps (0 = the
fault is there from the first step). Severities are given per family (a family's programs share them unless a
program has its own entry) and were tuned per family until the fault manifested, never the criteria; where a
fault is not injected in a family, ``bench/faults/NOTES.md`` says why. The benign look-alikes (healthy runs
that resemble a fault) are catalogued the same way, on the first program of every family they apply to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from debugtune.scenarios.programs import PROGRAMS, make_config

SEVERITIES = ("mild", "severe")


def _programs_of(family: str) -> tuple[str, ...]:
    return tuple(p.name for p in PROGRAMS.values() if p.family == family)


FAMILY_PROGRAMS: dict[str, tuple[str, ...]] = {f: _programs_of(f) for f in dict.fromkeys(
    p.family for p in PROGRAMS.values())}
GRADIENT_FAMILIES = tuple(f for f, ps in FAMILY_PROGRAMS.items() if PROGRAMS[ps[0]].kind == "harness")
"""The families trained by the shared harness (the generic faults and look-alikes apply to these)."""
LEAD = {f: ps[0] for f, ps in FAMILY_PROGRAMS.items()}
"""Each family's first program: where its look-alikes run."""


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

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(PROGRAMS[p].family for p in self.overrides))

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


class _EveryProgram(Mapping[str, Mapping[str, Mapping[str, Any]]]):
    """``{program: {"mild": {}}}`` for every program registered when it is read, not when the catalogue was built:
    the bench registers its healthy-only programs (``bench.healthy``) whenever it is imported."""

    def __getitem__(self, program: str) -> Mapping[str, Mapping[str, Any]]:
        if program not in PROGRAMS:
            raise KeyError(program)
        return {"mild": {}}

    def __iter__(self) -> Iterator[str]:
        return iter(list(PROGRAMS))

    def __len__(self) -> int:
        return len(PROGRAMS)


def _steps(program: str) -> int:
    base = PROGRAMS[program].base
    return int(base["steps"] if isinstance(base, dict) else getattr(base, "steps", 0) or 0)


Pair = tuple[Mapping[str, Any], Mapping[str, Any]] | None


def by_family(spec: Mapping[str, Pair]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{family or program: (mild, severe)}`` → ``{program: {"mild": ..., "severe": ...}}``: a family's entry
    covers its programs, a program's own entry (after it) replaces it, ``None`` leaves the program out."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key, pair in spec.items():
        targets = FAMILY_PROGRAMS.get(key, (key,))
        for p in targets:
            if p not in PROGRAMS:
                raise ValueError(f"fault catalogue: {key!r} is neither a family nor a program")
            if pair is None:
                out.pop(p, None)
            else:
                out[p] = {"mild": dict(pair[0]), "severe": dict(pair[1])}
    return out


def _same(families: tuple[str, ...], mild: Mapping[str, Any], severe: Mapping[str, Any]) -> dict[str, Pair]:
    return {f: (mild, severe) for f in families}


def _control(families: tuple[str, ...], overrides: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    return {LEAD[f]: {"mild": dict(overrides)} for f in families}


TOKENS = ("transformer", "decoder_lm", "moe_top1", "moe_top2")
MOE = ("moe_top1", "moe_top2")
FEATURES = tuple(f for f in GRADIENT_FAMILIES if f not in TOKENS)
RELU = ("mlp", "cnn", "regression", "transformer", "autoencoder", "multilabel", "residual")
SIGMOID = ("mlp", "cnn", "regression", "transformer", "decoder_lm", "autoencoder", "multilabel", "residual")
LABELLED = tuple(f for f in GRADIENT_FAMILIES if f != "autoencoder")
ADAM = ("regression", "recurrent", "transformer", "decoder_lm", "moe_top1", "moe_top2", "residual")


CLIP_BOUNDS = {"mlp": 1.5, "cnn": 1.5, "regression": 3.0, "recurrent": 0.15, "transformer": 0.6, "decoder_lm": 0.5,
               "autoencoder": 0.07, "moe_top1": 0.5, "moe_top2": 0.6, "multilabel": 0.3, "residual": 0.5}
"""Per family, a global gradient-norm bound below most healthy first-10% norms (measured on seed 0)."""


def _bad_batch(steps: int, scale: float) -> dict[str, Any]:
    return {"bad_batch_step": ONSET, "bad_batch_steps": steps, "bad_batch_scale": scale}


FAULTS: dict[str, Injection] = {f.name: f for f in (
    Injection("LearningRateTooHigh", "learning rate times 10 / 50 (SGD), 30 / 100 (Adam, AdamW), the seed "
              "scenario's MoE 50 / 100, the autoencoder 4 / 20, the regression and the multi-label (plain SGD) 100 "
              "/ 300 and 30 / 100, the modern recipe (its clipping bounds every step) 500 / 2000 (mild / severe)",
              by_family({**_same(("mlp", "cnn", "multilabel"), {"lr": Times(10)}, {"lr": Times(50)}),
                         **_same(ADAM, {"lr": Times(30)}, {"lr": Times(100)}),
                         "regression": ({"lr": Times(100)}, {"lr": Times(300)}),
                         "multilabel": ({"lr": Times(30)}, {"lr": Times(100)}),
                         "residual": ({"lr": Times(500)}, {"lr": Times(2000)}),
                         "moe_top1": ({"lr": Times(50)}, {"lr": Times(100)}),
                         "autoencoder": ({"lr": Times(4)}, {"lr": Times(20)})})),
    Injection("LearningRateTooLow", "learning rate times 0.01 (mild) or 0.001 (severe)",
              by_family(_same(GRADIENT_FAMILIES, {"lr": Times(0.01)}, {"lr": Times(0.001)}))),
    Injection("BadWeightInit", "weight layers initialised at 0.1x / 0.02x their scale (blobs 0.05x / 0.01x); "
              "where Adam or normalisation undo a small init, at 10x / 30x (the modern recipe 20x / 50x)",
              by_family({**_same(("mlp", "cnn", "autoencoder", "multilabel"), {"init_scale": 0.1},
                                 {"init_scale": 0.02}),
                         "blobs_mlp": ({"init_scale": 0.05}, {"init_scale": 0.01}),
                         **_same(("regression", "recurrent", "transformer", "decoder_lm", "moe_top1", "moe_top2"),
                                 {"init_scale": 10.0}, {"init_scale": 30.0}),
                         "residual": ({"init_scale": 20.0}, {"init_scale": 50.0})})),
    Injection("SaturatingActivations", "sigmoid hidden activations at the program's own initialisation (mild) or "
              "at 1.5 times its scale (severe); no larger, so the initialisation stays within what the knowledge "
              "base counts as standard (2*sqrt(2) times the fan-in scale: He-initialised families reach 2.1) and the "
              "activation, not the init, is the fault",
              by_family(_same(SIGMOID, {"activation": "sigmoid"}, {"activation": "sigmoid", "init_scale": 1.5}))),
    Injection("DyingReLU", "the biases feeding the ReLUs initialised strongly negative (per program, mild / "
              "severe: digits MLP -4 / -8, CNN -6 / -10, blobs -2.5 / -4, circles -1.5 / -4, ...)",
              by_family({"digits_mlp": ({"hidden_bias": -4.0}, {"hidden_bias": -8.0}),
                         "blobs_mlp": ({"hidden_bias": -2.5}, {"hidden_bias": -4.0}),
                         "circles_mlp": ({"hidden_bias": -1.5}, {"hidden_bias": -4.0}),
                         "cnn": ({"hidden_bias": -6.0}, {"hidden_bias": -10.0}),
                         **_same(("regression", "transformer", "autoencoder", "multilabel", "residual"),
                                 {"hidden_bias": -4.0}, {"hidden_bias": -8.0})})),
    Injection("UnnormalizedInputs", "no standardisation: the raw features (digits 0..16, sensor units, mixed "
              "units) (mild) or the raw features times 16 (severe); blobs and circles x10 / x100, word counts x4 / x16",
              by_family({**_same(FEATURES, {"raw_scale": 1.0}, {"raw_scale": 16.0}),
                         "blobs_mlp": ({"raw_scale": 10.0}, {"raw_scale": 100.0}),
                         "circles_mlp": ({"raw_scale": 10.0}, {"raw_scale": 100.0}),
                         "multilabel": ({"raw_scale": 4.0}, {"raw_scale": 16.0})})),
    Injection("LossActivationMismatch", "an activation between the output and a loss that expects logits: a "
              "softmax (mild) or a ReLU (severe; a sigmoid where a ReLU on the logits still trains) before "
              "cross-entropy, a sigmoid / ReLU before BCEWithLogits, a "
              "ReLU / sigmoid on a regression or reconstruction output; as the model's last operation on even "
              "seeds (what the output hook sees), in the loss code on odd seeds (invisible to it)",
              by_family({**_same(("mlp", "cnn"), {"output": "softmax"}, {"output": "relu"}),
                         **_same(("recurrent", "transformer", "decoder_lm", "moe_top1", "moe_top2", "residual"),
                                 {"output": "softmax"}, {"output": "sigmoid"}),
                         "multilabel": ({"output": "sigmoid"}, {"output": "relu"}),
                         **_same(("regression", "autoencoder"), {"output": "relu"}, {"output": "sigmoid"})})),
    Injection("LabelNoise", "30% (mild) or 60% (severe) of the targets corrupted uniformly (classes, tokens, "
              "label vectors; regression targets swapped with random examples')",
              by_family(_same(LABELLED, {"label_noise": 0.3}, {"label_noise": 0.6}))),
    Injection("MissingZeroGrad", "gradients zeroed only every 10th step (mild; every 50th on the Adam-trained "
              "LMs, whose normalised steps absorb a 10-step sum, and on the multi-label MLP) or never (severe)",
              by_family({**_same(GRADIENT_FAMILIES, {"zero_grad_every": 10}, {"zero_grad_every": 0}),
                         **_same(("decoder_lm", "moe_top1", "moe_top2", "multilabel"), {"zero_grad_every": 50},
                                 {"zero_grad_every": 0})})),
    Injection("FrozenParameters", "the first 2 (mild) or 3 (severe) weight layers left out of the optimizer while "
              "optimizer.zero_grad() is still called (recurrent: the input projection and the first / both "
              "recurrent layers); where residual paths carry the signal past them, more (up to all but the head); "
              "not on the 2-D blobs/circles, where random features suffice and nothing shows",
              by_family({**_same(GRADIENT_FAMILIES, {"frozen": 2}, {"frozen": 3}),
                         "transformer": ({"frozen": 3}, {"frozen": 6}),
                         "decoder_lm": ({"frozen": 6}, {"frozen": 7}),
                         "moe_top2": ({"frozen": 7}, {"frozen": 11}),
                         "residual": ({"frozen": 6}, {"frozen": 7}),
                         "blobs_mlp": None, "circles_mlp": None})),
    Injection("BadBatch", "at 40% of training, 1 batch (mild) or 3 batches (severe) of corrupt inputs: garbage "
              "of scale 100 / 300 (circles 2 x 300 / 3 x 1000; where gates or a LayerNorm bound its effect, a "
              "corrupt shard of 12 / 20 batches); token inputs: one token id repeated, 10 / 20 batches (LMs, "
              "which shrug off a few: 20 / 30)",
              by_family({**_same(FEATURES, _bad_batch(1, 100.0), _bad_batch(3, 300.0)),
                         "circles_mlp": (_bad_batch(2, 300.0), _bad_batch(3, 1000.0)),
                         **_same(("recurrent", "residual"), _bad_batch(12, 100.0), _bad_batch(20, 300.0)),
                         **_same(("transformer", "moe_top2"), _bad_batch(10, 0.0), _bad_batch(20, 0.0)),
                         **_same(("decoder_lm", "moe_top1"), _bad_batch(20, 0.0), _bad_batch(30, 0.0))}),
              onset=0.4),
    Injection("GateInitBias", "router bias of the first expert(s) initialised at +8 (mild) or +16 (severe); "
              "top-2 routing: the first two experts",
              by_family({"moe_top1": ({"gate_bias": 8.0, "gate_bias_experts": 1},
                                      {"gate_bias": 16.0, "gate_bias_experts": 1}),
                         "moe_top2": ({"gate_bias": 8.0, "gate_bias_experts": 2},
                                      {"gate_bias": 16.0, "gate_bias_experts": 2})})),
    Injection("AuxLossDisabled", "load-balancing loss coefficient 1e-4 (mild, ineffective) or 0 (severe)",
              by_family(_same(MOE, {"aux_loss_coeff": 1e-4}, {"aux_loss_coeff": 0.0}))),
    Injection("CapacityFactorTooLow", "expert capacity factor 0.5 (mild) or 0.25 (severe) instead of 1.25",
              by_family(_same(MOE, {"capacity_factor": 0.5}, {"capacity_factor": 0.25}))),
    Injection("StragglerRank", "from 30% of training, rank 1 computes 10 ms (mild) or 40 ms (severe) slower per step",
              {"ddp_mlp": {"mild": {"straggler_rank": 1, "straggler_ms": 10.0, "onset_step": ONSET},
                           "severe": {"straggler_rank": 1, "straggler_ms": 40.0, "onset_step": ONSET}}}, onset=0.3),
    Injection("DataPipelineStall", "from 30% of training, every rank's loader waits 15 ms every 2nd step (mild) "
              "or 40 ms every step (severe)",
              {"ddp_mlp": {"mild": {"stall_ms": 15.0, "stall_every": 2, "onset_step": ONSET},
                           "severe": {"stall_ms": 40.0, "stall_every": 1, "onset_step": ONSET}}}, onset=0.3),
)}


LOOKALIKES: dict[str, Injection] = {f.name: f for f in (
    Injection("Healthy", "the program's healthy configuration", _EveryProgram()),
    Injection("WarmupTransient", "linear LR warm-up over the first 20% of steps to 2x the healthy LR",
              {**_control(GRADIENT_FAMILIES, {"warmup_steps": 60, "lr": Times(2)}),
               "moe_lm": {"mild": {"warmup_steps": 60, "lr": Times(2)}}}),
    Injection("ScheduledLRDrop", "LR divided by 10 at half of training (a step schedule)",
              {**_control(GRADIENT_FAMILIES, {"lr_drop_step": ONSET, "lr_drop_factor": 0.1}),
               **{p: {"mild": {"lr_drop_step": ONSET, "lr_drop_factor": 0.1}} for p in FAMILY_PROGRAMS["mlp"]}},
              onset=0.5),
    Injection("RecoveringSpike", "at 40% of training, one batch drawn from the hardest 15% of the training "
              "examples (valid data); not on the Markov-chain LMs, whose sequences are all equally hard",
              {**_control(tuple(f for f in GRADIENT_FAMILIES if f not in ("decoder_lm", "moe_top1")),
                          {"hard_batch_step": ONSET}),
               **{p: {"mild": {"hard_batch_step": ONSET}} for p in FAMILY_PROGRAMS["mlp"]}}, onset=0.4),
    Injection("NormalReLUSparsity", "ReLU layers 4x as wide (about half the activations are zero)",
              {**_control(RELU, {"width": Times(4)}), "blobs_mlp": {"mild": {"width": 256}},
               "digits_mlp": {"mild": {"width": 256}}}),
    Injection("GradientAccumulation", "4 micro-batches (4 backward passes) per optimizer step, zero_grad after "
              "each step, the loss divided by 4 (imitates MissingZeroGrad)",
              _control(GRADIENT_FAMILIES, {"accum_steps": 4})),
    Injection("FrozenBackbone", "the first weight layer frozen on purpose (requires_grad=False, not in the "
              "optimizer; imitates FrozenParameters)", _control(GRADIENT_FAMILIES, {"freeze_backbone": 1})),
    Injection("ClippingAtStart", "global gradient-norm clipping at a bound most of the first 10% of steps exceed "
              "(about their 10th-25th percentile in the healthy run; imitates a gradient explosion held back)",
              {LEAD[f]: {"mild": {"grad_clip": bound}} for f, bound in CLIP_BOUNDS.items()}),
    Injection("HealthyImbalancedMoE", "a normally imbalanced but healthy MoE (imitates AuxLossDisabled / "
              "GateInitBias): a Zipf-skewed mixture of domains (exponent 3); top-2: dropless experts with "
              "ST-MoE's balancing coefficient 1e-3 on domains skewed with exponent 2",
              {LEAD["moe_top1"]: {"mild": {"domain_skew": 3.0}},
               LEAD["moe_top2"]: {"mild": {"domain_skew": 2.0, "capacity_factor": 0.0, "aux_loss_coeff": 1e-3}}}),
)}


def injection(name: str) -> Injection:
    """A fault or look-alike by name (KeyError names the known ones)."""
    if name in FAULTS:
        return FAULTS[name]
    if name in LOOKALIKES:
        return LOOKALIKES[name]
    raise KeyError(f"unknown fault or look-alike {name!r}; known: {', '.join([*FAULTS, *LOOKALIKES])}")
