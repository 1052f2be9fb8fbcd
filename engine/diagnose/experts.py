"""Mixture-of-experts detectors: expert imbalance (CV, MaxVio, entropy of tokens per expert), dead experts, dropped
tokens and a negligible load-balancing loss. Grids are experts × steps, one group per router.

Thresholds come from the knowledge base (keys ``moe.*``); sources are in ``cases/thresholds/convergence.ttl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from scipy import ndimage

from debugtune.engine.diagnose.base import Context, make_finding, severity
from debugtune.engine.diagnose.evidence import scaled
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import ffill, first_run, longest_run

DIM = "convergence"


def imbalance_stats(c: np.ndarray) -> dict[str, np.ndarray]:
    """Per step (columns) of tokens per expert (rows): CV, MaxVio, normalised entropy, top share."""
    c = np.nan_to_num(c)
    e = c.shape[0]
    total = c.sum(axis=0)
    mean = total / e
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total > 0, c / total, 1.0 / e)
        cv = np.where(mean > 0, c.std(axis=0) / mean, 0.0)
        maxvio = np.where(mean > 0, (c.max(axis=0) - mean) / mean, 0.0)
        ent = -np.sum(np.where(p > 0, p * np.log(p), 0.0), axis=0) / np.log(e) if e > 1 else np.ones(c.shape[1])
    return {"cv": cv, "maxvio": maxvio, "entropy": ent, "top_share": p.max(axis=0), "total": total,
            "top": p.argmax(axis=0)}


def _router_groups(labels: tuple) -> dict[str, list[tuple[int, int]]]:
    """router path → [(row, expert index)] from entity names '<router>/expert:<i>' or 'expert:<i>'."""
    out: dict[str, list[tuple[int, int]]] = {}
    for row, name in enumerate(labels):
        router, _, idx = str(name).rpartition("expert:")
        try:
            out.setdefault(router.rstrip("/"), []).append((row, int(idx)))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class RouterTokens:
    """One router's tokens per expert: the raw counts, their statistics over a short window, expert indices."""

    router: str
    experts: list[int]
    counts: np.ndarray        # experts × steps
    stats: dict[str, np.ndarray]

    @property
    def prefix(self) -> str:
        return f"{self.router}/" if self.router else ""


@dataclass
class ExpertData:
    """What the expert detectors share: tokens per expert of every router with at least two experts."""

    ctx: Context

    @cached_property
    def grid(self) -> Grid:
        grid = self.ctx.view.by_entity("expert_tokens", reduce="sum")
        need_steps(self.ctx, grid.steps, "expert_tokens")
        return grid

    @cached_property
    def routers(self) -> list[RouterTokens]:
        grid, ctx = self.grid, self.ctx
        window = ctx.persist("moe.window_steps", grid.steps)
        out = []
        for router, members in _router_groups(grid.labels).items():
            members.sort(key=lambda m: m[1])
            rows = [m[0] for m in members]
            if len(rows) < 2:
                continue
            c = np.nan_to_num(grid.values[rows])
            # tokens summed over a few steps: counting noise averages out
            st = imbalance_stats(ndimage.uniform_filter1d(c, size=min(window, c.shape[1]), axis=1, mode="nearest"))
            out.append(RouterTokens(router, [m[1] for m in members], c, st))
        if not out:
            raise NotJudged("no router with two or more experts recorded")
        return out

    @property
    def persist(self) -> int:
        return self.ctx.persist("moe.persist_steps", self.grid.steps)


def expert_data(ctx: Context) -> ExpertData:
    return ExpertData(ctx)


def imbalance(ctx: Context, data: ExpertData, out: Emit) -> None:
    """Tokens concentrate on few experts (MaxVio above the limit) for a sustained episode."""
    th, steps, persist = ctx.th, data.grid.steps, data.persist
    for r in data.routers:
        st = r.stats
        mask = st["maxvio"] >= th["moe.imbalance.maxvio"]
        start, length = longest_run(mask)
        if length < max(persist, int(th["moe.imbalance.min_frac"] * mask.size)):
            continue
        ep = slice(start, start + length)
        share = r.counts[:, ep].sum(axis=1) / max(r.counts[:, ep].sum(), 1e-12)
        hot = int(np.argmax(share))
        level = float(np.median(st["maxvio"][ep]))
        sev, ev = _since_onset(ctx, severity(level, th["moe.imbalance.maxvio"], len(r.experts) - 1.0), mask, start, {
            "expert": r.experts[hot], "token_share": float(share[hot]), "cv": float(np.median(st["cv"][ep])),
            "maxvio": level, "entropy": float(np.median(st["entropy"][ep])), "experts": len(r.experts),
            "episode_steps": length, "cv_after": float(np.median(st["cv"][start + length:]))
            if start + length < mask.size else float(np.median(st["cv"][ep]))})
        out.add(make_finding("ExpertImbalance", DIM, f"{r.prefix}expert:{r.experts[hot]}", steps, start,
                             start + length - 1, sev, ev, "moe.imbalance", start + persist - 1), (steps, st["maxvio"]))


