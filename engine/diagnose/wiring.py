"""Detectors of how a training is wired, read from the probe's direct measurements: the scale of the model's
input, a batch whose inputs are far off that scale, the forward signal at initialisation, gradients that are
never zeroed, parameters the optimizer does not hold and a router biased at initialisation (the model's
outputs: ``outputs``).

These tell causes apart directly where the downstream symptoms (a plateau, a spike, dead units) are shared by
many causes. Each reads metrics the probe writes at step 0 and on detail steps (``docs/probe.md``); thresholds
are ``input.*``, ``gradient.forward_signal.*``, ``gradient.stale.*``, ``gradient.not_optimized.*``
and ``moe.router_init.*`` in the knowledge base, each with its source.
"""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.base import Context, layer_order, make_finding, severity
from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.registry import Emit, NotJudged, need_steps
from debugtune.engine.diagnose.stats import ffill, trailing_median


def _first(ctx: Context, metric: str, entity: str = "") -> tuple[int, float] | None:
    """(step, value) of the first finite sample of ``metric`` at ``entity``."""
    steps, values = ctx.view.series(metric, entity)
    ok = np.flatnonzero(np.isfinite(values))
    return (int(steps[ok[0]]), float(values[ok[0]])) if ok.size else None


def _early(ctx: Context, metric: str, entity: str = "") -> tuple[np.ndarray, np.ndarray]:
    """The samples of ``metric`` within the first ``input.early_frac`` of the run (at least three samples)."""
    steps, values = ctx.view.series(metric, entity)
    if steps.size == 0:
        raise NotJudged(f"{metric} has no samples")
    k = max(3, int(np.ceil(steps.size * ctx.th["input.early_frac"])))
    return steps[:k], values[:k]


def _early_rms(ctx: Context) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Steps, std and mean of the model's input over the first part of the run, and its median RMS."""
    steps, std = _early(ctx, "input_std")
    mean = np.interp(steps, *ctx.view.series("input_mean")) if ctx.view.has("input_mean") else np.zeros(steps.size)
    return steps, std, mean, float(np.nanmedian(np.sqrt(mean ** 2 + std ** 2)))


def input_scale(ctx: Context, data: object, out: Emit) -> None:
    """The model's floating input is far from unit scale, or its features lie on very different scales.

    LeCun et al. (1998, §4.3) shift inputs to zero mean and scale them to unit variance: with the usual
    fan-in-scaled initialisation a unit's pre-activation then has unit scale. The input's RMS (√(mean² + std²))
    is judged over the first part of the run, so one bad batch is not a set-up problem."""
    th = ctx.th
    steps, std, mean, rms = _early_rms(ctx)
    ratio = float(np.nanmedian(_early(ctx, "input_feature_scale_ratio")[1])) \
        if ctx.view.has("input_feature_scale_ratio") else float("nan")
    rms_max, ratio_max = th["input.scale.rms_max"], th["input.scale.feature_ratio_max"]
    big, spread = rms >= rms_max, np.isfinite(ratio) and ratio >= ratio_max
    if not (big or spread):
        return
    sev = max(severity(rms, rms_max, rms_max * 25) if big else 0.0,
              severity(ratio, ratio_max, ratio_max * 100) if spread else 0.0)
    ev: dict[str, float | str | bool] = {"input_rms": rms, "input_std": float(np.nanmedian(std)),
                                         "input_mean": float(np.nanmedian(mean)), "rule": "rms" if big else "spread"}
    if ctx.view.has("input_absmax"):
        ev["input_absmax"] = float(np.nanmax(_early(ctx, "input_absmax")[1]))
    if np.isfinite(ratio):
        ev["feature_scale_ratio"] = ratio
    all_steps = ctx.view.steps("input_std")
    out.add(make_finding("InputScaleAbnormal", "convergence", "", all_steps, 0, all_steps.size - 1, sev, ev,
                         "input.scale", 0), (all_steps, ffill(ctx.view.series("input_std")[1])))


