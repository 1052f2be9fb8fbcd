"""Plotly figures (plain dicts for plotly.js) of the telemetry with the findings drawn over them.

Every builder returns ``(figures, note)``: the figures to draw, and a sentence saying what is absent or
left out (escaped HTML). Large data are downsampled to a fixed budget (``downsample``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from debugtune.engine.report.data import ReportData
from debugtune.engine.report.downsample import Grid, downsample_grid, minmax_line
from debugtune.engine.report.escape import h, ptext
from debugtune.engine.report.marks import PALETTE, bands, boxes, natural_key, row_labels
from debugtune.engine.report.series import HARDWARE_ORDER, TIME_METRICS, RunSeries
from debugtune.kg.records import Finding, location_kind

MAX_COLS = 400
MAX_ROWS = 160
MAX_POINTS = 2000
MAX_LINES = 12
MAX_OBJECTIVES = 4
FONT = {"family": "system-ui, -apple-system, 'Segoe UI', sans-serif", "size": 12}


@dataclass
class Figure:
    """One plot: plotly.js ``data`` and ``layout``, and an HTML caption under it."""

    data: list[dict[str, Any]]
    layout: dict[str, Any]
    caption: str = ""
    config: dict[str, Any] = field(default_factory=dict)


Built = tuple[list[Figure], str]


def layout(title: str, *, height: int = 380, **extra: Any) -> dict[str, Any]:
    base = {"title": {"text": ptext(title), "font": {"size": 14}}, "height": height, "font": FONT,
            "margin": {"l": 70, "r": 30, "t": 48, "b": 48}, "hovermode": "closest",
            "xaxis": {"title": {"text": "step"}, "zeroline": False},
            "paper_bgcolor": "white", "plot_bgcolor": "#fafafa"}
    base.update(extra)
    return base


def _line(x: np.ndarray, y: np.ndarray, name: str, **extra: Any) -> dict[str, Any]:
    xs, ys = minmax_line(x, y, MAX_POINTS)
    mode = "lines+markers" if len(xs) < 40 else "lines"
    return {"type": "scatter", "mode": mode, "x": xs, "y": ys, "name": ptext(name), **extra}


def _of(findings: Sequence[Finding], *dimensions: str) -> list[Finding]:
    return [f for f in findings if f.dimension in dimensions]


# --- loss and learning rate --------------------------------------------------------------------------------

def loss_figure(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    have = {m for m in ("loss", "eval_loss", "lr") if tel.has(m)}
    if not {"loss", "eval_loss"} & have:
        return [], "No loss in the telemetry of this run (metric <code>loss</code>)."
    traces = []
    for metric, name in (("loss", "loss"), ("eval_loss", "eval loss")):
        if metric in have:
            x, y = tel.curve(metric)
            traces.append(_line(x, y, name, line={"width": 1.5}))
    extra: dict[str, Any] = {}
    if "lr" in have:
        x, y = tel.curve("lr")
        traces.append(_line(x, y, "learning rate", yaxis="y2", line={"width": 1, "dash": "dot", "color": "#555"}))
        extra["yaxis2"] = {"title": {"text": "learning rate"}, "overlaying": "y", "side": "right",
                           "showgrid": False, "tickformat": ".2~e", "rangemode": "tozero", "automargin": True}
        extra["legend"] = {"x": 1.1, "xanchor": "left", "y": 1}
    experts = tel.entities("expert_tokens")
    conv = [f for f in _of(d.findings, "convergence") if not _on_expert_map(f, experts)]
    shapes, notes = bands(conv, d.label)
    fig = Figure(traces, layout("Loss and learning rate, convergence findings shaded", height=420,
                                yaxis={"title": {"text": "loss"}}, shapes=shapes, annotations=notes, **extra))
    moe = len(_of(d.findings, "convergence")) - len(conv)
    shaded = f"{len(conv)} convergence finding(s) shaded." if conv else "No convergence finding of the loss."
    if moe:
        shaded += f" {moe} routing finding(s) are boxed on the expert map below."
    fig.caption = (f"{shaded}{_periods(conv)} Lines keep each bucket's minimum and maximum when the run has more "
                   "steps than fit.")
    return [fig], ""


def _periods(findings: Sequence[Finding]) -> str:
    """A sentence per oscillation finding with the period the detector measured."""
    out = ""
    for f in findings:
        period, amp = f.evidence.get("period_steps"), f.evidence.get("amplitude")
        if f.symptom == "LossOscillation" and isinstance(period, int | float):
            size = f" and an amplitude of {amp:.3g}" if isinstance(amp, int | float) else ""
            out += f" The loss oscillates with a period of {period:.0f} steps{size} from step {f.onset_step}."
    return out


# --- heat maps ------------------------------------------------------------------------------------------------

def _heatmap(grid: Grid, steps: np.ndarray, labels: list[str], colour: dict[str, Any], hover: str) -> dict[str, Any]:
    cols = [grid.col_span(j) for j in range(grid.z.shape[1])]
    x = np.array([(steps[a] + steps[b]) / 2 for a, b in cols], dtype=np.float64) if len(steps) else np.array([])
    return {"type": "heatmap", "z": grid.z, "x": x, "y": labels, "hoverongaps": False,
            "hovertemplate": f"step %{{x}}<br>%{{y}}<br>{hover} %{{z}}<extra></extra>", **colour}


def _heat_figure(title: str, grid: Grid, steps: np.ndarray, labels: list[str], colour: dict[str, Any], hover: str,
                 findings: Sequence[Finding], rows: Callable[[Finding], Sequence[int] | None],
                 d: ReportData) -> tuple[Figure, list[Finding]]:
    if grid.z.shape[1] == 1:  # one step (a one-step profile): a bar per row, not a one-column heat map
        return _bar_figure(title, grid, steps, labels, hover, findings, rows, d)
    shapes, notes, off = boxes(findings, rows, grid, d.label)
    n = grid.z.shape[0]
    label_px = 18 * len(notes)  # the findings' labels stack in the top margin, one line each
    height = min(900, max(300, 120 + 14 * n)) + label_px
    domain_px = height - (48 + label_px) - 48
    for i, note in enumerate(notes):
        note["y"] = 1 + (4 + 18 * i) / domain_px
    fig = Figure([_heatmap(grid, steps, labels, colour, hover)],
                 layout(title, height=height, shapes=shapes, annotations=notes,
                        margin={"l": 70, "r": 30, "t": 48 + label_px, "b": 48},
                        yaxis={"type": "category", "automargin": True, "autorange": "reversed"}))
    fig.layout["title"].update({"y": 1 - 10 / height, "yanchor": "top"})  # above the labels' band
    return fig, off


def _bar_figure(title: str, grid: Grid, steps: np.ndarray, labels: list[str], hover: str,
                findings: Sequence[Finding], rows: Callable[[Finding], Sequence[int] | None],
                d: ReportData) -> tuple[Figure, list[Finding]]:
    """The heat map of a single step as horizontal bars; the rows a finding points to are coloured."""
    values = grid.z[:, 0]
    colours = ["#1f5fa8"] * len(values)
    on, off = [], []
    for f in findings:
        hit = rows(f)
        if hit is not None and not len(hit):
            off.append(f)
            continue
        on.append(f)
        for r in range(len(values)) if hit is None else {grid.row_of(i) for i in hit}:
            colours[r] = "#d62728"
    step = int(steps[0]) if len(steps) else 0
    unit = hover.split()[-1] if hover else ""
    trace = {"type": "bar", "orientation": "h", "x": values, "y": labels, "marker": {"color": colours},
             "hovertemplate": f"%{{y}}<br>{hover} %{{x}}<extra></extra>"}
    name = title.split(",")[0]
    fig = Figure([trace], layout(f"{name} at step {step}", height=min(900, max(260, 100 + 22 * len(values))),
                                 xaxis={"title": {"text": ptext(unit)}, "zeroline": True},
                                 yaxis={"type": "category", "automargin": True, "autorange": "reversed"}))
    marked = "; ".join(h(f"{d.label(f.symptom)} @ {f.entity or 'run'}") for f in on)
    fig.caption = ("Only one step was recorded, so a bar per row instead of a heat map over steps."
                   + (f" Red: the rows of {marked}." if marked else ""))
    return fig, off


def _reduced(values: np.ndarray) -> Grid:
    """values[step, key] → a downsampled grid with one row per key."""
    return downsample_grid(values.T, MAX_ROWS, MAX_COLS)


def _budget_note(grid: Grid, values: np.ndarray, row_noun: str) -> str:
    """``values[step, row]`` drawn as ``grid`` (rows × steps): a note when it was downsampled."""
    rows, cols = values.shape[1], values.shape[0]
    if grid.z.shape == (rows, cols):
        return ""
    return (f" Downsampled from {rows} {row_noun} × {cols} steps to {grid.z.shape[0]} × {grid.z.shape[1]} cells; "
            "each cell shows its bucket's minimum or maximum, whichever is farther from the typical value.")


def _off_note(off: list[Finding], d: ReportData) -> str:
    if not off:
        return ""
    return " Not on this map: " + ", ".join(h(f"{d.label(f.symptom)} @ {f.entity or 'run'}") for f in off) + "."


def _entity_rows(names: list[str]) -> Callable[[Finding], Sequence[int] | None]:
    """Rows of a finding: '' → all; an exact entity; or every row under it (a router or a module path)."""
    def rows(f: Finding) -> Sequence[int] | None:
        if not f.entity:
            return None
        return [i for i, n in enumerate(names)
                if n == f.entity or n.startswith(f.entity + "/") or n.startswith(f.entity + ".")]
    return rows


def gradient_figure(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    if not tel.has("grad_norm"):
        return [], "No per-layer gradient norms in the telemetry (metric <code>grad_norm</code>)."
    steps, keys, values = tel.by_entity("grad_norm")
    layers = sorted((k for k in keys if k), key=natural_key)
    if not layers:
        return _global_grad_figure(d, steps, values[:, keys.index("")])
    cols = [keys.index(k) for k in layers]
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log10(values[:, cols])
    grid = _reduced(logs)
    fig, off = _heat_figure(
        "Gradient norm per layer (log10), gradient findings boxed", grid, steps, row_labels(layers, grid),
        {"colorscale": "Viridis", "colorbar": {"title": {"text": "log10 ‖g‖"}}}, "log10 ‖g‖",
        _of(d.findings, "gradient"), _entity_rows(layers), d)
    fig.caption = fig.caption or ("Blank cells: no value or a gradient of exactly zero."
                                  + _budget_note(grid, logs, "layers") + _off_note(off, d))
    return [fig], ""


def _global_grad_figure(d: ReportData, steps: np.ndarray, norm: np.ndarray) -> Built:
    """The global gradient norm as a line (a log or a logger records no per-layer norms), findings shaded."""
    finite = np.isfinite(norm)
    trace = _line(steps[finite], norm[finite], "gradient norm", line={"width": 1.5})
    grad = _of(d.findings, "gradient")
    shapes, notes = bands(grad, d.label)
    fig = Figure([trace], layout("Global gradient norm, gradient findings shaded", height=340, shapes=shapes,
                                 annotations=notes, yaxis={"title": {"text": "‖g‖"}, "type": "log"}))
    bad = int((~finite).sum())
    fig.caption = ("Only the global gradient norm was recorded (no per-layer norms)."
                   + (f" {bad} step(s) with a non-finite norm are left out of the line." if bad else ""))
    return [fig], ""


def _moe_settings(meta: dict[str, Any]) -> str:
    found = meta.get("moe")
    moe: dict[str, Any] = found if isinstance(found, dict) else {}
    parts = [f"{moe['num_experts']} experts" if moe.get("num_experts") else "",
             f"top-{moe['top_k']}" if moe.get("top_k") else "",
             f"balancing {moe['load_balancing']}" if moe.get("load_balancing") else "",
             f"coefficient {moe['aux_loss_coeff']:g}" if isinstance(moe.get("aux_loss_coeff"), int | float) else "",
             f"z-loss coefficient {moe['z_loss_coeff']:g}" if isinstance(moe.get("z_loss_coeff"), int | float) else ""]
    return ", ".join(p for p in parts if p)


def _balance_figure(d: ReportData, tel: RunSeries) -> Built:
    """An MoE run known from its arguments or its balancing loss, without tokens per expert (a text log)."""
    curves = [(m, n) for m, n in (("aux_loss", "load-balancing loss"), ("z_loss", "router z-loss")) if tel.has(m)]
    settings = _moe_settings(d.meta)
    if not curves and not settings:
        return [], "No tokens per expert in the telemetry (metric <code>expert_tokens</code>): not an MoE run."
    lacking = ("This is an MoE run" + (f" ({h(settings)})" if settings else "") + ", but its telemetry holds no "
               "tokens per expert (<code>expert_tokens</code>; a training log prints only the balancing losses), so "
               "the routing symptoms that need them are not judged: attach the probe with "
               "<code>watch_router</code> to record them.")
    if not curves:
        return [], lacking
    traces = []
    for i, (metric, name) in enumerate(curves):
        x, y = tel.curve(metric)
        traces.append(_line(x, y, name, line={"width": 1.5}, **({"yaxis": "y2"} if i else {})))
    extra: dict[str, Any] = {}
    if len(curves) > 1:
        extra["yaxis2"] = {"title": {"text": ptext(curves[1][1])}, "overlaying": "y", "side": "right",
                           "showgrid": False, "automargin": True}
        extra["legend"] = {"x": 1.1, "xanchor": "left", "y": 1}
    shapes, notes = bands(_of(d.findings, "convergence"), d.label)
    fig = Figure(traces, layout("MoE balancing losses, convergence findings shaded", height=340, shapes=shapes,
                                annotations=notes, yaxis={"title": {"text": ptext(curves[0][1])}}, **extra))
    fig.caption = lacking + (" Megatron logs the load-balancing loss divided by its coefficient: 1.0 is a "
                             "perfectly balanced router." if d.meta.get("framework") == "megatron" else "")
    return [fig], ""


def _on_expert_map(f: Finding, experts: Sequence[str]) -> bool:
    """Whether the expert heat map shows ``f`` (an expert, or a router whose experts are recorded)."""
    return location_kind(f.entity) == "expert" or bool(f.entity and any(e.startswith(f.entity + "/")
                                                                         for e in experts))


def _router(entity: str) -> str:
    return entity.rsplit("/", 1)[0] if "/" in entity else ""


def expert_figure(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    if not tel.has("expert_tokens"):
        return _balance_figure(d, tel)
    steps, keys, values = tel.by_entity("expert_tokens")
    experts = sorted(keys, key=natural_key)
    tokens = values[:, [keys.index(k) for k in experts]]
    share = np.full_like(tokens, np.nan)
    for router in sorted({_router(e) for e in experts}):
        cols = [i for i, e in enumerate(experts) if _router(e) == router]
        with np.errstate(invalid="ignore", divide="ignore"):
            total = np.nansum(tokens[:, cols], axis=1, keepdims=True)
            share[:, cols] = np.where(total > 0, tokens[:, cols] / total, np.nan)
    grid = _reduced(share)
    symptoms_here = [f for f in d.findings if _on_expert_map(f, experts)]
    fig, off = _heat_figure("Token share per expert, routing findings boxed", grid, steps, row_labels(experts, grid),
                            {"colorscale": "Viridis", "zmin": 0, "colorbar": {"title": {"text": "share"}}},
                            "share", symptoms_here, _entity_rows(experts), d)
    fair = ", ".join(f"1/{sum(_router(e) == r for e in experts)}" for r in sorted({_router(e) for e in experts}))
    fig.caption = fig.caption or (f"Share of each router's tokens per step; a balanced router gives every expert "
                                  f"{h(fair)}." + _budget_note(grid, share, "experts") + _off_note(off, d))
    return [fig], ""


def _rank_rows(ranks: list[int]) -> Callable[[Finding], Sequence[int] | None]:
    pos = {r: i for i, r in enumerate(ranks)}

    def rows(f: Finding) -> Sequence[int] | None:
        if not f.entity:
            return None
        tail = f.entity.rsplit("/", 1)[-1]
        kind, _, rest = tail.partition(":")
        wanted = [rest] if kind == "rank" else rest.split("-") if kind == "link" else []
        return [pos[int(w)] for w in wanted if w.strip().isdigit() and int(w) in pos]
    return rows


def rank_figures(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    present = [m for m in TIME_METRICS if tel.has(m)]
    if not present:
        return [], ("No per-rank step or communication time in the telemetry "
                    "(<code>step_time_ms</code>, <code>comm_ms</code>).")
    figs = []
    comm = _of(d.findings, "communication")
    colour = {"colorscale": "YlOrRd", "reversescale": True, "colorbar": {"title": {"text": "ms"}}}
    for metric in present:
        steps, ranks, values = tel.by_rank(metric)
        if not len(ranks):
            continue
        grid = _reduced(values)
        what = "Step time" if metric == "step_time_ms" else "Communication time"
        fig, off = _heat_figure(f"{what} per rank (ms), communication findings boxed", grid, steps,
                                row_labels([str(r) for r in ranks], grid, noun="rank "),
                                colour, "ms", comm, _rank_rows(ranks), d)
        fig.caption = fig.caption or (f"{len(ranks)} rank(s); a straggler shows as a hot row."
                                      + _budget_note(grid, values, "ranks") + _off_note(off, d))
        figs.append(fig)
    if not figs:
        return [], "Per-rank time metrics carry only entity-specific rows, nothing per rank."
    return figs, ""


# --- hardware ---------------------------------------------------------------------------------------------------

def hardware_figures(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    metrics = [m for m in HARDWARE_ORDER if tel.has(m)]
    if not metrics:
        return [], "No hardware series in the telemetry (utilisation, memory, temperature, power)."
    hw = _of(d.findings, "hardware")
    figs, thin = [], []
    least = d.min_hardware_samples
    for metric in metrics:
        steps, keys, values = tel.keyed(metric)
        if not len(keys):
            continue
        counts = np.isfinite(values).sum(axis=0)
        enough = counts >= least
        if not enough.any():  # as the detectors do: too few samples to judge are too few to draw
            thin.append(f"{metric} ({int(counts.max())})")
            continue
        keys, values = [k for k, ok in zip(keys, enough, strict=True) if ok], values[:, enough]
        if len(keys) <= MAX_LINES:
            traces = [_line(steps, values[:, i], k) for i, k in enumerate(keys)]
        else:
            with np.errstate(all="ignore"):
                stats = [("max", np.nanmax(values, axis=1)), ("median", np.nanmedian(values, axis=1)),
                         ("min", np.nanmin(values, axis=1))]
            traces = [_line(steps, v, f"{name} of {len(keys)} series") for name, v in stats]
        shapes, notes = bands(hw, d.label)
        figs.append(Figure(traces, layout(f"{metric}", height=300, shapes=shapes, annotations=notes,
                                          yaxis={"title": {"text": ptext(metric)}})))
    note = (f"Not drawn, too few samples per device (at least {least}, the knowledge base's "
            f"<code>hardware.min_samples</code>): {h(', '.join(thin))}." if thin else "")
    if figs and note:
        figs[-1].caption = (figs[-1].caption + " " + note).strip()
    return figs, note


# --- tuning -----------------------------------------------------------------------------------------------------

def session_of(experiment_id: str) -> str:
    """The tuning session of an experiment id ``<session>-<n>`` (the id itself when it has no such suffix)."""
    head, _, tail = experiment_id.rpartition("-")
    return head if head and tail.isdigit() else experiment_id


def tuning_figures(d: ReportData) -> Built:
    """Per remedy and objective: each session's values in the order they ran with its best so far; per remedy
    with two objectives or more, the Pareto front of the first two. Remedies and sessions are never mixed on
    one axis (their parameters and baselines differ)."""
    if not d.experiments:
        return [], "No tuning experiments recorded for this run (<code>cann-tune auto</code> records them)."
    ok = [e for e in d.experiments if e.status == "ok" and e.objectives]
    if not ok:
        return [], "No experiment finished with objective values."
    figs = []
    for remedy in dict.fromkeys(e.remedy for e in d.experiments):
        mine = [e for e in ok if e.remedy == remedy]
        sessions = list(dict.fromkeys(session_of(e.id) for e in d.experiments if e.remedy == remedy))
        objectives = sorted({k for e in mine for k in e.objectives})
        for name in objectives[:MAX_OBJECTIVES]:
            figs.append(_objective_figure(d, remedy, name, sessions))
        if len(objectives) >= 2:
            figs.append(_pareto(d, mine, objectives[0], objectives[1], remedy))
    return figs, ""


def _objective_figure(d: ReportData, remedy: str, name: str, sessions: list[str]) -> Figure:
    traces, longest = [], 0
    for k, session in enumerate(sessions):
        runs = [e for e in d.experiments if e.remedy == remedy and session_of(e.id) == session]
        pts = [(i + 1, e.objectives[name]) for i, e in enumerate(runs)
               if e.status == "ok" and name in e.objectives]
        if not pts:
            continue
        longest = max(longest, len(runs))
        xs, ys = np.array([p[0] for p in pts]), np.array([p[1] for p in pts], dtype=np.float64)
        best = np.maximum.accumulate(ys) if name in d.maximize else np.minimum.accumulate(ys)
        c = PALETTE[k % len(PALETTE)]
        who = f"session {session}" if len(sessions) > 1 else name
        traces.append({"type": "scatter", "mode": "markers+lines", "x": xs, "y": ys, "name": ptext(who),
                       "line": {"color": c}, "marker": {"color": c}})
        traces.append({"type": "scatter", "mode": "lines", "x": xs, "y": best, "name": ptext(f"best so far ({who})"),
                       "line": {"dash": "dash", "shape": "hv", "color": c}})
    axis: dict[str, Any] = {"title": {"text": "experiment in its session"}, "range": [0.5, longest + 0.5]}
    if longest <= 30:
        axis["dtick"] = 1
    goal = "maximised" if name in d.maximize else "minimised"
    fig = Figure(traces, layout(f"{d.label(remedy)}: {name} per experiment", height=340, xaxis=axis,
                                yaxis={"title": {"text": ptext(name)}}))
    fig.caption = (f"{h(name)} ({goal}) of the experiments tuning {h(d.label(remedy))}, in the order each of "
                   f"{len(sessions)} session(s) ran them; dashed: the best so far. Failed experiments have no point.")
    return fig


def _pareto(d: ReportData, ok: list[Any], a: str, b: str, remedy: str) -> Figure:
    from debugtune.engine.tune.pareto import pareto_mask

    both = [e for e in ok if a in e.objectives and b in e.objectives]
    F = np.array([[e.objectives[a], e.objectives[b]] for e in both], dtype=np.float64).reshape(-1, 2)
    sign = np.array([-1.0 if n in d.maximize else 1.0 for n in (a, b)])
    front = pareto_mask(F * sign) if len(F) else np.zeros(0, dtype=bool)
    order = np.argsort(F[front, 0] * sign[0]) if front.any() else np.array([], dtype=np.int64)
    names = [ptext(e.id) for e in both]
    traces = [{"type": "scatter", "mode": "markers", "x": F[:, 0], "y": F[:, 1], "text": names,
               "marker": {"color": "#999", "size": 8}, "name": "experiments",
               "hovertemplate": "%{text}<br>%{x}, %{y}<extra></extra>"},
              {"type": "scatter", "mode": "markers+lines", "x": F[front, 0][order], "y": F[front, 1][order],
               "line": {"shape": "hv", "color": "#d62728"}, "marker": {"size": 11, "color": "#d62728"},
               "name": "Pareto front"}]
    directions = ", ".join(f"{n} ({'max' if n in d.maximize else 'min'})" for n in (a, b))
    fig = Figure(traces, layout(f"{d.label(remedy)}: Pareto front of {a} vs {b}", height=380,
                                xaxis={"title": {"text": ptext(a)}},
                                yaxis={"title": {"text": ptext(b)}}))
    fig.caption = f"{int(front.sum())} of {len(both)} experiment(s) on the front; directions: {h(directions)}."
    return fig