def _since_onset(ctx: Context, sev: float, mask: np.ndarray, start: int,
                 measured: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Severity and evidence weighted by how much of the run since the episode began showed the condition, when
    that is less than half: an early imbalance the router (and its balancing loss) works off is a transient of a
    healthy MoE, one that holds for most of the run is evidence of a fault (evidence.scaled, the Jeffreys bound of
    that share; half is the midpoint between a condition that is mostly present and one mostly absent)."""
    since = mask[start:]
    if since.mean() >= 0.5:
        return sev, {**measured, "share_since_onset": float(since.mean())}
    return scaled(ctx, sev, since, extra={**measured, "share_since_onset": float(since.mean())})


def dead(ctx: Context, data: ExpertData, out: Emit) -> None:
    """Experts that receive (almost) no tokens and stay that way."""
    th, steps = ctx.th, data.grid.steps
    window = ctx.persist("moe.dead.steps", steps)
    for r in data.routers:
        mean = r.stats["total"] / len(r.experts)
        cold = r.counts < th["moe.dead.frac_of_mean"] * mean
        dead_rows = []
        for k in range(len(r.experts)):
            s = first_run(cold[k], window)
            if s is not None and cold[k, s:].mean() >= th["moe.persist_frac"]:  # dead experts stay dead
                dead_rows.append((k, s))
        if not dead_rows:
            continue
        onset = min(s for _, s in dead_rows)
        out.add(make_finding(
            "DeadExperts", DIM, r.router or "router", steps, onset, steps.size - 1,
            float(np.clip(0.5 + len(dead_rows) / len(r.experts), 0.5, 1.0)),
            {"dead_experts": len(dead_rows), "experts": len(r.experts),
             "first_dead_expert": r.experts[min(dead_rows, key=lambda d: d[1])[0]]},
            "moe.dead", onset + window - 1), (steps, cold.sum(axis=0).astype(float)))


def _drop_fraction(ctx: Context, data: ExpertData, r: RouterTokens) -> np.ndarray | None:
    """Dropped share of the router's assignments per step, from a logged fraction or a count."""
    view, steps = ctx.view, data.grid.steps
    window = ctx.persist("moe.window_steps", steps)
    if view.has("dropped_token_frac"):
        g = view.by_entity("dropped_token_frac")
        key = r.router if r.router in g.labels else ("" if "" in g.labels else None)
        if key is None:
            return None
        f = np.interp(steps, g.steps, ffill(np.nan_to_num(g.row(key))))
        return ndimage.uniform_filter1d(f, size=min(window, f.size), mode="nearest")
    g = view.by_entity("dropped_tokens", reduce="sum")
    key = r.router if r.router in g.labels else ("" if "" in g.labels else None)
    if key is None:
        return None
    d = np.interp(steps, g.steps, np.nan_to_num(g.row(key)))
    total = r.stats["total"]
    total_w = ndimage.uniform_filter1d(total, size=min(window, total.size), mode="nearest")
    d_w = ndimage.uniform_filter1d(d, size=min(window, d.size), mode="nearest")
    with np.errstate(divide="ignore", invalid="ignore"):  # expert_tokens counts assignments before capacity
        return np.where(total_w > 0, d_w / total_w, 0.0)


def dropping(ctx: Context, data: ExpertData, out: Emit) -> None:
    """A material share of the expert assignments dropped at capacity for a sustained episode."""
    th, steps, persist = ctx.th, data.grid.steps, data.persist
    for r in data.routers:
        frac = _drop_fraction(ctx, data, r)
        if frac is None:
            continue
        mask = frac >= th["moe.dropping.frac"]
        start, length = longest_run(mask)
        if length < max(persist, int(th["moe.imbalance.min_frac"] * mask.size)):
            continue
        ep = slice(start, start + length)
        level = float(np.median(frac[ep]))
        sev, ev = _since_onset(ctx, severity(level, th["moe.dropping.frac"], 0.9), mask, start, {
            "drop_fraction": level, "drop_fraction_max": float(frac.max()), "episode_steps": length})
        out.add(make_finding("TokenDropping", DIM, r.router or "router", steps, start, start + length - 1, sev, ev,
                             "moe.dropping", start + persist - 1), (steps, frac))


def balance_loss(ctx: Context, data: object, out: Emit) -> None:
    """The load-balancing loss term (``aux_loss``, as added to the loss) a negligible share of the training loss,
    or negligible in itself (the balance loss is about 1 or more, so the term bounds the coefficient): the router
    gets no balancing gradient (coefficient 0, or far below the usual 1e-3 to 1e-2).

    A logged ``aux_loss`` larger than the whole logged loss cannot be a term of it: it is the raw balance loss
    (HF Mixtral's ``aux_loss`` beside a ``loss`` that holds ``coef * aux_loss``), and the loss bounds the
    coefficient from above (``coef <= loss / aux_loss``, the task loss being non-negative). A bound below the
    coefficient the balancing papers found sufficient (``moe.balance_loss.min_coeff``) is then the evidence."""
    th, view = ctx.th, ctx.view
    steps, aux = view.series("aux_loss")
    need_steps(ctx, steps, "aux_loss")
    ls, loss = view.series("loss")
    term = np.abs(ffill(aux))
    with np.errstate(divide="ignore", invalid="ignore"):
        share = term / np.abs(np.interp(steps, ls, ffill(loss)))
    persist = ctx.persist("moe.persist_steps", steps)
    if np.nanmedian(share) > 1.0:
        _coefficient_bound(ctx, steps, 1.0 / share, persist, out)
        return
    limit, least = th["moe.balance_loss.max_share"], th["moe.balance_loss.max_term"]
    mask = (np.nan_to_num(share, nan=np.inf) < limit) | (np.nan_to_num(term, nan=np.inf) < least)
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["moe.persist_frac"]:
        return
    level, size = float(np.nanmedian(share[start:])), float(np.nanmedian(term[start:]))
    out.add(make_finding(
        "BalanceLossNegligible", DIM, "", steps, start, steps.size - 1,
        max(severity(limit / max(level, limit * 1e-3), 1.0, 1e3), severity(least / max(size, least * 1e-3), 1.0, 1e3)),
        {"aux_share_of_loss": level, "aux_loss": size, "threshold": limit, "threshold_term": least},
        "moe.balance_loss", start + persist - 1), (steps, share))


def balance_config(ctx: Context, data: object, out: Emit) -> None:
    """The balancing term off in the run's own configuration (run.json ``moe``): a coefficient of 0 (Megatron's
    ``moe_aux_loss_coeff`` default, which its router treats as disabled; a transformers MoE trained without
    ``output_router_logits``, recorded as 0 by the Trainer callback) or a load-balancing type of ``none``, with
    no expert bias balancing the load instead (DeepSeek-V3's auxiliary-loss-free routing). A fact about the
    set-up, read whether or not the loss term is logged."""
    moe = ctx.meta.get("moe") or {}
    raw, kind = moe.get("aux_loss_coeff"), str(moe.get("load_balancing") or "").lower()
    coef = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    if coef is None and kind != "none":
        raise NotJudged("run.json records no balancing coefficient (moe.aux_loss_coeff)")
    if moe.get("expert_bias") is True or kind == "sinkhorn":
        raise NotJudged("the load is balanced by an expert bias or Sinkhorn routing, not a loss term")
    if not (kind == "none" or (coef is not None and coef <= 0)):
        return
    metric = next((m for m in ("loss", "expert_tokens") if ctx.view.has(m)), None)
    if metric is None:
        raise NotJudged("no series recorded to place the finding")
    steps = ctx.view.series(metric)[0] if metric == "loss" else ctx.view.by_entity(metric).steps
    need_steps(ctx, steps, metric)
    out.add(make_finding(
        "BalanceLossNegligible", DIM, "", steps, 0, steps.size - 1, 1.0,
        {"aux_loss_coeff": coef, "load_balancing": kind or None,
         "configured": str(moe.get("aux_loss_coeff_from") or "run.json moe section")},
        "moe.balance_config", 0), None)


def _coefficient_bound(ctx: Context, steps: np.ndarray, bound: np.ndarray, persist: int, out: Emit) -> None:
    """``bound``: loss / raw balance loss per step, an upper bound of the balancing coefficient; the finding where it
    stays below ``moe.balance_loss.min_coeff`` (the bound is tightest once the task loss has fallen: its median
    over the steps from the onset is the evidence). A bound that never falls below that value says nothing about
    the coefficient (0 and 1e-2 fit it alike): not judged, rather than judged absent."""
    th = ctx.th
    least = th["moe.balance_loss.min_coeff"]
    mask = np.nan_to_num(bound, nan=np.inf) < least
    if not mask.any():
        raise NotJudged(f"aux_loss is the raw balance loss and the loss bounds the coefficient only at "
                        f"{float(np.nanmin(bound)):.3g} or more: the coefficient is unknown (log the term as added "
                        f"to the loss, or give run.json moe.aux_loss_coeff)")
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["moe.persist_frac"]:
        return
    level = float(np.nanmedian(bound[start:]))
    out.add(make_finding(
        "BalanceLossNegligible", DIM, "", steps, start, steps.size - 1,
        severity(least / max(level, least * 1e-3), 1.0, 1e3),
        {"aux_coeff_bound": level, "threshold_coeff": least, "aux_logged": "raw balance loss"},
        "moe.balance_loss", start + persist - 1), (steps, bound))