def _off_level(ctx: Context, metric: str, out: Emit, drops_only: bool, names: tuple[str, str]) -> None:
    """InputBatchOutlier where ``metric`` is ``input.batch_outlier.ratio`` or more away from the trailing median of
    the ``input.batch_outlier.window_steps`` steps before it (only below it when ``drops_only``)."""
    th = ctx.th
    steps, v = ctx.view.series(metric)
    need_steps(ctx, steps, metric)
    s = ffill(np.where(np.isfinite(v), v, np.nan))
    window = ctx.persist("input.batch_outlier.window_steps", steps)
    logs = np.log(np.maximum(s, 1e-30))
    level = trailing_median(logs, window)
    ratio = np.exp(level - logs if drops_only else np.abs(logs - level))
    limit = th["input.batch_outlier.ratio"]
    hit = ratio >= limit
    hit[:window] = False
    if not hit.any():
        return
    idx = np.flatnonzero(hit)
    first, peak = int(idx[0]), int(idx[np.argmax(ratio[idx])])
    out.add(make_finding(
        "InputBatchOutlier", "convergence", "", steps, first, int(idx[-1]),
        severity(float(ratio[peak]), limit, limit * 100),
        {"ratio": float(ratio[peak]), names[0]: float(s[peak]), names[1]: float(np.exp(level[peak])),
         "outlier_steps": int(idx.size), "peak_step": int(steps[peak])},
        "input.batch_outlier", first), (steps, np.log10(ratio)))


def batch_outlier(ctx: Context, data: object, out: Emit) -> None:
    """A step whose input scale is far from the running level of the steps before it: a corrupt batch.

    The sample standard deviation of a batch of n i.i.d. inputs has a relative standard error of about
    √((κ − 1)/(4n)) for kurtosis κ, so within one distribution a batch off by ``input.batch_outlier.ratio`` is
    many standard errors away; batches of hard but valid examples are not."""
    _off_level(ctx, "input_std", out, False, ("batch_std", "typical_std"))


def token_outlier(ctx: Context, data: object, out: Emit) -> None:
    """A step whose token ids are far less diverse than the steps before it: a batch of one repeated id, a
    broken shard (OLMo 2 traced loss spikes to documents of long repeated n-grams).

    The number D of distinct ids among n draws from a fixed distribution is a sum of negatively correlated
    indicators, so Var(D) ≤ E(D): a batch with ``input.batch_outlier.ratio`` times fewer distinct ids than its
    neighbours is several standard errors off whenever they have 10 or more. Only drops count: more distinct ids
    than usual is an easier batch, not a corrupt one. The probe leaves the batch's most frequent id out of the
    count (padding), so a padded batch is judged by its real tokens; a batch of one id has none."""
    _off_level(ctx, "input_token_distinct_frac", out, True, ("batch_distinct_frac", "typical_distinct_frac"))


def forward_signal(ctx: Context, data: object, out: Emit) -> None:
    """At the first step the model's output is orders of magnitude smaller than its input: the weights are too
    small for the signal to propagate through the layers (Glorot & Bengio 2010; He et al. 2015: each layer scales
    the signal's variance by fan_in·Var(W) times the activation's gain, so a scale far below the fan-in
    expectation shrinks it geometrically with depth). When the hidden layers' inputs are already dead at the
    first step (ReLUs that never fire), the signal did not shrink but stopped: that is DeadUnits' finding.

    Not judged when the input's RMS is itself above ``input.scale.rms_max`` (InputScaleAbnormal's rule): a
    normalisation layer or saturating gates bound the output whatever the input's scale, so the output over
    an input of RMS 1,000 is small with any weights, and the ratio speaks of the input, not of the layers.
    Not judged either when the outputs are probabilities: a sigmoid's slope at 0 is 1/4 and a softmax over K
    classes divides the spread by about K, so DCGAN's healthy N(0, 0.02) discriminator read as vanishing."""
    th = ctx.th
    rms_in = _early_rms(ctx)[3]
    if rms_in >= th["input.scale.rms_max"]:
        raise NotJudged(f"the input's RMS is {rms_in:.3g}, above input.scale.rms_max "
                        f"({th['input.scale.rms_max']:g}): the end-to-end gain would measure the input's scale")
    if ctx.view.has("act_in_dead_frac"):
        dead = ctx.view.by_entity("act_in_dead_frac")
        first_layer = layer_order(ctx.view, [str(x) for x in dead.labels if x])[:1]
        hidden = [i for i, n in enumerate(dead.labels) if n and str(n) not in first_layer]
        first = dead.values[hidden, 0] if hidden and dead.values.size else np.zeros(0)
        if first.size and np.nanmedian(first) >= th["gradient.dead_units.act_in_dead_frac"]:
            return
    lo0, hi0 = _first(ctx, "output_min"), _first(ctx, "output_max")
    if lo0 is not None and hi0 is not None and lo0[1] >= 0.0 and hi0[1] <= 1.0:
        raise NotJudged("the model's outputs lie within [0, 1] at the first step (a sigmoid or softmax inside the "
                        "model): the squashing function's slope, not the layers, sets their spread (the logits' "
                        "spread would decide)")
    out0, inp0 = _first(ctx, "output_std"), _first(ctx, "input_std")
    if out0 is None or inp0 is None:
        raise NotJudged("no finite output_std or input_std at the first step")
    mean0 = _first(ctx, "input_mean")
    rms = float(np.hypot(inp0[1], mean0[1] if mean0 else 0.0))
    if rms <= 0:
        raise NotJudged("the model's input is zero at the first step")
    gain = out0[1] / rms
    limit = th["gradient.forward_signal.min_gain"]
    if gain >= limit:
        return
    ev: dict[str, float | str | bool] = {"output_std": out0[1], "input_rms": rms, "end_to_end_gain": gain}
    if ctx.view.has("init_gain"):
        g = ctx.view.by_entity("init_gain")
        ev["init_gain_median"] = float(np.nanmedian(g.values[:, 0])) if g.values.size else float("nan")
    steps = ctx.view.steps("output_std")
    out.add(make_finding("ForwardSignalVanishing", "gradient", "", steps, 0, steps.size - 1,
                         severity(limit / max(gain, 1e-30), 1.0, 1e4), ev, "gradient.forward_signal", 0),
            (steps, np.log10(np.maximum(ffill(ctx.view.series("output_std")[1]), 1e-30))))


