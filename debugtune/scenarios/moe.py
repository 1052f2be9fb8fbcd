"""A tiny mixture-of-experts transformer LM on CPU: the seed scenario and the MoE faults of the benchmark.

One or more pre-norm transformer blocks whose feed-forward is a mixture of ``num_experts`` experts
behind a softmax router (top-1 or top-2, optional renormalisation of the chosen gates), with an
expert capacity ``ceil(tokens * top_k * capacity_factor / num_experts)`` (assignments beyond it are
dropped and the token passes through the residual), the Switch load-balancing loss
``E * sum_i f_i * P_i`` and the ST-MoE router z-loss ``mean(logsumexp(logits)^2)``.

Fault knobs are ordinary config fields: ``gate_bias`` (logit bias given at initialisation to the
first ``gate_bias_experts`` experts: GateInitBias), ``aux_loss_coeff=0`` (AuxLossDisabled),
``capacity_factor`` below 1 (CapacityFactorTooLow), ``lr`` (LearningRateTooHigh).

The router module returns ``(gate_weights [T, k], expert_index [T, k] int64, logits [T, E])`` so a
forward hook (``probe.watch_router``) can count tokens per expert from its output.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from debugtune.scenarios.common import Recorder, probe_session, seed_everything, window_mean
from debugtune.scenarios.sequences import MarkovSource, SequenceSampler


@dataclass(frozen=True)
class SequenceModelConfig:
    """The sequence data, the transformer's size and the routing of an MoE model (shared with the harness's
    ``TrainConfig``, which derives from it)."""

    num_experts: int = 8
    top_k: int = 1
    gate_init_std: float = 0.02
    gate_bias: float = 0.0
    gate_bias_experts: int = 2
    normalize_topk: bool = False
    aux_loss_coeff: float = 1e-2
    z_loss_coeff: float = 0.0
    capacity_factor: float = 1.25
    cabinets: int = 1
    locality_coeff: float = 0.0
    cycle_steps: int = 0
    cycle_skew: float = 0.0
    seq_len: int = 32
    vocab: int = 32
    domains: int = 8
    successors: int = 2
    d_model: int = 32
    d_ff: int = 48
    n_heads: int = 2
    n_layers: int = 1
    data_seed: int = 0


@dataclass(frozen=True)
class MoEConfig(SequenceModelConfig):
    """Everything that defines one MoE training; frozen (use ``dataclasses.replace`` for variants).

    Two opt-in fields, off by default (the training is then exactly what it was without them): ``gate_lr_scale``
    puts the routers' gates on their own Adam learning rate, ``lr * gate_lr_scale`` (a router learning-rate
    multiplier); ``locality_prior`` > 0 makes the dispatch topology-aware: an expert in another cabinet than the
    token's is selected only when its logit beats the best home expert's by more than ``locality_prior`` (the gate
    weights stay the softmax probabilities; the experiments of issue 32 with it are in docs/tune.md).
    ``cabinet_limited`` (off by default) is node-limited routing taken to one cabinet with overflow (DeepSeek-V3,
    arXiv 2412.19437 sec. 2.1.2, with M = 1): each token picks its expert(s) among its own cabinet's, and an
    assignment beyond that expert's capacity spills to the best remote expert (by gate score) that still has room,
    combined with the token's own gate weight (dropped only when no remote expert has room); the spilled tokens are
    the cross-cabinet traffic (issue 32's second attempt, docs/tune.md)."""

    lr: float = 3e-3
    warmup_steps: int = 0
    steps: int = 300
    batch_size: int = 16
    grad_clip: float = 0.0
    gate_lr_scale: float = 1.0
    locality_prior: float = 0.0
    cabinet_limited: bool = False
    seed: int = 0


class Router(nn.Module):
    """Softmax router: top-k experts per token with their gate weights."""

    def __init__(self, d_model: int, num_experts: int, top_k: int, normalize_topk: bool):
        super().__init__()
        self.gate = nn.Linear(d_model, num_experts)
        self.num_experts = num_experts
        self.top_k = top_k
        self.normalize_topk = normalize_topk
        self.prior: torch.Tensor | None = None  # [tokens, experts]: the topology's selection penalty, or None

    def reset(self, std: float, bias: float, biased_experts: int) -> None:
        """Weights ~ N(0, std); bias ``bias`` on the first ``biased_experts`` experts, 0 elsewhere."""
        with torch.no_grad():
            self.gate.weight.normal_(0.0, std)
            self.gate.bias.zero_()
            self.gate.bias[:biased_experts] = bias

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self.gate(x)
        probs = logits.float().softmax(dim=-1)
        if self.prior is not None and self.prior.shape == logits.shape:
            _, index = (logits.detach().float() - self.prior).topk(self.top_k, dim=-1)
            gates = probs.gather(1, index)
        else:
            gates, index = probs.topk(self.top_k, dim=-1)
        if self.normalize_topk:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return gates, index, logits


class Expert(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


@dataclass
class RoutingStats:
    tokens: np.ndarray
    dropped: int
    lb_loss: torch.Tensor
    z_loss: torch.Tensor
    remote: int = 0
    dispatched: int = 0
    loc_loss: torch.Tensor | None = None


class MoELayer(nn.Module):
    """Router + experts with capacity-limited dispatch (drop policy: position order)."""

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.router = Router(cfg.d_model, cfg.num_experts, cfg.top_k, cfg.normalize_topk)
        self.experts = nn.ModuleList(Expert(cfg.d_model, cfg.d_ff) for _ in range(cfg.num_experts))
        self.capacity_factor = cfg.capacity_factor
        self.cabinets = cfg.cabinets
        self.locality_prior = cfg.locality_prior
        self.cabinet_limited = cfg.cabinet_limited
        self.stats: RoutingStats | None = None

    def capacity(self, tokens: int) -> int:
        """Assignments each expert accepts per step; unlimited when the capacity factor is ≤ 0."""
        if self.capacity_factor <= 0:
            return tokens * self.router.top_k
        return math.ceil(tokens * self.router.top_k * self.capacity_factor / self.router.num_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        e, t = self.router.num_experts, flat.shape[0]
        home = token_cabinets(shape[0], shape[1], self.cabinets)
        cabinet_of = torch.as_tensor([expert_cabinet(i, e, self.cabinets) for i in range(e)])
        far = cabinet_of[None, :] != home[:, None]
        limited = self.cabinet_limited and self.cabinets > 1
        prior = (self.locality_prior > 0 or limited) and self.cabinets > 1
        self.router.prior = (1e9 if limited else self.locality_prior) * far.float() if prior else None
        gates, index, logits = self.router(flat)
        probs = logits.float().softmax(dim=-1)
        cap = self.capacity(t)
        out = torch.zeros_like(flat)
        dispatch = self._dispatch_limited if limited else self._dispatch_topk
        tokens, dropped, remote, dispatched = dispatch(flat, out, gates, index, logits, far, cap)
        frac = torch.as_tensor(tokens / max(1, t * self.router.top_k), dtype=probs.dtype)
        lb = e * (frac * probs.mean(dim=0)).sum()
        zl = torch.logsumexp(logits.float(), dim=-1).pow(2).mean()
        loc = (probs * far.to(probs.dtype)).sum(dim=-1).mean()
        self.stats = RoutingStats(tokens, dropped, lb, zl, remote, dispatched, loc)
        return out.reshape(shape)

    def _dispatch_topk(self, flat: torch.Tensor, out: torch.Tensor, gates: torch.Tensor, index: torch.Tensor,
                       logits: torch.Tensor, far: torch.Tensor, cap: int) -> tuple[np.ndarray, int, int, int]:
        """The router's own choices: each expert keeps its first ``cap`` assignments (position order) and drops the
        rest. Returns tokens per expert, dropped, remote and dispatched assignment counts."""
        tokens = np.zeros(self.router.num_experts, dtype=np.int64)
        dropped = remote = dispatched = 0
        for i in range(self.router.num_experts):
            tok, slot = (index == i).nonzero(as_tuple=True)
            tokens[i] = tok.numel()
            if tok.numel() > cap:
                dropped += tok.numel() - cap
                tok, slot = tok[:cap], slot[:cap]
            dispatched += tok.numel()
            remote += int(far[tok, i].sum())
            if tok.numel():
                y = self.experts[i](flat[tok])
                out.index_add_(0, tok, y * gates[tok, slot].unsqueeze(-1).to(y.dtype))
        return tokens, dropped, remote, dispatched

    def _dispatch_limited(self, flat: torch.Tensor, out: torch.Tensor, gates: torch.Tensor, index: torch.Tensor,
                          logits: torch.Tensor, far: torch.Tensor, cap: int) -> tuple[np.ndarray, int, int, int]:
        """Cabinet-limited dispatch with overflow (``cabinet_limited``): every expert keeps its first ``cap`` home
        assignments (position order); the rest spill, round by round, to their best remote expert with room left
        (each expert takes the spilled tokens proposed to it in position order), combined with the token's own gate
        weight. Returns tokens per expert (the
        router's home choices), dropped, remote and dispatched assignment counts."""
        e = self.router.num_experts
        tokens = np.zeros(e, dtype=np.int64)
        kept: list[tuple[torch.Tensor, torch.Tensor]] = []
        over_tok, over_slot = [], []
        for i in range(e):
            tok, slot = (index == i).nonzero(as_tuple=True)
            tokens[i] = tok.numel()
            kept.append((tok[:cap], slot[:cap]))
            over_tok.append(tok[cap:])
            over_slot.append(slot[cap:])
        room = torch.as_tensor([cap - k[0].numel() for k in kept])
        pending, pslot = torch.cat(over_tok), torch.cat(over_slot)
        pos = pending.argsort()  # spilled in position order
        pending, pslot = pending[pos], pslot[pos]
        n_over = pending.numel()
        spilled: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(e)]
        if n_over:
            score = logits.detach().float()[pending].masked_fill(~far[pending], float("-inf"))
            order = score.argsort(dim=-1, descending=True)
            left = torch.ones(n_over, dtype=torch.bool)
            for r in range(int(far[pending].sum(dim=-1).max())):
                want = order[:, r]
                for j in torch.unique(want[left]).tolist():
                    cand = (left & (want == j)).nonzero(as_tuple=True)[0][: max(0, int(room[j]))]
                    if cand.numel():
                        spilled[j].append((pending[cand], pslot[cand]))
                        room[j] -= cand.numel()
                        left[cand] = False
                if not left.any():
                    break
        remote = dispatched = 0
        for i in range(e):
            tok, slot = kept[i]
            far_tok = torch.cat([x[0] for x in spilled[i]]) if spilled[i] else tok[:0]
            far_slot = torch.cat([x[1] for x in spilled[i]]) if spilled[i] else slot[:0]
            remote += far_tok.numel()
            dispatched += tok.numel() + far_tok.numel()
            if tok.numel() + far_tok.numel():
                w = torch.cat([gates[tok, slot], gates[far_tok, far_slot]])
                both = torch.cat([tok, far_tok])
                y = self.experts[i](flat[both])
                out.index_add_(0, both, y * w.unsqueeze(-1).to(y.dtype))
        return tokens, n_over - remote, remote, dispatched

    def routed(self) -> RoutingStats:
        """The statistics of the last forward pass (an error before the first one)."""
        if self.stats is None:
            raise RuntimeError("MoELayer.routed() before any forward pass")
        return self.stats


def expert_cabinet(expert: int, experts: int, cabinets: int) -> int:
    """The cabinet an expert is placed on: contiguous blocks of experts per cabinet."""
    return expert * cabinets // experts


def token_cabinets(sequences: int, seq_len: int, cabinets: int) -> torch.Tensor:
    """The home cabinet of each token of a [sequences, seq_len] batch flattened row by row: the batch is split
    over the data-parallel ranks in order, and the ranks over the cabinets."""
    return (torch.arange(sequences) * cabinets // sequences).repeat_interleave(seq_len)


class Block(nn.Module):
    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = nn.MultiheadAttention(cfg.d_model, cfg.n_heads, batch_first=True)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.moe = MoELayer(cfg)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class MoELM(nn.Module):
    mask: torch.Tensor  # the causal mask, a registered buffer

    def __init__(self, cfg: MoEConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(cfg.seq_len, cfg.d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab)
        mask = torch.triu(torch.full((cfg.seq_len, cfg.seq_len), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:n]
        for blk in self.blocks:
            x = blk(x, self.mask[:n, :n])
        return self.head(self.ln(x))

    def moe_layers(self) -> list[MoELayer]:
        return [cast(Block, b).moe for b in self.blocks]

    def routers(self) -> list[tuple[str, Router]]:
        return [(f"blocks.{i}.moe.router", m.router) for i, m in enumerate(self.moe_layers())]


@dataclass
class MoEJob:
    """A live training: model, optimizer, scheduler (or None), deterministic sampler and the config."""

    cfg: MoEConfig
    model: MoELM
    optimizer: torch.optim.Optimizer
    scheduler: Any
    sampler: SequenceSampler
    step: int = 0
    recorder: Recorder = field(default_factory=Recorder)


@dataclass(frozen=True)
class MoEResult:
    """What a training produced, measured by the program itself (no probe needed)."""

    losses: np.ndarray
    tokens_per_expert: np.ndarray
    expert_cv: float
    final_loss: float
    run_dir: Path | None
    dropped_frac: np.ndarray
    router_grad_norm: np.ndarray
    aux_loss: np.ndarray
    entropy_floor: float

    def balance(self, window: float = 0.2) -> dict[str, float]:
        """Balance of the tokens per expert summed over the last ``window`` of steps."""
        n = max(1, int(len(self.tokens_per_expert) * window))
        return expert_balance(self.tokens_per_expert[-n:])


REMEDY: dict[str, Any] = {"gate_init_std": 0.02, "gate_bias": 0.0, "aux_loss_coeff": 1e-2}
"""The remedy parameters of the seed scenario: re-initialise the router small and unbiased, keep the aux loss."""


def seed_scenario(seed: int = 0, **changes: Any) -> MoEConfig:
    """The seed scenario (``make demo``): the router bias of expert 0 starts at +16, so the softmax is
    saturated (router gradient ~1e-7 instead of ~1e-1), expert 0 takes every token and the rest of them
    beyond its capacity are dropped, until Adam's normalised steps slowly pull the router out (~100 steps)."""
    return replace(MoEConfig(gate_bias=16.0, gate_bias_experts=1, seed=seed), **changes)


def build_moe(cfg: MoEConfig) -> MoEJob:
    """Model, optimizer (Adam), scheduler (linear warm-up when ``warmup_steps``) and sampler, all seeded."""
    seed_everything(cfg.seed)
    model = MoELM(cfg)
    for _, router in model.routers():
        router.reset(cfg.gate_init_std, cfg.gate_bias, cfg.gate_bias_experts)
    if cfg.gate_lr_scale == 1.0:
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    else:  # the gates on their own learning rate (a multiplier of the model's)
        gate_ids = {id(p) for _, r in model.routers() for p in r.gate.parameters()}
        optimizer = torch.optim.Adam([
            {"params": [p for p in model.parameters() if id(p) not in gate_ids], "lr_scale": 1.0},
            {"params": [p for p in model.parameters() if id(p) in gate_ids], "lr": cfg.lr * cfg.gate_lr_scale,
             "lr_scale": cfg.gate_lr_scale}], lr=cfg.lr)
    scheduler = None
    if cfg.warmup_steps > 0:
        w = cfg.warmup_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / w))
    source = MarkovSource(cfg.vocab, cfg.domains, cfg.successors, cfg.data_seed)
    sampler = SequenceSampler(source, cfg.batch_size, cfg.seq_len, cfg.seed, shards=cfg.cabinets,
                              cycle_steps=cfg.cycle_steps, cycle_skew=cfg.cycle_skew)
    return MoEJob(cfg, model, optimizer, scheduler, sampler)


def router_grad_norm(model: MoELM) -> float:
    """The L2 norm of the routers' gate gradients after a backward pass (0 when none has a gradient yet)."""
    squares = [float(g.pow(2).sum()) for _, r in model.routers() if (g := r.gate.weight.grad) is not None]
    return math.sqrt(sum(squares, 0.0))


def train_step(job: MoEJob) -> dict[str, Any]:
    """One optimizer step; returns loss (LM), aux/z losses, tokens per expert, dropped fraction, router grad."""
    cfg, model = job.cfg, job.model
    x, y = job.sampler.next()
    model.train()
    logits = model(torch.from_numpy(x))
    lm = F.cross_entropy(logits.reshape(-1, cfg.vocab), torch.from_numpy(y).reshape(-1))
    layers = model.moe_layers()
    stats = [m.routed() for m in layers]
    lb = torch.stack([st.lb_loss for st in stats]).mean()
    zl = torch.stack([st.z_loss for st in stats]).mean()
    loss = lm + cfg.aux_loss_coeff * lb + cfg.z_loss_coeff * zl
    if cfg.locality_coeff > 0:
        loss = loss + cfg.locality_coeff * torch.stack([st.loc_loss for st in stats if st.loc_loss is not None]).mean()
    job.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    router_grad = router_grad_norm(model)
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    lr = job.optimizer.param_groups[0]["lr"]
    job.optimizer.step()
    if job.scheduler is not None:
        job.scheduler.step()
    tokens = np.sum([st.tokens for st in stats], axis=0)
    assigned = x.size * cfg.top_k * len(layers)
    lm_v, lb_v, zl_v = float(lm.detach()), float(lb.detach()), float(zl.detach())
    dropped = int(np.sum([st.dropped for st in stats])) / assigned
    dispatched = sum(st.dispatched for st in stats)
    cross = sum(st.remote for st in stats) / dispatched if dispatched else 0.0
    out = {"cross_cabinet_share": cross, "loss": lm_v, "aux_loss": cfg.aux_loss_coeff * lb_v, "lb_loss": lb_v,
           "z_loss": cfg.z_loss_coeff * zl_v,
           "lr": lr, "tokens_per_expert": tokens, "dropped_frac": dropped, "router_grad_norm": router_grad,
           "step": job.step}
    job.step += 1
    return out


def apply_overrides(job: MoEJob, overrides: dict[str, Any]) -> MoEJob:
    """Apply remedy parameters to a live job (used by deterministic replay); returns the job.

    ``gate_init_std`` re-initialises every router (weights ~ N(0, std), bias = the ``gate_bias``
    override or 0) and clears the optimizer state of the router parameters; ``gate_bias`` alone
    sets the bias of the favoured experts; ``aux_loss_coeff``, ``z_loss_coeff``, ``top_k``,
    ``normalize_topk`` and ``capacity_factor`` change the routing from the next step; ``lr`` sets
    the learning rate (and the scheduler's base).
    """
    known = {f.name for f in MoEConfig.__dataclass_fields__.values()}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown MoE override(s): {', '.join(unknown)}")
    cfg = replace(job.cfg, **overrides)
    if "gate_init_std" in overrides or "gate_bias" in overrides:
        bias = float(overrides.get("gate_bias", 0.0 if "gate_init_std" in overrides else cfg.gate_bias))
        cfg = replace(cfg, gate_bias=bias)
        for _, router in job.model.routers():
            if "gate_init_std" in overrides:
                router.reset(cfg.gate_init_std, bias, cfg.gate_bias_experts)
            else:
                with torch.no_grad():
                    router.gate.bias.zero_()
                    router.gate.bias[: cfg.gate_bias_experts] = bias
            for p in router.parameters():
                job.optimizer.state.pop(p, None)
    for layer in job.model.moe_layers():
        layer.capacity_factor = cfg.capacity_factor
        layer.router.top_k = cfg.top_k
        layer.router.normalize_topk = cfg.normalize_topk
    if "lr" in overrides:
        for g in job.optimizer.param_groups:
            g["lr"] = cfg.lr * g.get("lr_scale", 1.0)
            g["initial_lr"] = g["lr"]
        if job.scheduler is not None:
            job.scheduler.base_lrs = [cfg.lr * g.get("lr_scale", 1.0) for g in job.optimizer.param_groups]
    job.cfg = cfg
    return job


def expert_balance(tokens_per_expert: np.ndarray) -> dict[str, float]:
    """CV, MaxVio and normalised entropy of tokens per expert (moe-config-anchors A1.4).

    A 2-D array [steps, experts] is summed over steps first.
    """
    c = np.asarray(tokens_per_expert, dtype=float)
    if c.ndim == 2:
        c = c.sum(axis=0)
    if c.ndim != 1 or c.size < 2:
        raise ValueError(f"tokens_per_expert must be [experts] or [steps, experts], got shape {c.shape}")
    mean = c.mean()
    if mean <= 0:
        return {"cv": float("nan"), "max_vio": float("nan"), "entropy": float("nan")}
    p = c / c.sum()
    nz = p[p > 0]
    return {"cv": float(c.std() / mean), "max_vio": float((c.max() - mean) / mean),
            "entropy": float(-(nz * np.log(nz)).sum() / math.log(c.size))}


def train_moe(cfg: MoEConfig, run_dir: str | Path | None = None, probe: bool = False,
              steps: int | None = None, job: MoEJob | None = None, run_id: str | None = None,
              checkpoint: bool | None = None, save_every: int = 0,
              declaration: Mapping[str, Any] | None = None) -> MoEResult:
    """Train (or continue ``job``) for ``steps`` (default ``cfg.steps``), with the probe when asked.

    ``checkpoint`` (default: when the probe writes into ``run_dir``) saves the replay checkpoint of the
    run before its first step (`save_replay_checkpoint`), so ``cann-tune auto RUN`` has a trial.
    ``save_every`` > 0 writes a training checkpoint every that many steps (``run_dir/checkpoints/step-N.pt``,
    as a real training saves every few hundred steps), each carrying ``declaration`` (the trial that can replay
    it): ``cann-tune checkpoint RUN --step N`` makes one of them the run's replay point."""
    job = job or build_moe(cfg)
    n = cfg.steps if steps is None else steps
    rec: list[dict[str, Any]] = []
    run_path = Path(run_dir) if run_dir is not None else None
    if checkpoint if checkpoint is not None else (probe and run_path is not None):
        if run_path is None:
            raise ValueError("checkpoint=True needs a run_dir to write the replay checkpoint into")
        save_replay_checkpoint(job, run_path)
    if save_every > 0 and run_path is None:
        raise ValueError("save_every needs a run_dir to write the training checkpoints into")
    meta = {"program": "moe_lm", "num_experts": cfg.num_experts, "top_k": cfg.top_k, "cabinets": cfg.cabinets}
    with probe_session(job.model, job.optimizer, run_path, probe, run_id=run_id, meta=meta) as pr:
        if pr is not None:
            for name, router in job.model.routers():
                pr.watch_router(router, cfg.num_experts, cfg.top_k, name=name)
        job.recorder.probe = pr
        for _ in range(n):
            if save_every > 0 and job.step % save_every == 0 and run_path is not None:
                save_training_checkpoint(job, run_path / "checkpoints", declaration or {})
            out = train_step(job)
            rec.append(out)
            job.recorder.log(loss=out["loss"], lr=out["lr"], aux_loss=out["aux_loss"],
                             z_loss=out["z_loss"], dropped_tokens=out["dropped_frac"] * cfg.batch_size
                             * cfg.seq_len * cfg.top_k,
                             cross_cabinet_share=out["cross_cabinet_share"] if cfg.cabinets > 1 else None)
        job.recorder.probe = None
    losses = np.array([r["loss"] for r in rec])
    tpe = np.array([r["tokens_per_expert"] for r in rec]).reshape(len(rec), cfg.num_experts)
    k = max(1, len(rec) // 5)
    cv = expert_balance(tpe[-k:])["cv"] if len(rec) else float("nan")
    return MoEResult(losses=losses, tokens_per_expert=tpe, expert_cv=cv, final_loss=window_mean(losses),
                     run_dir=run_path, dropped_frac=np.array([r["dropped_frac"] for r in rec]),
                     router_grad_norm=np.array([r["router_grad_norm"] for r in rec]),
                     aux_loss=np.array([r["lb_loss"] for r in rec]),
                     entropy_floor=job.sampler.source.entropy_floor())


# -- the scenario's own trial: replay from the checkpoint taken before the first step -----------------------
TRIAL_PARAMETERS: dict[str, str] = {
    "init_std": "gate_init_std", "aux_loss_coeff": "aux_loss_coeff", "capacity_factor": "capacity_factor",
    "z_loss_coeff": "z_loss_coeff", "topk": "top_k", "norm_topk_prob": "normalize_topk", "lr_scale": "lr",
    "clip_grad": "grad_clip", "locality_coeff": "locality_coeff",
}
"""Remedy tuning parameters (their names in ``cases/remedies-*.ttl``) that this program can set → the config
field each one sets (``lr_scale`` multiplies the learning rate). A remedy with any other parameter (for
example ``bias_update_rate``: this router has no expert bias) cannot be applied to an MoE scenario run."""
REPLAY_STEPS = 8
"""Steps each trial replays: the routing of 8 × 512 tokens settles the balance the fix gives (the router is
re-initialised at the checkpoint, so its effect shows from the first step), at about 3% of the 300-step
run's cost per trial."""
TARGET_STD_PP = 15.0
"""The story's target: the standard deviation of the experts' shares of routed tokens at most 15 points."""
OBJECTIVES = ("expert_util_std:min", "loss_jitter:min")
"""What the trial optimises: expert balance first, loss stability second."""


def config_overrides(cfg: MoEConfig, params: Mapping[str, Any]) -> dict[str, Any]:
    """The config-field overrides that a remedy's parameters make (see `TRIAL_PARAMETERS`); an unknown
    parameter raises ValueError naming the ones this program can set."""
    unknown = sorted(set(params) - set(TRIAL_PARAMETERS))
    if unknown:
        raise ValueError(f"the MoE scenario cannot set {', '.join(unknown)} (it sets {', '.join(TRIAL_PARAMETERS)})")
    out: dict[str, Any] = {}
    for name, value in params.items():
        field_name = TRIAL_PARAMETERS[name]
        if name == "lr_scale":
            out[field_name] = cfg.lr * float(value)
        elif name == "norm_topk_prob":
            out[field_name] = str(value).strip().lower() in ("true", "1", "yes")
        elif name == "topk":
            out[field_name] = min(int(value), cfg.num_experts)
        else:
            out[field_name] = float(value)
    return out


def remedy_config(cfg: MoEConfig, params: Mapping[str, Any]) -> dict[str, Any]:
    """The config overrides that train with the remedy from the start (a sandbox): `config_overrides`, plus the
    zero bias that a router re-initialisation implies (as `apply_overrides` applies it to a live job)."""
    out = config_overrides(cfg, params)
    if "gate_init_std" in out:
        out["gate_bias"] = 0.0
    return out


def expert_utilisation(tokens_per_expert: np.ndarray) -> dict[str, Any]:
    """Each expert's share of the routed tokens (percent; a 2-D [steps, experts] array is summed over steps),
    their standard deviation in percentage points, the largest and the smallest share."""
    c = np.asarray(tokens_per_expert, dtype=float)
    c = c.sum(axis=0) if c.ndim == 2 else c
    total = c.sum()
    shares = 100.0 * c / total if total > 0 else np.full(c.shape, np.nan)
    return {"shares_pct": [round(float(x), 2) for x in shares], "std_pp": float(np.std(shares)),
            "max_pct": float(np.max(shares)), "min_pct": float(np.min(shares))}


def save_replay_checkpoint(job: MoEJob, run_dir: str | Path) -> Any:
    """Save the job's whole state as the run's replay checkpoint, declaring this program's trial
    (`replay_trial`), the parameters it sets, its objectives and the story's target."""
    from debugtune.engine.tune.run_trial import save_run_checkpoint

    return save_run_checkpoint(run_dir, job.model, job.optimizer, job.scheduler, job.sampler, step=job.step,
                               trial=f"{__name__}:replay_trial", parameters=sorted(TRIAL_PARAMETERS),
                               objectives=OBJECTIVES, target=TARGET_STD_PP, trial_dir="",
                               extra={"scenario": "moe_lm", "config": asdict(job.cfg),
                                      "horizon_steps": REPLAY_STEPS})


def save_training_checkpoint(job: MoEJob, folder: Path, declaration: Mapping[str, Any]) -> Any:
    """``folder/step-<N>.pt``: the job's whole state at its step, with the scenario's config and ``declaration``
    (trial, parameters, objectives: what ``cann-tune checkpoint`` declares when it makes it a replay point)."""
    from debugtune.engine.tune.replay import Checkpoint

    return Checkpoint.save(folder / f"step-{job.step}.pt", job.model, job.optimizer, job.scheduler, job.sampler,
                           step=job.step, extra={**dict(declaration), "config": asdict(job.cfg)})


_CHECKPOINTS: dict[str, Any] = {}


def _checkpoint(path: str | Path) -> Any:
    """A checkpoint read once per process (the inline executor replays it trial after trial)."""
    from debugtune.engine.tune.replay import Checkpoint

    resolved = Path(path).resolve()
    stat = resolved.stat() if resolved.exists() else None
    key = f"{resolved}:{stat.st_mtime_ns}:{stat.st_size}" if stat else str(resolved)  # a rewritten file is read again
    if key not in _CHECKPOINTS:
        _CHECKPOINTS.clear()
        _CHECKPOINTS[key] = Checkpoint.load(resolved)
    return _CHECKPOINTS[key]


def replay_records(params: Mapping[str, Any], checkpoint: str | Path | None,
                   steps: int | None = None) -> tuple[list[dict[str, Any]], float, MoEConfig, Any]:
    """Replay ``steps`` (default the checkpoint's horizon) from ``checkpoint`` with the remedy's ``params``: the
    per-step records of `train_step`, the replayed steps' time in card-hours (on this one device, the quantity
    the run's own cost sums, without process start-up), the run's config and the checkpoint."""
    from debugtune.engine.tune.replay import replay

    if checkpoint is None:
        raise ValueError("the MoE scenario trial replays from a checkpoint: give checkpoint=")
    ckpt = _checkpoint(checkpoint)
    cfg = MoEConfig(**ckpt.extra["config"])
    n = int(steps or ckpt.extra.get("horizon_steps", REPLAY_STEPS))
    seconds: list[float] = []

    def timed_step(job: MoEJob) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = train_step(job)
        seconds.append(time.perf_counter() - t0)
        return out

    res = replay(ckpt, config_overrides(cfg, params), n, timed_step, job=build_moe(cfg),
                 apply_overrides=apply_overrides)
    return list(res.records), sum(seconds) / 3600.0, cfg, ckpt


def replay_trial(params: Mapping[str, Any], checkpoint: str | Path | None = None,
                 steps: int | None = None) -> dict[str, float]:
    """The scenario's trial: replay from the run's checkpoint with the remedy's ``params`` (`replay_records`), and
    report the balance and stability the story uses.

    ``expert_util_std`` (percentage points: std of the experts' shares of routed tokens over the replay),
    ``expert_share_max`` / ``expert_share_min`` (percent), ``expert_cv`` and ``max_vio`` (`expert_balance`),
    ``loss`` (mean LM loss of the replay's last half), ``loss_jitter`` (std of the step-to-step change of
    the loss: lower is steadier) and ``cost`` (card-hours of the replayed steps)."""
    records, cost, _cfg, _ckpt = replay_records(params, checkpoint, steps)
    tokens = np.array([r["tokens_per_expert"] for r in records])
    util, balance = expert_utilisation(tokens), expert_balance(tokens)
    losses = np.asarray([r["loss"] for r in records], dtype=float)
    return {"expert_util_std": util["std_pp"], "expert_share_max": util["max_pct"],
            "expert_share_min": util["min_pct"], "expert_cv": balance["cv"], "max_vio": balance["max_vio"],
            "loss": float(losses[len(losses) // 2:].mean()),
            "loss_jitter": float(np.std(np.diff(losses))) if len(losses) > 2 else 0.0,
            "cost": cost}
