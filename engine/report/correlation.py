"""The correlation graph of a diagnosis as an inline SVG: the findings whose series moved together, joined by
an arrow from the leading one to the one that followed (label: coefficient and lag in steps).

Nodes sit on a circle (one per finding with an edge); edge width grows with |r|, a negative correlation is
dashed. The diagnosis computes the graph (engine/diagnose/correlation.py) and stores it in the run's graph
as ``dt:CorrelationEdge``; the report only draws it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from debugtune.engine.report.escape import h
from debugtune.kg.records import CorrelationEdge, Finding

NODE_W = 190
NODE_H = 44
CHAR_W = 6.4


def _clip(text: str, width: float) -> str:
    n = int((width - 16) / CHAR_W)
    return text if len(text) <= n else text[: max(n - 1, 1)] + "…"


def correlation_svg(findings: Sequence[Finding], edges: Sequence[CorrelationEdge], label: Callable[[str], str],
                    key: str = "corr") -> str:
    """An ``<svg class="correlation">`` of the edges between ``findings`` (edges to unknown findings dropped)."""
    by_id = {f.id: f for f in findings}
    used = [e for e in edges if e.a in by_id and e.b in by_id and e.a != e.b]
    nodes = list(dict.fromkeys([x for e in used for x in (e.a, e.b)]))
    if not nodes:
        return ""
    n = len(nodes)
    radius = 0.0 if n == 1 else max(150.0, (NODE_W + 30) * n / (2 * math.pi))
    if n == 2:
        radius = NODE_W * 0.9
    cx, cy = radius + NODE_W / 2 + 20, radius + NODE_H / 2 + 24
    angle = {x: math.pi + 2 * math.pi * i / n for i, x in enumerate(nodes)}
    pos = {x: (cx + radius * math.cos(a), cy + radius * math.sin(a)) for x, a in angle.items()}
    width, height = 2 * cx, 2 * cy
    marker = f"arrow-{h(key)}"
    parts = [f'<svg class="correlation" role="img" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" aria-label="correlation graph of the findings">',
             f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" markerHeight="9" '
             'markerUnits="userSpaceOnUse" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"/>'
             "</marker></defs>"]
    for e in used:
        (x0, y0), (x1, y1) = pos[e.a], pos[e.b]
        sx, sy = _border(x0, y0, x1, y1)
        ex, ey = _border(x1, y1, x0, y0)
        dash = ' stroke-dasharray="6 4"' if e.correlation < 0 else ""
        both = "" if e.lag_steps else f' marker-start="url(#{marker})"'
        text = f"r {e.correlation:+.2f}" + (f", lag {e.lag_steps} steps" if e.lag_steps else ", same step")
        parts.append(f'<g class="edge"><title>{h(e.a)} → {h(e.b)}: {h(text)}</title>'
                     f'<line x1="{sx:.1f}" y1="{sy:.1f}" x2="{ex:.1f}" y2="{ey:.1f}" stroke="#444" '
                     f'stroke-width="{1 + 3 * min(abs(e.correlation), 1):.2f}"{dash} '
                     f'marker-end="url(#{marker})"{both}/>'
                     f'<text x="{(sx + ex) / 2:.1f}" y="{(sy + ey) / 2 - 6:.1f}" text-anchor="middle" '
                     f'class="strength">{h(text)}</text></g>')
    for x in nodes:
        f = by_id[x]
        px, py = pos[x]
        where = f.entity or "(run)"
        parts.append(f'<g class="node symptom"><title>{h(f.id)}</title>'
                     f'<rect x="{px - NODE_W / 2:.1f}" y="{py - NODE_H / 2:.1f}" width="{NODE_W}" height="{NODE_H}" '
                     f'rx="8"/><text x="{px:.1f}" y="{py - 4:.1f}" text-anchor="middle">'
                     f"{h(_clip(label(f.symptom), NODE_W))}</text>"
                     f'<text x="{px:.1f}" y="{py + 13:.1f}" text-anchor="middle" class="sub">'
                     f"{h(_clip(where, NODE_W))}</text></g>")
    parts.append("</svg>")
    return "".join(parts)


def _border(x0: float, y0: float, x1: float, y1: float) -> tuple[float, float]:
    """Where the segment from the centre (x0, y0) towards (x1, y1) leaves the node's rectangle."""
    dx, dy = x1 - x0, y1 - y0
    if dx == 0 and dy == 0:
        return x0, y0
    scale = min((NODE_W / 2) / abs(dx) if dx else math.inf, (NODE_H / 2) / abs(dy) if dy else math.inf)
    return x0 + dx * scale, y0 + dy * scale
