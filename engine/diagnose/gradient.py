"""Gradient-flow detectors: NaN/Inf, explosion, vanishing, dead units, saturation, zero update,
router-gradient vanishing, update/weight ratio out of band and grad-norm drift.

Every grid is layers × steps; every rule is a vectorised comparison over it. Thresholds come from
the knowledge base (keys ``gradient.*``); their sources are in ``cases/thresholds/gradient.ttl``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from debugtune.engine.diagnose.base import Context, layer_order, lr_schedule, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.objective import not_supervised
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import (
    centred_median,
    dominant_period,
    ffill,
    first_run,
    longest_run,
    sinusoid_amplitude,
    spearman,
)
from debugtune.kg.records import location_kind

DIM = "gradient"


def _layers(ctx: Context, grid: Grid) -> Grid:
    """Rows of ``grid`` that are layers (not the global '' entity, not expert aggregates), input → output."""
    names = [str(n) for n in grid.labels if n and location_kind(str(n)) == "layer"]
    order = layer_order(ctx.view, names)
    idx = [grid.labels.index(n) for n in order]
    return Grid(grid.metric, tuple(order), grid.steps, grid.values[idx] if idx else grid.values[:0])


def global_norm(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """The global gradient norm per step: the '' entity when recorded, else √Σ layer norms²."""
    steps, g = ctx.view.series("grad_norm", "")
    if steps.size:
        return steps, g
    grid = _layers(ctx, ctx.view.by_entity("grad_norm"))
    if grid.empty:
        return grid.steps, np.zeros(0)
    with np.errstate(invalid="ignore"):
        return grid.steps, np.sqrt(np.nansum(grid.values ** 2, axis=0))


@dataclass
class GradientData:
    """What the gradient detectors share, computed on first use: the layers × steps grid of gradient norms and
    the global norm per step."""

    ctx: Context

    @cached_property
    def norms(self) -> Grid:
        return _layers(self.ctx, self.ctx.view.by_entity("grad_norm"))

    @cached_property
    def global_norm(self) -> tuple[np.ndarray, np.ndarray]:
        return global_norm(self.ctx)

    @cached_property
    def weights(self) -> Grid | None:
        """The layers × steps grid of weight norms (detail steps), None where the probe recorded none."""
        view = self.ctx.view
        return _layers(self.ctx, view.by_entity("weight_norm")) if view.has("weight_norm") else None

    @cached_property
    def update_ratios(self) -> Grid:
        return _update_ratios(self.ctx, self.weights)

    @cached_property
    def update_band(self) -> UpdateBand | None:
        return _update_band(self.ctx, self.update_ratios)

    def judged_norms(self) -> tuple[np.ndarray, np.ndarray]:
        """The global norm, or NotJudged when too few steps of it were recorded."""
        steps, g = self.global_norm
        need_steps(self.ctx, steps, "grad_norm")
        return steps, g


def gradient_data(ctx: Context) -> GradientData:
    return GradientData(ctx)


def nan_inf(ctx: Context, data: GradientData, out: Emit) -> None:
    """NaN or Inf gradient values (grad_nan / grad_inf counts, or non-finite norms) in any layer."""
    norms = data.norms
    data.judged_norms()
    view = ctx.view
    grids = [view.nonfinite("grad_norm")]
    grids += [view.by_entity(m, reduce="max") for m in ("grad_nan", "grad_inf") if view.has(m)]
    steps = np.unique(np.concatenate([g.steps for g in grids if g.steps.size])) if grids else np.zeros(0)
    if steps.size == 0:
        return
    bad_by_entity: dict[str, np.ndarray] = {}
    for g in grids:
        col = np.searchsorted(steps, g.steps)
        for i, name in enumerate(g.labels):
            hit = np.nan_to_num(g.values[i]) > 0
            if hit.any():
                row = bad_by_entity.setdefault(str(name), np.zeros(steps.size, dtype=bool))
                row[col[hit]] = True
    if not bad_by_entity:
        return
    bad = np.array(list(bad_by_entity.values()))
    steps_bad = bad.any(axis=0)
    first = int(np.argmax(steps_bad))
    order = [n for n in norms.labels if n in bad_by_entity] + [n for n in bad_by_entity if n not in norms.labels]
    entity = next((n for n in order if bad_by_entity[n][first] and n), "")
    out.add(make_finding(
        "NaNOrInf", DIM, entity, steps, first, int(np.flatnonzero(steps_bad)[-1]), 1.0,
        {"first_step": steps[first], "nonfinite_steps": int(steps_bad.sum()),
         "layers_affected": sum(1 for n in bad_by_entity if n)},
        "gradient.nan_inf", first), (steps, steps_bad.astype(float)))


def _initial_grad_weight_ratio(ctx: Context, data: GradientData) -> float | None:
    """Median over layers of ‖g‖/‖W‖ over the first steps (None without weight norms, or when the measured
    first update is small: see ``_first_updates_small``)."""
    norms, weights = data.norms, data.weights
    if weights is None or norms.empty or _first_updates_small(ctx, data):
        return None
    k = min(ctx.th.as_int("gradient.explosion.init_steps"), norms.steps.size)
    w = weights.like(norms)[:, :k]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(w > 0, norms.values[:, :k] / w, np.nan)
    if not np.isfinite(r).any():
        return None
    return float(np.nanmedian(np.nanmedian(r, axis=1)))


def _update_ratios(ctx: Context, weights: Grid | None) -> Grid:
    """Per-layer ``update_ratio`` (input → output), without the samples of a layer stepping from exactly zero.
    The probe divides by the weight after the step, so a layer that was all zeros before it (word2vec's output
    vectors, LoRA's B, a zero-initialised residual branch) has ‖ΔW‖ = ‖W‖: a ratio of exactly 1 that says
    nothing about the step's size, only that there was no scale yet to compare it with."""
    grid = _layers(ctx, ctx.view.by_entity("update_ratio"))
    v = grid.values.copy()
    v[np.abs(v - 1.0) <= 1e-9] = np.nan
    v[_growing_from_near_zero(ctx, grid, weights)] = np.nan
    return Grid(grid.metric, grid.labels, grid.steps, v)


def _growing_from_near_zero(ctx: Context, ratios: Grid, weights: Grid | None) -> np.ndarray:
    """The first samples of a layer that started near zero — its first weight norm zero, or below
    ``gradient.update_ratio.seed_frac`` of the median of the other layers' first norms — up to the first sample
    where it is above that share of the others' median and no longer grows by ``gradient.update_ratio.seed_growth``
    by the next sample. The case of a
    start from exactly zero, read a few steps later (skip-gram's context vectors, LoRA's B), where the ratio falls
    from 1 as the layer grows and says nothing of the step's size. Against the other layers, not against the
    layer's own later norm: a learning rate far too high grows every layer tenfold or more from an ordinary start."""
    mask = np.zeros(ratios.values.shape, dtype=bool)
    if weights is None or ratios.values.shape[0] < 2:
        return mask
    w = weights.like(ratios)
    frac = ctx.th["gradient.update_ratio.seed_frac"]
    for i, row in enumerate(w):
        others = np.delete(w, i, axis=0)
        seen = np.flatnonzero(np.isfinite(row) & np.isfinite(others).any(axis=0))
        if seen.size < 2:
            continue
        ref = np.nanmedian(others[:, seen], axis=0)
        norms = row[seen]
        if norms[0] > 0 and norms[0] >= frac * ref[0]:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            growing = np.append(norms[1:] / norms[:-1], 1.0) >= ctx.th["gradient.update_ratio.seed_growth"]
        settled = np.flatnonzero((norms >= frac * ref) & ~growing)
        mask[i, seen[: settled[0] if settled.size else seen.size]] = True
    return mask


def _first_updates_small(ctx: Context, data: GradientData) -> bool:
    """The first recorded update is within the update band (median per-layer ‖ΔW‖/‖W‖ below
    ``gradient.update_ratio.high``). A gradient as large as the weights predicts a too-large step only under
    SGD; an adaptive optimiser (Adam: about lr per coordinate) bounds the step whatever the gradient, as with a
    GAN's N(0, 0.02) initialisation. Where the update itself was measured it decides, not its proxy."""
    if not ctx.view.has("update_ratio"):
        return False
    g = data.update_ratios
    if g.empty:
        return False
    k = min(ctx.th.as_int("gradient.explosion.init_steps"), g.steps.size)
    cols = [j for j in range(k) if np.isfinite(g.values[:, j]).any()]
    if not cols:
        return False
    return bool(np.nanmedian(g.values[:, cols[0]]) < ctx.th["gradient.update_ratio.high"])


def _first_last_ratio(norms: Grid) -> np.ndarray:
    """‖g_first‖ / ‖g_last‖ per step (AutoTrainer's gradient ratio); NaN where undefined."""
    first, last = ffill(norms.values[0]), ffill(norms.values[-1])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(last > 0, first / last, np.nan)


def explosion(ctx: Context, data: GradientData, out: Emit) -> None:
    th = ctx.th
    norms = data.norms
    steps, gnorm = data.judged_norms()
    g = ffill(gnorm)
    if not np.isfinite(g).any():
        return
    n = g.size
    persist = ctx.persist("gradient.persist_steps", steps)
    # Megatron's large-grads rule: ≥ factor × the largest norm of the early window.
    early = max(2, min(th.as_int("gradient.explosion.early_steps"), int(n * th["gradient.explosion.early_frac"])))
    ref = np.nanmax(g[:early])
    factor = th["gradient.explosion.factor"]
    big = np.zeros(n, dtype=bool)
    big[early:] = g[early:] >= factor * ref
    hits = [("early_max", big, g / max(ref, 1e-30), factor)]
    # AutoTrainer's rule: first-layer over last-layer gradient norm above beta3.
    if len(norms.labels) >= 2:
        ratio = _first_last_ratio(norms)
        beta3 = th["gradient.explosion.first_last_ratio"]
        hits.append(("first_last_ratio", np.nan_to_num(ratio) > beta3, np.nan_to_num(ratio), beta3))
    # gradients as large as the weights themselves from the first steps (inputs or init far off scale)
    init = _initial_grad_weight_ratio(ctx, data)
    if init is not None:
        limit = th["gradient.explosion.init_ratio"]
        mask = np.zeros(n, dtype=bool)
        k = min(th.as_int("gradient.explosion.init_steps"), n)
        mask[:k] = init >= limit
        hits.append(("init_ratio", mask, np.full(n, init), limit))
    best = None
    for name, mask, value, limit in hits:
        start = first_run(mask, persist if name == "first_last_ratio" else 1)
        if start is None:
            continue
        frac = float(mask[start:].mean())
        if name == "first_last_ratio" and frac < th["gradient.persist_frac"]:
            continue
        peak = float(np.nanmax(value[start:]))
        sev = severity(peak, limit, limit * th["gradient.explosion.saturate"])
        if best is None or sev > best[0]:
            best = (sev, name, start, mask, peak, frac)
    if best is None:
        return
    sev, name, start, mask, peak, frac = best
    entity = norms.labels[0] if name == "first_last_ratio" and norms.labels else ""
    end = int(np.flatnonzero(mask)[-1])
    out.add(make_finding(
        "GradientExplosion", DIM, entity, steps, start, end, sev,
        {"rule": name, "peak_ratio": peak,
         "grad_norm_peak": float(np.nanmax(g)),
         "grad_norm_early_max": float(ref), "fraction_of_steps": frac},
        f"gradient.explosion.{name}", start + (0 if name == "early_max" else persist - 1)),
        (steps, np.log10(np.maximum(g, 1e-30))))


def vanishing(ctx: Context, data: GradientData, out: Emit) -> None:
    th = ctx.th
    norms = data.norms
    data.judged_norms()
    if len(norms.labels) < 2:
        raise NotJudged("fewer than two layers recorded")
    ratio = _first_last_ratio(norms)
    first = ffill(norms.values[0])
    floor = th["gradient.vanishing.first_norm"]
    mask = (np.nan_to_num(ratio, nan=1.0) < th["gradient.vanishing.first_last_ratio"]) & (first < floor)
    # every layer below the floor while the loss is still far from zero: the gradient died at the output
    top = np.where(np.isfinite(norms.values), norms.values, -np.inf).max(axis=0)
    whole = _unconverged(ctx, norms.steps) & (top >= 0) & (top < floor)
    mask |= whole
    ratio = np.where(whole, 0.0, ratio)
    persist = ctx.persist("gradient.persist_steps", norms.steps)
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["gradient.persist_frac"]:
        return
    level = float(np.nanmedian(np.where(mask, ratio, np.nan)[start:]))
    limit = th["gradient.vanishing.first_last_ratio"]
    sev = severity(1 / max(level, 1e-30), 1 / limit, 1 / th["gradient.vanishing.saturate"])
    out.add(make_finding(
        "GradientVanishing", DIM, norms.labels[0], norms.steps, start, int(np.flatnonzero(mask)[-1]), sev,
        {"first_last_ratio": level, "first_layer_norm": float(np.median(first[start:])),
         "last_layer_norm": float(np.nanmedian(norms.values[-1][start:])),
         "fraction_of_steps": float(mask[start:].mean()), "all_layers": bool(whole[start:].mean() >= 0.5)},
        "gradient.vanishing.first_last_ratio", start + persist - 1),
        (norms.steps, np.log10(np.maximum(np.nan_to_num(ratio, nan=1.0), 1e-30))))


def _unconverged(ctx: Context, steps: np.ndarray) -> np.ndarray:
    """Per step: whether the training loss is still above ``gradient.vanishing.loss_share`` of its start
    (all true when no loss is recorded)."""
    if not ctx.view.has("loss"):
        return np.ones(steps.size, dtype=bool)
    ls, lv = ctx.view.series("loss")
    lv = ffill(lv)
    if not np.isfinite(lv).any():
        return np.ones(steps.size, dtype=bool)
    start = float(np.median(np.abs(lv[: max(1, min(3, lv.size))])))
    return np.interp(steps, ls, np.abs(lv)) > ctx.th["gradient.vanishing.loss_share"] * start


def drift(ctx: Context, data: GradientData, out: Emit) -> None:
    """A sustained monotone rise of the global norm (e.g. gradients accumulating without zero_grad)."""
    th = ctx.th
    steps, gnorm = data.judged_norms()
    g = ffill(gnorm)
    if not np.isfinite(g).all():
        return
    n = g.size
    w = max(2, int(n * th["gradient.drift.window_frac"]))
    h = max(3, int(n * th["gradient.drift.head_frac"]))
    head, tail = np.median(g[:h]), np.median(g[-w:])
    if head <= 0:
        return
    growth = tail / head
    rho = spearman(np.arange(n, dtype=float), g)
    if growth < th["gradient.drift.growth"] or rho < th["gradient.drift.rank_corr"]:
        return
    onset = int(np.argmax(g > head * np.sqrt(th["gradient.drift.growth"])))
    out.add(make_finding(
        "GradNormDrift", DIM, "", steps, onset, n - 1, severity(growth, th["gradient.drift.growth"],
                                                               th["gradient.drift.growth"] * 10),
        {"growth": growth, "rank_correlation": rho, "grad_norm_start": head, "grad_norm_end": tail},
        "gradient.drift", max(onset, h)), (steps, np.log10(np.maximum(g, 1e-30))))


def sawtooth(ctx: Context, data: GradientData, out: Emit) -> None:
    """The global gradient norm climbs step after step and falls back at a fixed period: gradients pile up
    between resets (zero_grad called only every k steps). Found by the autocorrelation of the detrended
    log norm, as for the loss oscillation, plus the share of rising steps that makes it a sawtooth."""
    th = ctx.th
    steps, gnorm = data.judged_norms()
    g = ffill(gnorm)
    judge_from = int(g.size * th["gradient.judge_after_frac"])
    y = np.log(np.maximum(g[judge_from:], 1e-30))
    if y.size < 4 * th.as_int("gradient.sawtooth.min_period") or not np.isfinite(y).all():
        return
    resid = y - centred_median(y, th.as_int("gradient.sawtooth.trend_window"))
    period, corr = dominant_period(resid, th.as_int("gradient.sawtooth.min_period"), y.size // 4)
    rising = float(np.mean(np.diff(y) > 0))
    if not period or corr < th["gradient.sawtooth.acf"] or rising < th["gradient.sawtooth.rise_share"]:
        return
    swing = float(np.exp(2 * sinusoid_amplitude(resid, period)))
    out.add(make_finding(
        "GradNormSawtooth", DIM, "", steps, judge_from, g.size - 1,
        severity(corr, th["gradient.sawtooth.acf"], 1.0),
        {"period_steps": float(period) * ctx.spacing(steps), "autocorrelation": corr, "rising_share": rising,
         "peak_to_trough": swing},
        "gradient.sawtooth", min(g.size - 1, judge_from + 2 * period)), (steps[judge_from:], resid))


def _persistent_rows(ctx: Context, grid: Grid, limit: float, key: str) -> list[tuple[int, int, float, float]]:
    """(row, onset index, fraction of later steps above ``limit``, median after onset) per row that
    stays above ``limit`` for the persistence window and for the persistence fraction after it."""
    th = ctx.th
    persist, need = ctx.persist("gradient.persist_steps", grid.steps), th[f"{key}.persist_frac"]
    judge_from = int(grid.steps.size * th["gradient.judge_after_frac"])
    out = []
    for i in range(len(grid.labels)):
        v = ffill(grid.values[i])
        mask = v >= limit
        mask[:judge_from] = False
        start = first_run(mask, persist)
        if start is None:
            continue
        frac = float(mask[start:].mean())
        if frac >= need:
            out.append((i, start, frac, float(np.median(v[start:]))))
    return out


def _consumer_grid(ctx: Context, metric: str) -> Grid:
    """A per-layer activation measure taken at the consuming layer's input, without the first layer in forward
    order: its input is the data, whose constant pixels or [-1, 1] range say nothing about units."""
    grid = ctx.view.by_entity(metric)
    first = layer_order(ctx.view, [str(n) for n in grid.labels if n])[:1]
    return grid.select(np.array([str(n) not in first for n in grid.labels], dtype=bool))


def _activation_grid(ctx: Context, consumer: str, module: str, fallback: str | None = None) -> tuple[str, Grid]:
    """The best recorded measure of an activation property: seen at the consuming layer's input (works for
    functional activations), else at activation modules, else ``fallback``."""
    view = ctx.view
    if view.has(consumer):
        grid = _consumer_grid(ctx, consumer)
        if not grid.empty:
            return consumer, grid
    metric = module if view.has(module) or fallback is None else fallback
    return metric, view.by_entity(metric)


_LOOKUP_TABLES = ("Embedding", "EmbeddingBag")


def _without_lookup_tables(ctx: Context, grid: Grid) -> Grid:
    """``grid`` without the rows of embedding layers (run.json ``probe.layer_kinds``): the gradient of a lookup
    table is zero on the rows of every token absent from the batch, by construction, not because units died."""
    kinds = (ctx.meta.get("probe") or {}).get("layer_kinds") or {}
    keep = [i for i, n in enumerate(grid.labels) if kinds.get(str(n)) not in _LOOKUP_TABLES]
    if len(keep) == len(grid.labels):
        return grid
    if not any(grid.labels[i] for i in keep):
        raise NotJudged("only embedding layers have grad_zero_frac: their rows are zero for tokens absent "
                        "from the batch")
    return Grid(grid.metric, tuple(grid.labels[i] for i in keep), grid.steps, grid.values[keep])


def dead_units(ctx: Context, data: GradientData, out: Emit) -> None:
    """Units that output zero for every sample (dying ReLU), seen as input features of the next layer that are zero
    across the batch, else as zero activations or zero gradient entries."""
    th = ctx.th
    metric, grid = _activation_grid(ctx, "act_in_dead_frac", "act_zero_frac", "grad_zero_frac")
    if metric == "grad_zero_frac":
        grid = _without_lookup_tables(ctx, grid)
    need_steps(ctx, grid.steps, metric)
    limit = th[f"gradient.dead_units.{metric}"]
    rows = _persistent_rows(ctx, grid, limit, "gradient.dead_units")
    if not rows:
        return
    i, start, frac, level = max(rows, key=lambda r: r[3])
    share = len(rows) / max(len(grid.labels), 1)
    depth = np.clip((level - limit) / max(th["gradient.dead_units.saturate"] - limit, 1e-9), 0.0, 1.0)
    out.add(make_finding(
        "DeadUnits", DIM, str(grid.labels[i]), grid.steps, start, grid.steps.size - 1,
        0.5 + 0.25 * float(depth) + 0.25 * share,
        {metric: level, "threshold": limit, "fraction_of_steps": frac, "layers_affected": len(rows),
         "layers_total": len(grid.labels),
         f"{metric}_start": float(np.nanmedian(grid.values[i][: max(2, start // 2 + 1)]))},
        f"gradient.dead_units.{metric}", start + ctx.persist("gradient.persist_steps", grid.steps) - 1),
        (grid.steps, ffill(grid.values[i])))


def dead_at_init(ctx: Context, data: GradientData, out: Emit) -> None:
    """Units born dead: at the first recorded step, before any update could kill them, most of a hidden layer's
    input units are zero for every sample, and they stay dead (the DeadUnits criterion).

    Training kills ReLUs by large updates (a learning rate too high); units dead before the first update were
    initialised dead: biases or weights that make the pre-activation negative for every input (Lu et al. 2019
    show deep ReLU nets can be born dead). A healthy initialisation leaves a unit dead across a whole batch only
    by chance. "Most" is DeepDiagnosis's dead-layer share, ``gradient.dead_at_init.share``."""
    th = ctx.th
    grid = _consumer_grid(ctx, "act_in_dead_frac")
    need_steps(ctx, grid.steps, "act_in_dead_frac")
    born = th["gradient.dead_at_init.share"]
    rows = [r for r in _persistent_rows(ctx, grid, th["gradient.dead_units.act_in_dead_frac"], "gradient.dead_units")
            if np.isfinite(grid.values[r[0]][0]) and grid.values[r[0]][0] >= born]
    if not rows:
        return
    i = max(rows, key=lambda r: grid.values[r[0]][0])[0]
    at_init = float(grid.values[i][0])
    out.add(make_finding(
        "UnitsDeadAtInit", DIM, str(grid.labels[i]), grid.steps, 0, grid.steps.size - 1,
        0.5 + 0.5 * float(np.clip((at_init - born) / max(1.0 - born, 1e-9), 0.0, 1.0)),
        {"act_in_dead_frac_at_init": at_init, "first_step": int(grid.steps[0]), "threshold": born,
         "layers_affected": len(rows), "layers_total": len(grid.labels)},
        "gradient.dead_at_init", 0), (grid.steps, ffill(grid.values[i])))


def dead_outputs(ctx: Context, data: GradientData, out: Emit) -> None:
    """Output units that receive no gradient: something between the logits and the loss cuts it (a ReLU or
    clamp on the logits before a from-logits loss).

    A linear layer's weight gradient is δᵀh over the batch. In a healthy network δ at the output is dense
    (softmax cross-entropy gives every output a non-zero error), so the output layer's exact zeros come only
    from inputs that are zero across the batch — the same units zero the rows of the previous layer's gradient,
    which therefore has at least as many. The output layer having clearly *more* exact zeros than the layer
    before it means whole output rows got no error; a gradient that is zero everywhere, the output layer
    included, while the loss is still high is the extreme case."""
    th, view = ctx.th, ctx.view
    norms = data.norms
    zf = _layers(ctx, view.by_entity("grad_zero_frac"))
    need_steps(ctx, zf.steps, "grad_zero_frac")
    if len(zf.labels) < 2:
        raise NotJudged("fewer than two layers recorded")
    head, before = ffill(zf.values[-1]), ffill(zf.values[-2])
    excess = head - before
    limit = th["gradient.dead_outputs.excess"]
    out_norm = np.interp(zf.steps, norms.steps, ffill(norms.row(zf.labels[-1]))) \
        if zf.labels[-1] in norms.labels else np.full(zf.steps.size, np.nan)
    silent = (np.nan_to_num(out_norm, nan=1.0) <= th["gradient.zero_update.eps"]) & _unconverged(ctx, zf.steps)
    mask = (excess >= limit) | silent
    mask[: int(zf.steps.size * th["gradient.judge_after_frac"])] = False
    persist = ctx.persist("gradient.persist_steps", zf.steps)
    start = first_run(mask, persist)
    if start is None or mask[start:].mean() < th["gradient.persist_frac"]:
        return
    level = float(np.median(excess[start:]))
    all_zero = float(silent[start:].mean())
    sev = 1.0 if all_zero >= 0.5 else severity(max(level, 1e-9), limit, 1.0)
    out.add(make_finding(
        "DeadOutputUnits", DIM, str(zf.labels[-1]), zf.steps, start, int(np.flatnonzero(mask)[-1]), sev,
        {"output_zero_frac": float(np.median(head[start:])), "previous_zero_frac": float(np.median(before[start:])),
         "excess_zero_frac": level, "all_zero_share": all_zero, "fraction_of_steps": float(mask[start:].mean())},
        "gradient.dead_outputs", start + persist - 1), (zf.steps, np.where(silent, 1.0, excess)))


def saturation(ctx: Context, data: GradientData, out: Emit) -> None:
    """Sigmoid or tanh outputs pinned at their bounds, seen at the consuming layer's input (bounded inputs) or at
    activation modules: those the probe saw feed a weight layer (``probe.hidden_bounded``), not gates, whose
    outputs sit near 0 or 1 because switching is their job."""
    th = ctx.th
    metric, grid = _activation_grid(ctx, "act_in_sat_frac", "act_sat_frac")
    hidden = (ctx.view.meta.get("probe") or {}).get("hidden_bounded")
    if metric == "act_sat_frac" and isinstance(hidden, list):
        grid = grid.select(np.array([str(n) in hidden for n in grid.labels], dtype=bool))
        if grid.empty:
            return
    need_steps(ctx, grid.steps, metric)
    limit = th[f"gradient.saturation.{metric}"]
    rows = _persistent_rows(ctx, grid, limit, "gradient.saturation")
    if not rows:
        return
    i, start, frac, level = max(rows, key=lambda r: r[3])
    out.add(make_finding(
        "ActivationSaturation", DIM, str(grid.labels[i]), grid.steps, start, grid.steps.size - 1,
        severity(level, limit, 1.0), {metric: level, "threshold": limit, "fraction_of_steps": frac,
                                      "layers_affected": len(rows)},
        f"gradient.saturation.{metric}", start + ctx.persist("gradient.persist_steps", grid.steps) - 1),
        (grid.steps, ffill(grid.values[i])))


def activation_slope(ctx: Context, data: GradientData, out: Emit) -> None:
    """Hidden bounded activations (sigmoid, tanh …, those a weight layer follows) whose mean slope at the inputs they
    receive stays at or below ``gradient.activation_slope.max``: each passes on at most that share of the signal,
    forward and backward. A sigmoid's steepest slope is 1/4 (LeCun et al. 1998), so any hidden sigmoid does; a tanh
    does once driven into its tails. Read at the activation modules the probe listed as hidden (``act_slope``,
    ``run.json`` ``probe.hidden_bounded``), else at the inputs of the layers they feed (``act_in_slope``, which sees
    ``torch.sigmoid`` applied functionally; the first layer's input is the data and is left out). Half or more of
    them must show it; a model with none is judged and shows none: one whose probe listed no hidden bounded module
    and whose weight layers' inputs (``act_out_std`` says they were watched) never looked bounded."""
    th = ctx.th
    hidden = (ctx.view.meta.get("probe") or {}).get("hidden_bounded")
    if ctx.view.has("act_slope") and isinstance(hidden, list) and hidden:
        metric, grid = "act_slope", ctx.view.by_entity("act_slope")
        names = [str(x) for x in grid.labels]
        order = layer_order(ctx.view, [n for n in names if n in hidden])
    elif ctx.view.has("act_in_slope"):
        metric, grid = "act_in_slope", _consumer_grid(ctx, "act_in_slope")
        names = [str(x) for x in grid.labels]
        order = layer_order(ctx.view, [n for n in names if n])
    elif hidden == [] and ctx.view.has("act_out_std"):
        return  # no bounded module, and no weight layer's input ever looked bounded: nothing to attenuate
    elif isinstance(hidden, list):
        raise NotJudged("the probe listed hidden bounded activations but recorded no slope at them")
    else:
        raise NotJudged("run.json does not list the model's hidden bounded activations (probe.hidden_bounded)")
    if not order:
        return
    need_steps(ctx, grid.steps, metric)
    limit = th["gradient.activation_slope.max"]
    persist, need = ctx.persist("gradient.persist_steps", grid.steps), th["gradient.persist_frac"]
    rows = []
    for name in order:
        v = ffill(grid.values[names.index(name)])
        mask = v <= limit
        start = first_run(mask, persist)
        if start is not None and mask[start:].mean() >= need:
            rows.append((name, start, float(np.median(v[start:]))))
    if not rows or len(rows) * 2 < len(order):
        return
    name, start, level = min(rows, key=lambda r: r[1])
    out.add(make_finding(
        "BoundedActivationsAttenuate", DIM, name, grid.steps, start, grid.steps.size - 1,
        severity(limit / max(level, 1e-9), 1.0, 1.0 / max(limit, 1e-9) ** 2),
        {metric: level, "threshold": limit, "modules_affected": len(rows), "hidden_bounded": len(order)},
        "gradient.activation_slope", start + persist - 1), (grid.steps, ffill(grid.values[names.index(name)])))


def gradient_noise(ctx: Context, data: GradientData, out: Emit) -> None:
    """Consecutive minibatch gradients of the whole model (``grad_cos_prev``, entity "") in unrelated directions
    while the model has not yet learnt: from ``gradient.judge_after_frac`` of the run, on the steps before the loss
    made half of its progress from its first to its last stretch (all of them when it made less than
    ``convergence.plateau.min_improvement``: a plateau). Their cosine
    estimates |G|² / (|G|² + tr(Σ)/B), the share of the gradient's energy the batches agree on (McCandlish et al.
    2018's noise scale), so a mean within ±``gradient.noise.max_cos`` says the batch is ten times smaller than the
    noise scale: the targets give the model no consistent direction. A converged model's gradient is noise too,
    which is why the steps after the loss's progress are not read. The mean, not the median: step by step the
    cosine of noisy batches swings between about -0.8 and 0.8, and its expectation is the estimate. A mean near -1
    (steps bouncing across a valley) or near 1 (gradients never cleared, steps too small to move) is not noise."""
    th = ctx.th
    steps, cos = ctx.view.series("grad_cos_prev")
    need_steps(ctx, steps, "grad_cos_prev")
    ls, loss = ctx.view.series("loss")
    n = steps.size
    judged = np.arange(n) >= int(n * th["gradient.judge_after_frac"])
    if ls.size >= 3:
        w = max(3, int(ls.size * th["convergence.window_frac"]))
        trend = centred_median(ffill(loss), w)
        first, last = float(np.median(trend[:w])), float(np.median(trend[-w:]))
        progress = first - last
        if np.isfinite(progress) and progress > th["convergence.plateau.min_improvement"] * abs(first):
            judged &= np.interp(steps, ls, trend) >= last + 0.5 * (first - last)
    window = cos[judged & np.isfinite(cos)]
    if window.size < ctx.persist("gradient.persist_steps", steps):
        raise NotJudged(f"{window.size} finite grad_cos_prev values before the loss made half of its progress")
    level, limit = float(np.mean(window)), th["gradient.noise.max_cos"]
    if abs(level) > limit:
        return
    lo = int(np.argmax(judged))
    out.add(make_finding(
        "GradientNoiseDominated", DIM, "", steps, lo, n - 1,
        severity(limit / max(abs(level), limit * 1e-2), 1.0, 10.0),
        {"grad_cos_mean": level, "threshold": limit, "steps_judged": int(window.size)},
        "gradient.noise", int(np.flatnonzero(judged)[-1])), (steps, ffill(cos)))


def zero_update(ctx: Context, data: GradientData, out: Emit) -> None:
    """Layers whose weights never change while others do: frozen, or missing from the optimizer.

    A layer counts when it requires a gradient and its update is zero on most steps, or when it has gradients
    but no update was ever recorded for it (the probe records updates of the parameters the optimizer holds).
    Parameters that require no gradient are frozen on purpose (a fine-tuned backbone): a note, not a finding."""
    th, view = ctx.th, ctx.view
    metric = "update_norm" if view.has("update_norm") else "update_ratio"
    params = (ctx.meta.get("probe") or {}).get("params") or {}
    on_purpose = {str(n).rpartition(".")[0] or str(n) for n in params.get("frozen_names") or []}
    if on_purpose:
        out.note(f"{len(on_purpose)} layer(s) frozen on purpose (requires_grad=False), not counted as ZeroUpdate")
    norms = data.norms
    need_steps(ctx, norms.steps, "grad_norm")
    grid = _layers(ctx, view.by_entity(metric))
    frozen: list[str] = []
    moving: list[str] = []
    start_step = int(norms.steps[0]) if norms.steps.size else 0
    if not grid.empty:
        v = np.abs(grid.values)
        zero = np.where(np.isnan(v), False, v <= th["gradient.zero_update.eps"])
        still = zero.mean(axis=1) >= th["gradient.zero_update.frac"]
        frozen += [str(n) for n, f in zip(grid.labels, still, strict=True) if f]
        moving += [str(n) for n, f in zip(grid.labels, still, strict=True) if not f]
        if still.any():
            start_step = int(grid.steps[int(np.argmax(zero[int(np.argmax(still))]))])
        frozen += [n for n in norms.labels if n not in grid.labels]  # gradients, but never updated
    frozen = [n for n in frozen if n not in on_purpose]
    if not frozen or (not moving and not grid.empty):
        return
    layers = list(dict.fromkeys([*norms.labels, *grid.labels]))
    ordered = layer_order(ctx.view, list(dict.fromkeys(frozen)))
    steps = norms.steps if norms.steps.size else grid.steps
    # the update grid may be sparser than the gradient steps (detail steps only): find its step on this axis
    start = min(int(np.searchsorted(steps, start_step)), steps.size - 1)
    share = len(set(frozen)) / max(len(layers), 1)
    out.add(make_finding(
        "ZeroUpdate", DIM, ordered[0], steps, start, steps.size - 1, float(np.clip(0.5 + share, 0.5, 1.0)),
        {"layers_frozen": len(set(frozen)), "layers_total": len(layers),
         "has_gradient": ordered[0] in norms.labels, "in_optimizer": ordered[0] in grid.labels},
        f"gradient.zero_update.{metric}", start + ctx.persist("gradient.persist_steps", steps) - 1),
        (steps, np.ones(steps.size)))


@dataclass(frozen=True)
class UpdateBand:
    """The per-step median and upper quartile over layers of the update/weight ratio (frozen layers left out)."""

    steps: np.ndarray
    median: np.ndarray
    upper: np.ndarray
    persist: int
    high_start: int | None     # where a sustained episode above the band begins (None: none)


def _update_band(ctx: Context, grid: Grid) -> UpdateBand | None:
    th = ctx.th
    need_steps(ctx, grid.steps, "update_ratio")
    if grid.empty:
        return None
    v = grid.values.copy()
    v[v <= th["gradient.zero_update.eps"]] = np.nan  # frozen layers are ZeroUpdate's business
    if not np.isfinite(v).any():
        return None
    med = ffill(np.nanmedian(v, axis=0))
    upper = ffill(np.nanpercentile(v, 75, axis=0))  # "too low" must hold for most layers, not just dead ones
    persist = ctx.persist("gradient.persist_steps", grid.steps)
    return UpdateBand(grid.steps, med, upper, persist, first_run(med > th["gradient.update_ratio.high"], persist))


def update_ratio_high(ctx: Context, data: GradientData, out: Emit) -> None:
    """The median per-layer update/weight ratio above the band for a sustained episode, or an early burst that broke
    the run: steps of ``gradient.update_ratio.burst`` (ten times the usual 1e-3) in the first
    ``convergence.spike.early_steps`` under which the loss rose above its first value by
    ``convergence.spike.min_jump`` of it, after which the loss never got below its first value by
    ``convergence.plateau.min_improvement``. Such steps can be short-lived because they end what they act on
    (rectifier units knocked dead, bounded units pushed into their tails), so the sustained band never sees them; a
    run that recovers from an early overshoot and learns (a wide ReLU layer's first steps) is not judged by it."""
    band = data.update_band
    if band is None:
        return
    hi = ctx.th["gradient.update_ratio.high"]
    if band.high_start is not None:
        _emit_band(ctx, out, "UpdateRatioTooHigh", band, band.median, band.median > hi, band.high_start,
                   lambda level: severity(level, hi, hi * 100))
        return
    burst = _early_burst(ctx, band)
    if burst is not None:
        low = ctx.th["gradient.update_ratio.burst"]
        _emit_band(ctx, out, "UpdateRatioTooHigh", band, band.median, burst, int(np.argmax(burst)),
                   lambda level: severity(level, low, hi * 100))


def _early_burst(ctx: Context, band: UpdateBand) -> np.ndarray | None:
    """The mask of the early update-ratio samples above ``gradient.update_ratio.burst`` up to the loss's early
    peak, when the loss rose there above its first value by ``convergence.spike.min_jump`` of it and its last
    stretch (``convergence.window_frac`` of the run) stayed within ``convergence.plateau.min_improvement`` of that
    first value or above it; else None."""
    th = ctx.th
    ls, loss = ctx.view.series("loss")
    if ls.size < 2 or not np.isfinite(loss[0]) or loss[0] <= 0:
        return None
    if not_supervised(ctx.view.metrics, loss, th["convergence.objective.negative_share"]) is not None:
        return None  # a policy-gradient or adversarial loss rises and falls by design: its rise is no overshoot
    early = ls < ls[0] + th["convergence.spike.early_steps"]
    window = np.where(early & np.isfinite(loss), loss, -np.inf)
    peak = int(np.argmax(window))
    if window[peak] < loss[0] * (1.0 + th["convergence.spike.min_jump"]):
        return None
    tail = loss[-max(3, int(ls.size * th["convergence.window_frac"])):]
    tail = tail[np.isfinite(tail)]
    if tail.size and np.median(tail) < loss[0] * (1.0 - th["convergence.plateau.min_improvement"]):
        return None  # the run recovered and learnt: an overshoot, not steps that broke it
    mask = (band.median > th["gradient.update_ratio.burst"]) & (band.steps <= ls[peak])
    return mask if mask.any() else None


def update_ratio_low(ctx: Context, data: GradientData, out: Emit) -> None:
    """The update/weight ratio of most layers below the band through most of the learning phase: after any
    warm-up, in the first part of the run (a converging model's updates shrink by themselves) and before any
    scheduled decay. A run with a sustained episode above the band is not judged too low."""
    th = ctx.th
    band = data.update_band
    if band is None or band.high_start is not None:
        return
    n, persist, lo = band.upper.size, band.persist, th["gradient.update_ratio.low"]
    sched = lr_schedule(ctx, band.steps)
    judge_from = max(int(n * th["gradient.judge_after_frac"]), sched.warmup_end)
    end = min(sched.first_drop(n), max(judge_from + persist, int(n * th["gradient.update_ratio.low_window_frac"])))
    low = band.upper < lo
    low[:judge_from] = False
    low[end:] = False
    start = first_run(low, persist)
    if start is None or low[judge_from:end].sum() / max(end - judge_from, 1) < th["gradient.persist_frac"]:
        return
    _emit_band(ctx, out, "UpdateRatioTooLow", band, band.upper, low, start,
               lambda level: severity(1 / level, 1 / lo, 100 / lo))


def _emit_band(ctx: Context, out: Emit, symptom: str, band: UpdateBand, level_of: np.ndarray, mask: np.ndarray,
               start: int, sev: Callable[[float], float]) -> None:
    th = ctx.th
    stop = int(np.flatnonzero(mask)[-1])
    level = float(np.median(level_of[start: stop + 1]))
    out.add(make_finding(
        symptom, DIM, "", band.steps, start, stop, sev(level),
        {"update_ratio_median": level, "band_low": th["gradient.update_ratio.low"],
         "band_high": th["gradient.update_ratio.high"], "steps_out_of_band": int(mask.sum())},
        "gradient.update_ratio", start + band.persist - 1),
        (band.steps, np.log10(np.maximum(level_of, 1e-30))))


def router(ctx: Context, data: GradientData, out: Emit) -> None:
    """A router's gradient vanished: its norm below ``gradient.router.floor``, below ``gradient.router.ratio`` of
    the median layer's norm, or — measured consistently with the layers, each gradient against its own weights —
    its ‖g‖/‖W‖ below ``gradient.router.scaled_ratio`` of the median layer's ‖g‖/‖W‖ (`_router_scaled_ratio`, a
    running median over ``gradient.router.window_steps``: a batch whose tokens sit near the gate's decision
    boundaries lifts one step's gradient)."""
    th, view = ctx.th, ctx.view
    norms = data.norms
    routers = view.by_entity("router_grad_norm")
    need_steps(ctx, routers.steps, "router_grad_norm")
    ref = np.nanmedian(norms.values, axis=0) if not norms.empty else np.full(routers.steps.size, np.nan)
    if not norms.empty and norms.steps.size != routers.steps.size:
        ref = np.interp(routers.steps, norms.steps, ffill(ref))
    floor, ratio_limit = th["gradient.router.floor"], th["gradient.router.ratio"]
    scaled_limit = th["gradient.router.scaled_ratio"]
    persist = ctx.persist("gradient.persist_steps", routers.steps)
    window = ctx.persist("gradient.router.window_steps", routers.steps)
    for i, name in enumerate(routers.labels):
        r = ffill(routers.values[i])
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(ref > 0, r / ref, np.nan)
        scaled = centred_median(_router_scaled_ratio(data.weights, norms, str(name), routers.steps, r), window)
        mask = (r < floor) | (np.nan_to_num(rel, nan=np.inf) < ratio_limit) | \
            (np.nan_to_num(scaled, nan=np.inf) < scaled_limit)
        start, length = longest_run(mask)
        if length < persist:
            continue
        ep = slice(start, start + length)
        rel_med = float(np.nanmedian(rel[ep])) if np.isfinite(rel[ep]).any() else float("nan")
        scaled_med = float(np.nanmedian(scaled[ep])) if np.isfinite(scaled[ep]).any() else float("nan")
        sevs = [severity(limit / max(v, 1e-30), 1.0, 1e3) for limit, v in ((ratio_limit, rel_med),
                                                                          (scaled_limit, scaled_med)) if np.isfinite(v)]
        out.add(make_finding(
            "RouterGradVanishing", DIM, str(name), routers.steps, start, start + length - 1, max(sevs, default=0.75),
            {"router_grad_norm": float(np.median(r[ep])), "relative_to_layers": rel_med,
             "scaled_relative_to_layers": scaled_med,
             "router_grad_norm_min": float(np.min(r)), "vanished_steps": length,
             "router_grad_norm_after": float(np.median(r[start + length:])) if start + length < r.size else
             float(np.median(r[ep]))},
            "gradient.router", start + persist - 1),
            (routers.steps, np.log10(np.maximum(r, 1e-30))))


def _router_scaled_ratio(weights: Grid | None, norms: Grid, router: str, steps: np.ndarray,
                         grad: np.ndarray) -> np.ndarray:
    """Per step of ``steps``: the router's ‖g‖/‖W‖ (``grad`` over the norm of the weights recorded under its path)
    over the median ‖g‖/‖W‖ of the other layers; NaN where the weights are not recorded. A gradient's norm grows
    with its tensor's size and scale, so a saturated gate with weights far larger than a healthy one's can sit at a
    few percent of the layers' norm while its gradient moves its weights a thousand times less than theirs do."""
    out = np.full(steps.size, np.nan)
    if weights is None or norms.empty:
        return out
    w = weights.like(norms)
    w = np.array([ffill(row) for row in w]).reshape(w.shape)
    own = np.array([str(n).startswith(router + ".") for n in norms.labels])
    if not own.any() or own.all():
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        layers = np.nanmedian(np.where(w[~own] > 0, norms.values[~own] / w[~own], np.nan), axis=0)
        gate_w = np.sqrt(np.nansum(w[own] ** 2, axis=0))
        gate_w[~np.isfinite(w[own]).any(axis=0)] = np.nan
        if norms.steps.size != steps.size or not np.array_equal(norms.steps, steps):
            layers = np.interp(steps, norms.steps, ffill(layers))
            gate_w = np.interp(steps, norms.steps, ffill(gate_w))
        out = np.where((gate_w > 0) & (layers > 0), grad / gate_w / layers, np.nan)
    return out
