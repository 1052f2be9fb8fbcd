"""The scenario programs by name, each of a family and with its healthy base configuration, behind one ``run``.

``run(program, overrides, seed=..., run_dir=..., probe=...)`` trains the program with the fields in
``overrides`` changed and returns an :class:`Outcome`: the program's own per-step series and summary
figures (what the fault benchmark's manifestation criteria read), never anything from the probe.

Kinds: ``harness`` (single-process programs of a family in `debugtune.scenarios.families`, trained by the
shared loop `debugtune.scenarios.harness`), ``ddp`` (gloo data parallel, `debugtune.scenarios.distributed`)
and ``healthy`` (healthy-only families that only the fault benchmark trains: `bench/healthy` registers them with
``register_healthy`` when imported; they take no overrides but ``steps``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.scenarios import distributed, harness
from debugtune.scenarios.config import RECIPE, TrainConfig
from debugtune.scenarios.datasets import markov_source
from debugtune.scenarios.families import FAMILIES, MoEFamily, reset_routers
from debugtune.scenarios.moe import TRIAL_PARAMETERS as MOE_TRIAL_PARAMETERS
from debugtune.scenarios.moe import MoEConfig, expert_utilisation
from debugtune.scenarios.moe import remedy_config as moe_remedy_config


@dataclass(frozen=True)
class Program:
    name: str
    family: str
    kind: str
    base: Any
    description: str
    trainer: Any = None  # kind "healthy": the HealthyProgram


def _from_moe(moe: MoEConfig, **recipe: Any) -> TrainConfig:
    """A TrainConfig whose model and routing fields are those of ``moe`` (one source of truth for moe_lm)."""
    shared = {f.name for f in fields(MoEConfig)} & {f.name for f in fields(TrainConfig)}
    return TrainConfig(**{**{k: getattr(moe, k) for k in shared}, **recipe})


_SEQ: dict[str, Any] = {"functional": True, "watch_activations": False}

PROGRAMS: dict[str, Program] = {p.name: p for p in (
    Program("digits_mlp", "mlp", "harness", TrainConfig(task="digits", width=64, lr=0.02),
            "MLP 64-64-64 (ReLU modules) on sklearn digits, SGD momentum 0.9"),
    Program("blobs_mlp", "mlp", "harness", TrainConfig(task="blobs", width=32, lr=0.05),
            "MLP 32-32-32 on AutoTrainer's blobs (make_blobs, 3 centres)"),
    Program("circles_mlp", "mlp", "harness", TrainConfig(task="circles", width=32, lr=0.05),
            "MLP 32-32-32 on AutoTrainer's circles (make_circles)"),
    Program("digits_cnn", "cnn", "harness", TrainConfig(task="digits", arch="cnn", width=32, lr=0.01),
            "2-conv CNN + dense on the 8x8 digits images, SGD momentum 0.9"),
    Program("smooth_mlp", "regression", "harness",
            TrainConfig(task="smooth", width=64, depth=3, optimizer="adam", lr=2e-3, eval_every=20,
                        log_style="lightning", **_SEQ),
            "MLP regression (functional ReLU, MSE) of a random smooth function of 8 features in mixed units, Adam"),
    Program("sines_lstm", "recurrent", "harness",
            TrainConfig(task="sines", arch="lstm", width=32, n_layers=2, optimizer="adam", lr=5e-3, eval_every=25,
                        log_style="hf", watch_activations=False),
            "2-layer LSTM classifying the frequency band of noisy sines (32 samples, sensor units), Adam"),
    Program("waves_gru", "recurrent", "harness",
            TrainConfig(task="waves", arch="gru", width=32, n_layers=2, optimizer="adam", lr=1e-2, eval_every=0,
                        log_style="lightning", watch_activations=False),
            "2-layer GRU classifying the waveform of noisy periodic signals, Adam"),
    Program("domains_encoder", "transformer", "harness",
            TrainConfig(task="domains", seq_len=16, d_model=32, n_heads=2, width=64, n_layers=2, activation="relu",
                        dropout=0.1, optimizer="adamw", lr=2e-3, weight_decay=0.01, warmup_steps=30,
                        eval_every=20, log_style="hf"),
            "post-norm 2-layer Transformer encoder (ReLU FFN modules, dropout), mean-pooled, classifying which "
            "Markov chain wrote a token sequence, AdamW with warm-up"),
    Program("markov_lm", "decoder_lm", "harness",
            TrainConfig(task="markov", d_model=32, n_heads=2, width=64, n_layers=2, activation="gelu",
                        optimizer="adam", lr=3e-3, batch_size=16, eval_every=50, log_style="megatron", **_SEQ),
            "dense 2-block pre-norm decoder-only LM (causal attention, functional GELU) on the Markov chains, Adam"),
    Program("digits_ae", "autoencoder", "harness",
            TrainConfig(task="digits", width=32, d_model=8, lr=0.05, steps=500, eval_every=10,
                        log_style="lightning_slash"),
            "MLP autoencoder 64-32-8-32-64 (ReLU modules, linear bottleneck) of the digits, SGD momentum 0.9"),
    Program("moe_lm", "moe_top1", "harness",
            _from_moe(MoEConfig(), task="markov", optimizer="adam", eval_every=0, log_style="moe",
                      watch_activations=False),
            "1-block MoE transformer LM, 8 experts top-1, capacity 1.25, aux loss 1e-2, Adam (the seed scenario's)"),
    Program("domains_moe", "moe_top2", "harness",
            _from_moe(MoEConfig(top_k=2, normalize_topk=True, d_ff=32), task="domains", optimizer="adamw",
                      lr=3e-3, weight_decay=0.01, eval_every=0, log_style="lightning_slash",
                      watch_activations=False),
            "MoE sequence classifier, 8 experts top-2 with renormalised gates, capacity 1.25, aux 1e-2, AdamW"),
    Program("tags_mlp", "multilabel", "harness",
            TrainConfig(task="multilabel", width=64, depth=2, optimizer="sgd", momentum=0.0, lr=0.5, eval_every=10,
                        log_style="lightning", **_SEQ),
            "multi-label MLP (functional ReLU, BCEWithLogits, 6 labels) on word-count features, plain SGD"),
    Program("tabular_resmlp", "residual", "harness",
            TrainConfig(task="tabular5", width=64, depth=3, activation="relu", dropout=0.1, grad_clip=1.0,
                        schedule="cosine", warmup_steps=30, optimizer="adamw", lr=3e-3, weight_decay=0.05,
                        eval_every=20, log_style="hf", watch_activations=False),
            "pre-norm residual MLP with LayerNorm, dropout 0.1, clipping at 1, warm-up + cosine, AdamW, on 20 "
            "features in mixed units"),
    Program("ddp_mlp", "ddp", "ddp", distributed.DDPConfig(),
            "digits MLP data-parallel over 2 gloo processes, one all-reduce per step"),
)}


def register_healthy(programs: Iterable[Any]) -> None:
    """Add healthy-only programs (objects with ``name``, ``family``, ``description`` and a ``train``: the bench's
    `bench/healthy`) to ``PROGRAMS``; a name already registered keeps its program."""
    for hp in programs:
        PROGRAMS.setdefault(hp.name, Program(hp.name, hp.family, "healthy", None, hp.description, hp))


@dataclass(frozen=True)
class Outcome:
    """A program's own measurements: per-step series (1-D, or [rank, step] for timings) and figures."""

    program: str
    series: dict[str, np.ndarray]
    summary: dict[str, Any]

    @property
    def steps(self) -> int:
        return int(len(self.series["loss"]))