def _attach_median(ctx: Context, metric: str) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    """(steps, finite attach values, their entities) of a per-layer attach-time metric, None when not recorded."""
    if not ctx.view.has(metric):
        return None
    g = ctx.view.by_entity(metric)
    first = g.values[:, 0] if g.values.size else np.zeros(0)
    ok = np.isfinite(first)
    return (g.steps, first[ok], [str(n) for n, k in zip(g.labels, ok, strict=True) if k]) if ok.any() else None


def init_scale(ctx: Context, data: object, out: Emit) -> None:
    """At attach the weight layers' gain std(W)·sqrt(fan_in) is far above every standard initialisation's (He's
    sqrt(2) is the largest), or the normalisation layers' gains are far above the 1 every framework starts them
    at: the median over layers, so that one layer with an odd shape (a tied head, a first layer of fan-in 2) does
    not decide. Only the large side: see the symptom's definition."""
    th = ctx.th
    measured = [(m, x, th[key]) for m, key in (("init_gain", "gradient.init_scale.max_gain"),
                                                ("init_norm_gain", "gradient.init_scale.max_norm_gain"))
                if (x := _attach_median(ctx, m)) is not None]
    if not measured:
        raise NotJudged("no finite init_gain or init_norm_gain at attach")
    over = [(m, x, limit, float(np.median(x[1]))) for m, x, limit in measured if float(np.median(x[1])) > limit]
    if not over:
        return
    metric, (steps, values, names), limit, median = max(over, key=lambda o: o[3] / o[2])
    above = [n for n, v in zip(names, values, strict=True) if v > limit]
    key = "init_gain_median" if metric == "init_gain" else "init_norm_gain_median"
    out.add(make_finding("InitWeightsTooLarge", "gradient", "", steps, 0, steps.size - 1,
                         severity(median / limit, 1.0, 8.0),
                         {key: median, "layers_above": len(above), "layers": len(values), "measure": metric,
                          "first_layers_above": ",".join(above[:4])}, "gradient.init_scale", 0),
            (steps, np.full(steps.size, median)))


def _optimized_layers(ctx: Context) -> set[str] | None:
    """Layers whose parameters the optimizer holds (``in_optimizer`` = 1 at the first step), None when unknown."""
    if not ctx.view.has("in_optimizer"):
        return None
    g = ctx.view.by_entity("in_optimizer")
    return {str(n) for n, v in zip(g.labels, g.values[:, 0], strict=True) if n and v > 0.5}


