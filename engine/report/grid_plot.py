"""The rank × stage heat map: each worker's median compute time placed on the parallel grid (data-parallel
replica × pipeline stage), so a slow stage shows as a hot column, a straggler as one hot cell and uneven data
as no pattern at all; the caption gives the what-if shares of the slowdown the straggler detectors measured
(``engine/diagnose/parallel_grid.py``)."""

from __future__ import annotations

import numpy as np

from debugtune.engine.diagnose.frame import Grid
from debugtune.engine.diagnose.groups import layout as stage_layout
from debugtune.engine.diagnose.parallel_grid import worker_grid
from debugtune.engine.report.data import ReportData
from debugtune.engine.report.escape import h
from debugtune.engine.report.plots import MAX_ROWS, Built, Figure, layout

_SHARES = (("worker_share", "fixing the slowest workers"), ("stage_share", "fixing one stage"),
           ("replica_share", "balancing the replicas"))
_GRID_SYMPTOMS = ("SlowPipelineStage", "SlowRank", "SlowCompute", "ReplicaComputeVariation")


def grid_figure(d: ReportData) -> Built:
    tel = d.telemetry
    if tel is None:
        return [], h(d.telemetry_note)
    steps, ranks, values = tel.by_rank("compute_ms")
    if len(ranks) < 2:
        return [], "No per-rank compute time (<code>compute_ms</code>) for two or more ranks: no grid to draw."
    keep = np.isfinite(values).all(axis=1)
    if not keep.any():
        return [], "No step with compute time on every rank."
    lay = stage_layout(d.meta, ranks)
    g = worker_grid(Grid("compute_ms", tuple(ranks), np.asarray(steps)[keep], values[keep].T), lay, d.meta)
    reps, stages, z = g.heat()
    who = [[", ".join(str(int(r)) for r in g.ranks[(g.replica == rp) & (g.stage == st)]) for st in stages]
           for rp in reps]
    names = [f"replica {r}" for r in reps]
    note = ""
    if len(reps) > MAX_ROWS:  # the page's budget: consecutive replicas averaged into buckets
        cuts = np.array_split(np.arange(len(reps)), MAX_ROWS)
        with np.errstate(all="ignore"):
            z = np.array([np.nanmean(z[c], axis=0) for c in cuts])
        who = [[f"{who[c[0]][j]} … {who[c[-1]][j]}" for j in range(len(stages))] for c in cuts]
        names = [f"replicas {reps[c[0]]}–{reps[c[-1]]}" for c in cuts]
        note = f" {len(reps)} replicas averaged into {MAX_ROWS} rows."
    cells = [[float(v) if np.isfinite(v) else None for v in row] for row in z]
    trace = {"type": "heatmap", "z": cells,
             "x": [f"stage {s}" for s in stages], "y": names, "text": who,
             "colorscale": "YlOrRd", "colorbar": {"title": {"text": "ms"}},
             "hovertemplate": "%{y}, %{x}<br>rank %{text}<br>median compute %{z:.1f} ms<extra></extra>"}
    height = min(900, max(260, 120 + 22 * len(names)))
    fig = Figure([trace], layout("Median compute per worker (ms): replica × pipeline stage", height=height,
                                 xaxis={"type": "category", "title": {"text": "pipeline stage"}},
                                 yaxis={"type": "category", "autorange": "reversed",
                                        "title": {"text": "data-parallel replica"}}))
    fig.caption = _caption(d, len(reps), len(stages), lay.source) + note
    return [fig], ""


def _caption(d: ReportData, replicas: int, stages: int, source: str) -> str:
    where = f"{replicas} replica(s) × {stages} stage(s)" + (f", stages from {h(source)}" if source else
                                                             ", no pipeline stages known")
    found = next((f for f in sorted(d.findings, key=lambda f: -f.severity) if f.symptom in _GRID_SYMPTOMS
                  and "slowdown" in f.evidence), None)
    if found is None:
        return f"{where}. A slow stage is a hot column, a straggler one hot cell, uneven data no fixed pattern."
    ev = found.evidence
    parts = [f"{what} {100 * float(ev[key]):.0f}%" for key, what in _SHARES
             if isinstance(ev.get(key), int | float) and not isinstance(ev.get(key), bool)]
    return (f"{where}. Slowdown {float(ev['slowdown']):.2f}× against the median worker; the share of it taken "
            f"back by {', '.join(parts) or 'no fix (not measured)'} ({h(d.label(found.symptom))}).")