def config_fields(program: str) -> set[str]:
    """The fields an override of ``program`` may set: its recipe and the knobs its family implements."""
    p = PROGRAMS[program]
    if p.kind == "healthy":
        return {"steps"}
    names = {f.name for f in fields(p.base)}
    if p.kind == "harness":
        names &= RECIPE | FAMILIES[p.family].knobs
    return names


def make_config(program: str, overrides: Mapping[str, Any], seed: int) -> Any:
    """The base config of ``program`` with ``overrides`` and ``seed``; unknown or unimplemented fields raise."""
    if program not in PROGRAMS:
        raise ValueError(f"unknown program {program!r}; expected one of {', '.join(PROGRAMS)}")
    p = PROGRAMS[program]
    unknown = sorted(set(overrides) - config_fields(program))
    if unknown:
        raise ValueError(f"{program} ({p.family}): unknown or unimplemented config field(s) {', '.join(unknown)}")
    if p.kind == "healthy":
        return {"seed": seed, **overrides}
    cfg = replace(p.base, **dict(overrides), seed=seed)
    if p.kind == "harness":
        cfg.validate()
        harness.check_output(FAMILIES[p.family], cfg, program)
    return cfg


def _harness(p: Program, cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    def save(model: Any, optimizer: Any) -> None:
        if run_dir is not None:
            save_replay_checkpoint(p.name, cfg, run_dir, model, optimizer)

    series, summary = harness.train(FAMILIES[p.family], cfg, program=p.name, run_dir=run_dir, probe=probe,
                                    run_id=run_id, on_start=save if probe and run_dir is not None else None)
    if cfg.task == "markov":
        summary["entropy_floor"] = markov_source(cfg).entropy_floor()
    if "tokens_per_expert" in series:
        tpe = series["tokens_per_expert"].astype(float)
        series["top2_share"] = np.sort(tpe, axis=1)[:, -2:].sum(axis=1) / np.maximum(tpe.sum(axis=1), 1)
    return series, summary


def _ddp(p: Program, cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    r = distributed.train(cfg, run_dir, probe=probe, run_id=run_id)
    series = {"loss": r.losses, "step_ms": r.step_ms, "data_ms": r.data_ms, "compute_ms": r.compute_ms,
              "comm_ms": r.comm_ms}
    return series, {"final_loss": r.final_loss, "first_nonfinite_step": harness.first_nonfinite(r.losses),
                    "chance_loss": math.log(10), "objective": "ce"}


def _healthy(p: Program, cfg: Any, run_dir: Path | None, probe: bool, run_id: str | None) -> tuple[dict, dict]:
    extra = {"steps": cfg["steps"]} if cfg.get("steps") is not None else {}
    return p.trainer.train(cfg["seed"], run_dir, probe, run_id, **extra)


_RUNNERS: dict[str, Callable[[Program, Any, Path | None, bool, str | None], tuple[dict, dict]]] = {
    "harness": _harness, "ddp": _ddp, "healthy": _healthy}


def run(program: str, overrides: Mapping[str, Any] | None = None, *, seed: int = 0,
        run_dir: str | Path | None = None, probe: bool = False, run_id: str | None = None) -> Outcome:
    """Train ``program`` once (with the probe writing into ``run_dir`` when ``probe``)."""
    cfg = make_config(program, overrides or {}, seed)
    path = Path(run_dir) if run_dir is not None else None
    p = PROGRAMS[program]
    series, summary = _RUNNERS[p.kind](p, cfg, path, probe, run_id)
    return Outcome(program, {k: np.asarray(v) for k, v in series.items()}, summary)


# -- the harness programs' own trial: replay the run from the checkpoint taken before step 0 -----------------
HARNESS_PARAMETERS: dict[str, str] = {
    "lr_scale": "lr", "clip_grad": "grad_clip", "weight_decay": "weight_decay", "dropout": "dropout",
    "lr_warmup_iters": "warmup_steps", "gradient_accumulation_steps": "accum_steps"}
"""Remedy tuning parameters (their names in ``cases/remedies-*.ttl``) that every harness program can set → the
config field each sets (``lr_scale`` multiplies the learning rate); a program of an MoE family also sets those of
`moe.TRIAL_PARAMETERS`. A name whose field the program's family does not implement (`config_fields`) is left
out, so a remedy that needs it is shown as not applicable rather than tuned without effect."""
HARNESS_OBJECTIVES = ("loss:min",)
"""What the harness trial optimises: the program's own final training loss (the mean of its last window)."""
MOE_OBJECTIVES = ("expert_util_std:min", "loss:min")
"""An MoE family's: the experts' balance first (`moe.expert_utilisation` over the last fifth of the steps, the
window `MoEResult.balance` uses), the loss second."""


def trial_parameters(program: str) -> dict[str, str]:
    """The remedy parameters ``program``'s trial sets → config field (see `HARNESS_PARAMETERS`)."""
    p = PROGRAMS[program]
    names = dict(HARNESS_PARAMETERS)
    if isinstance(FAMILIES[p.family], MoEFamily):
        names.update(MOE_TRIAL_PARAMETERS)
    allowed = config_fields(program)
    return {k: v for k, v in names.items() if v in allowed}


def trial_overrides(program: str, cfg: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """The config-field overrides a remedy's ``params`` make on ``program``; a name it cannot set raises
    ValueError naming the ones it can."""
    names = trial_parameters(program)
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise ValueError(f"{program} cannot set {', '.join(unknown)} (it sets {', '.join(sorted(names))})")
    shared = {k: v for k, v in params.items() if k in MOE_TRIAL_PARAMETERS}
    out = moe_remedy_config(cfg, shared) if shared else {}
    for name, value in params.items():
        if name not in shared:
            field_name = names[name]
            integer = field_name in ("warmup_steps", "accum_steps")
            out[field_name] = int(round(float(value))) if integer else float(value)
    return out


def _objectives(program: str) -> tuple[str, ...]:
    return MOE_OBJECTIVES if isinstance(FAMILIES[PROGRAMS[program].family], MoEFamily) else HARNESS_OBJECTIVES


def save_replay_checkpoint(program: str, cfg: Any, run_dir: str | Path, model: Any, optimizer: Any) -> Any:
    """The run's replay checkpoint before step 0, declaring the harness trial (`replay_trial`), the parameters
    ``program`` sets and its objective (the batches depend only on the step: the data position is the step)."""
    from debugtune.engine.tune.run_trial import save_run_checkpoint

    return save_run_checkpoint(run_dir, model, optimizer, step=0, trial=f"{__name__}:replay_trial",
                               parameters=sorted(trial_parameters(program)), objectives=_objectives(program),
                               trial_dir="", extra={"scenario": "harness", "program": program,
                                                    "config": asdict(cfg)})


def replay_trial(params: Mapping[str, Any], checkpoint: str | Path | None = None) -> dict[str, float]:
    """The harness programs' trial: the run replayed from its checkpoint (model and optimizer state, RNG) for
    the run's own steps with the remedy's ``params``; reports ``loss`` (the program's final training loss),
    ``eval_loss`` when the program evaluates, ``expert_util_std`` for an MoE family, and ``cost`` (the
    replayed steps' time on this one device in card-hours: what the run's own cost sums, without start-up)."""
    from debugtune.engine.tune.replay import Checkpoint

    if checkpoint is None:
        raise ValueError("the harness trial replays from a checkpoint: give checkpoint=")
    ckpt = Checkpoint.load(checkpoint)
    program = ckpt.extra["program"]
    base = replace(PROGRAMS[program].base, **ckpt.extra["config"])
    cfg = replace(base, **trial_overrides(program, base, params))

    def restore(model: Any, optimizer: Any) -> None:
        hyper = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        ckpt.restore(model, optimizer)
        for group, h in zip(optimizer.param_groups, hyper, strict=True):
            group.update(h)  # the candidate's learning rate, decay, ... not the run's
        if "init_std" in params:
            reset_routers(model, cfg)  # RouterInitRescale: re-initialised with the candidate std, no bias

    series, summary = harness.train(FAMILIES[PROGRAMS[program].family], cfg, program=program, on_start=restore)
    out = {"loss": float(summary["final_loss"]), "cost": summary["step_ms"] * cfg.steps / 3.6e6}
    if "tokens_per_expert" in series:
        tokens = np.asarray(series["tokens_per_expert"], dtype=float)
        out["expert_util_std"] = expert_utilisation(tokens[-max(1, len(tokens) // 5):])["std_pp"]
    if math.isfinite(summary.get("final_eval_loss", float("nan"))):
        out["eval_loss"] = float(summary["final_eval_loss"])
    return out