def stale_gradients(ctx: Context, data: object, out: Emit) -> None:
    """The gradients of the optimizer's parameters still hold the previous step's values at the next backward:
    ``zero_grad`` is not called (every step, or only every k-th). A correct loop — zeroing every step, gradient
    accumulation over micro-batches with one step and one zeroing per window, two backward passes before one step
    — never shows it, so any sustained share is the fault. Layers the optimizer does not hold keep their gradients
    under a correct ``optimizer.zero_grad()``; they are ParametersNotOptimized's business."""
    th = ctx.th
    grid = ctx.view.by_entity("grad_stale_frac")
    need_steps(ctx, grid.steps, "grad_stale_frac")
    keep = _optimized_layers(ctx)
    layers = [i for i, n in enumerate(grid.labels) if n and (keep is None or str(n) in keep)]
    if not layers:
        raise NotJudged("no layer the optimizer holds has grad_stale_frac")
    v = grid.values[layers][:, 1:]  # the first step has no previous step
    frac = np.nanmean(v, axis=0)
    stale = np.nan_to_num(frac) >= th["gradient.stale.param_frac"]
    share = float(stale.mean()) if stale.size else 0.0
    if share < th["gradient.stale.step_frac"]:
        return
    start = int(np.argmax(stale)) + 1
    names = [str(grid.labels[i]) for i in layers]
    out.add(make_finding(
        "StaleGradients", "gradient", "", grid.steps, start, grid.steps.size - 1,
        severity(share, th["gradient.stale.step_frac"], 1.0),
        {"stale_step_share": share, "stale_param_frac": float(np.nanmedian(frac)), "layers": len(names)},
        "gradient.stale", start), (grid.steps[1:], frac))


def not_optimized(ctx: Context, data: object, out: Emit) -> None:
    """Layers that require a gradient and receive one, but that no optimizer updates: left out of the optimizer's
    parameter groups by mistake. A layer another optimizer updates (a GAN's two optimizers) has a non-zero
    ``update_norm`` and does not count; parameters with ``requires_grad=False`` are frozen on purpose and are not
    watched at all."""
    th = ctx.th
    g = ctx.view.by_entity("in_optimizer")
    outside = [str(n) for n, v in zip(g.labels, g.values[:, 0], strict=True) if n and v < 0.5]
    inside = [str(n) for n, v in zip(g.labels, g.values[:, 0], strict=True) if n and v >= 0.5]
    if not outside:
        return
    norms = ctx.view.by_entity("grad_norm") if ctx.view.has("grad_norm") else None
    moved = ctx.view.by_entity("update_norm") if ctx.view.has("update_norm") else None
    eps = th["gradient.zero_update.eps"]
    idle = []
    for name in outside:
        has_grad = norms is None or (name in norms.labels and np.nanmax(np.nan_to_num(norms.row(name))) > 0)
        updated = moved is not None and name in moved.labels and np.nanmax(np.nan_to_num(moved.row(name))) > eps
        if has_grad and not updated:
            idle.append(name)
    if not idle:
        return
    ordered = layer_order(ctx.view, idle)
    steps = norms.steps if norms is not None else g.steps
    share = len(idle) / max(len(outside) + len(inside), 1)
    out.add(make_finding(
        "ParametersNotOptimized", "gradient", ordered[0], steps, 0, steps.size - 1,
        float(np.clip(0.5 + share, 0.5, 1.0)),
        {"layers_not_optimized": len(idle), "layers_total": len(outside) + len(inside),
         "first_layer": ordered[0], "updated_elsewhere": False},
        "gradient.not_optimized", 0), (steps, np.ones(steps.size)))


def _frozen_share(ctx: Context) -> tuple[dict, int, int]:
    """run.json's parameter account, the frozen tensors, and all tensors."""
    params = (ctx.meta.get("probe") or {}).get("params") or {}
    if not params:
        raise NotJudged("the probe's parameter list (run.json probe.params) not recorded")
    frozen, watched = int(params.get("frozen") or 0), int(params.get("watched") or 0)
    return params, frozen, frozen + watched


def _module_of(names: list[str]) -> str:
    """The module of the first parameter named ("body.0.weight" → "body.0"), "" where none is."""
    return (names[0].rpartition(".")[0] or names[0]) if names else ""


def _whole_run(ctx: Context, out: Emit, symptom: str, entity: str, severity: float, evidence: dict,
               detector: str) -> None:
    """A finding about the set-up: it holds on every recorded step."""
    grid = ctx.view.by_entity("grad_norm")
    need_steps(ctx, grid.steps, "grad_norm")
    out.add(make_finding(symptom, "gradient", entity, grid.steps, 0, grid.steps.size - 1, severity, evidence,
                         detector, 0), (grid.steps, np.ones(grid.steps.size)))


