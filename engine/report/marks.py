"""Findings drawn over figures: shaded step bands on line plots, boxes on heat-map rows, and row labels."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from debugtune.engine.report.downsample import Grid
from debugtune.engine.report.escape import ptext
from debugtune.kg.records import Finding

PALETTE = ("#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#2ca02c")
_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``layers.2`` before ``layers.10``."""
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(text)]


def colour_of(symptoms: Sequence[str]) -> Callable[[str], str]:
    """A stable colour per symptom, in order of first appearance."""
    table: dict[str, str] = {}
    for s in symptoms:
        table.setdefault(s, PALETTE[len(table) % len(PALETTE)])
    return lambda s: table.get(s, PALETTE[0])


#: a plotly layout shape or annotation
Shape = dict[str, Any]


def _caption(f: Finding, label: Callable[[str], str]) -> str:
    where = f" @ {f.entity}" if f.entity else ""
    period = f.evidence.get("period_steps")
    every = f", period {period:.0f} steps" if isinstance(period, int | float) else ""
    return ptext(f"{label(f.symptom)}{where} (steps {f.onset_step}–{f.end_step}{every}, severity {f.severity:.2f})")


def bands(findings: Sequence[Finding], label: Callable[[str], str]) -> tuple[list[Shape], list[Shape]]:
    """Shapes shading each finding's steps over the whole plot height, and a caption for each."""
    colour = colour_of([f.symptom for f in findings])
    shapes, notes = [], []
    for i, f in enumerate(findings):
        c = colour(f.symptom)
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": f.onset_step - 0.5,
                       "x1": f.end_step + 0.5, "y0": 0, "y1": 1, "fillcolor": c, "opacity": 0.1,
                       "line": {"width": 0}, "layer": "below"})
        notes.append({"x": f.onset_step, "xref": "x", "xanchor": "left", "yref": "paper",
                      "y": 1 - 0.07 * (i % 8), "yanchor": "top", "showarrow": False, "text": _caption(f, label),
                      "font": {"size": 10, "color": c}, "bgcolor": "rgba(255,255,255,0.7)"})
    return shapes, notes


def boxes(findings: Sequence[Finding], rows: Callable[[Finding], Sequence[int] | None], grid: Grid,
          label: Callable[[str], str]) -> tuple[list[Shape], list[Shape], list[Finding]]:
    """Boxes around the heat-map rows (original indices from ``rows``) and steps of each finding.

    ``rows`` returns None for a finding that concerns every row (a band over the whole map) and an empty
    sequence for one that is not on this map; those are returned as the third element.
    """
    colour = colour_of([f.symptom for f in findings])
    shapes, notes, off = [], [], []
    n_rows = grid.z.shape[0]
    for f in findings:
        hit = rows(f)
        if hit is not None and not len(hit):
            off.append(f)
            continue
        cells = [0, n_rows - 1] if hit is None else sorted({grid.row_of(r) for r in hit})
        c = colour(f.symptom)
        for lo, hi in _runs(cells) if hit is not None else [(0, n_rows - 1)]:
            shapes.append({"type": "rect", "xref": "x", "yref": "y", "x0": f.onset_step - 0.5,
                           "x1": f.end_step + 0.5, "y0": lo - 0.5, "y1": hi + 0.5,
                           "line": {"color": c, "width": 2}, "fillcolor": "rgba(0,0,0,0)"})
        top = cells[0] if hit is not None else 0
        # the label sits above the map, in the top margin (the figure stacks the labels there, one line each),
        # and a dotted line climbs from the box's corner to it, so no label covers the rows it points to
        if top > 0:
            shapes.append({"type": "line", "xref": "x", "yref": "y", "x0": f.onset_step - 0.5,
                           "x1": f.onset_step - 0.5, "y0": top - 0.5, "y1": -0.5,
                           "line": {"color": c, "width": 1, "dash": "dot"}})
        notes.append({"x": f.onset_step - 0.5, "xref": "x", "y": 1.0, "yref": "paper", "xanchor": "left",
                      "yanchor": "bottom", "showarrow": False, "text": _caption(f, label),
                      "font": {"size": 10, "color": c}, "bgcolor": "rgba(255,255,255,0.8)"})
    return shapes, notes, off


def _runs(cells: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive runs of sorted cell indices as (first, last)."""
    out: list[tuple[int, int]] = []
    for c in cells:
        if out and c == out[-1][1] + 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


def _short(text: str, width: int = 44) -> str:
    return text if len(text) <= width else text[: width // 2 - 1] + "…" + text[-(width // 2 - 1):]


def row_labels(names: Sequence[str], grid: Grid, *, noun: str = "") -> list[str]:
    """One unique, escaped label per downsampled row: the name, or ``first … last (n)`` for a bucket."""
    out, seen = [], set()
    for i in range(grid.z.shape[0]):
        a, b = grid.row_span(i)
        if a == b:
            text = f"{noun}{names[a]}" if noun else _short(names[a] or "(global)")
        elif noun:
            text = f"{noun.strip()}s {names[a]}–{names[b]}"
        else:
            text = f"{_short(names[a], 20)} … {_short(names[b], 20)} ({b - a + 1})"
        base, k = text, 2
        while text in seen:
            text, k = f"{base} #{k}", k + 1
        seen.add(text)
        out.append(ptext(text))
    return out