def frozen_by_flag(ctx: Context, data: object, out: Emit) -> None:
    """Most of the model's parameter tensors have ``requires_grad=False`` (the probe lists them in run.json): only
    a small part trains. A frozen backbone under a trained head is a fine-tuning recipe and stays below the share;
    the finding says what is frozen, and the cause needs harm to the outcome as well to be named
    (engine.infer.specific: it is not sufficient alone)."""
    params, frozen, total = _frozen_share(ctx)
    if frozen == 0:
        return
    share = frozen / max(total, 1)
    if share < ctx.th["gradient.frozen.param_share"]:
        out.note(f"{frozen} of {total} parameter tensors frozen (requires_grad=False): "
                 f"{share:.0%}, below the share that is named")
        return
    first = _module_of([str(n) for n in params.get("frozen_names") or []])
    _whole_run(ctx, out, "MostParametersFrozen", first, float(np.clip(share, 0.5, 1.0)),
               {"frozen_tensors": frozen, "tensors_total": total, "frozen_share": share, "first_frozen": first},
               "gradient.frozen")


def frozen_untrained(ctx: Context, data: object, out: Emit) -> None:
    """Most of the model is frozen and the frozen weights are still as their constructors drew them (uniform on a
    symmetric interval, or normal at a constructor's std: engine.capture.frozen_init): a readout over random
    features, where a frozen body should be a pretrained one. Half or more of the frozen tensors the probe could
    test must read so; a body frozen after training is not claimed."""
    params, frozen, total = _frozen_share(ctx)
    if frozen == 0 or frozen / max(total, 1) < ctx.th["gradient.frozen.param_share"]:
        return  # nothing frozen, or a small part (an adapter recipe): nothing a frozen body says
    if "frozen_judged" not in params:
        raise NotJudged("the probe did not test the frozen weights' initialisation (run.json probe.params)")
    judged, hits = int(params["frozen_judged"]), int(params.get("frozen_as_constructed") or 0)
    if judged == 0:
        raise NotJudged("no frozen tensor large enough and not constant to tell its initialisation")
    if hits * 2 < judged:
        out.note(f"{hits} of {judged} frozen tensors read as constructed: the frozen part was trained")
        return
    first = _module_of([str(n) for n in params.get("frozen_as_constructed_names") or []])
    _whole_run(ctx, out, "FrozenAtInitialisation", first, float(np.clip(hits / judged, 0.5, 1.0)),
               {"as_constructed": hits, "judged": judged, "frozen_tensors": frozen, "first_as_constructed": first},
               "gradient.frozen_untrained")


def router_init(ctx: Context, data: object, out: Emit) -> None:
    """At initialisation the router already prefers some experts: the bias (or mean logit) of the favoured
    expert exceeds the median expert's by ``moe.router_init.spread`` nats. Routers start unbiased (Switch,
    GShard and Megatron initialise gate biases at zero or have none), and a preference of s nats gives the
    favoured expert e^s times the median expert's probability, so routing is skewed before any training."""
    th = ctx.th
    limit = th["moe.router_init.spread"]
    best: tuple[float, str, str, np.ndarray, np.ndarray] | None = None
    for metric in ("router_bias_spread", "router_logit_spread"):
        if not ctx.view.has(metric):
            continue
        g: Grid = ctx.view.by_entity(metric)
        for i, name in enumerate(g.labels):
            v = g.values[i]
            ok = np.flatnonzero(np.isfinite(v))
            if ok.size and (best is None or v[ok[0]] > best[0]):
                best = (float(v[ok[0]]), str(name), metric, g.steps, v)
    if best is None:
        raise NotJudged("router_bias_spread and router_logit_spread have no finite sample")
    spread, name, metric, steps, v = best
    if spread < limit:
        return
    out.add(make_finding(
        "RouterBiasedAtInit", "convergence", name or "router", steps, 0, steps.size - 1,
        severity(spread, limit, limit * 8), {"spread_nats": spread, "metric": metric,
                                            "preference_factor": float(np.exp(min(spread, 50.0)))},
        "moe.router_init", 0), (steps, ffill(v)))
