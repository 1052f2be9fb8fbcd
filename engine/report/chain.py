"""The cause chain of a hypothesis as an inline SVG directed graph.

Nodes sit left to right: the cause, then its symptoms in onset order. An edge is drawn for every causal
link of the knowledge base between two nodes of the chain that runs forward in onset order; its width and
label give ``dt:strength``. Links from the cause arc above the row, links between symptoms below it
(adjacent nodes are joined by a straight arrow). A symptom with no such link gets a dashed edge from the
cause labelled "?" so the chain stays readable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from debugtune.engine.report.escape import h
from debugtune.kg.records import Hypothesis

NODE_H = 50
GAP = 46
PAD = 16
ARC = 26
CHAR_W = 6.6
MAX_CHARS = 26


def _clip(text: str, n: int = MAX_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _edges(chain: tuple[str, ...], links: Mapping[tuple[str, str], float]) -> list[tuple[int, int, float | None]]:
    out: list[tuple[int, int, float | None]] = []
    for j in range(1, len(chain)):
        incoming = [(i, j, links[(chain[i], chain[j])]) for i in range(j) if (chain[i], chain[j]) in links]
        out += incoming or [(0, j, None)]
    return out


def chain_svg(hyp: Hypothesis, onsets: Mapping[str, int], links: Mapping[tuple[str, str], float],
              label: Callable[[str], str], key: str) -> str:
    """An ``<svg class="chain">`` of the hypothesis chain; ``key`` makes its marker ids unique on the page."""
    chain = hyp.chain or (hyp.cause,)
    texts = [_clip(label(n)) for n in chain]
    widths = [max(110.0, CHAR_W * len(t) + 24) for t in texts]
    xs = [PAD + sum(widths[:i]) + GAP * i for i in range(len(chain))]
    edges = _edges(chain, links)
    up = max([j - i for i, j, _ in edges if i == 0 and j - i > 1] or [0])
    down = max([j - i for i, j, _ in edges if i > 0 and j - i > 1] or [0])
    top = PAD + (ARC * min(up, 4) + 14 if up else 0)
    height = top + NODE_H + (ARC * min(down, 4) + 14 if down else 0) + PAD
    width = xs[-1] + widths[-1] + PAD
    marker = f"arrow-{h(key)}"
    parts = [f'<svg class="chain" role="img" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" aria-label="{h("cause chain of " + hyp.cause)}">',
             f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="9" '
             'markerHeight="9" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
             '<path d="M0,0 L10,5 L0,10 z" fill="#444"/></marker></defs>']
    mid = top + NODE_H / 2
    for i, j, strength in edges:
        parts.append(_edge(xs, widths, i, j, strength, top, mid, marker))
    for n, (node, text) in enumerate(zip(chain, texts, strict=True)):
        sub = f"confidence {hyp.confidence:.2f}" if n == 0 else (
            f"onset step {onsets[node]}" if node in onsets else "expected, not seen")
        cls = "cause" if n == 0 else ("symptom" if node in onsets else "symptom missing")
        parts.append(f'<g class="node {cls}"><title>{h(label(node) + " (" + node + ")")}</title>'
                     f'<rect x="{xs[n]:.1f}" y="{top}" width="{widths[n]:.1f}" height="{NODE_H}" rx="8"/>'
                     f'<text x="{xs[n] + widths[n] / 2:.1f}" y="{top + 21}" text-anchor="middle" '
                     f'class="label">{h(text)}</text>'
                     f'<text x="{xs[n] + widths[n] / 2:.1f}" y="{top + 38}" text-anchor="middle" '
                     f'class="sub">{h(sub)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _edge(xs: list[float], widths: list[float], i: int, j: int, strength: float | None, top: float, mid: float,
          marker: str) -> str:
    dash = ' stroke-dasharray="5 4"' if strength is None else ""
    stroke = 1.0 if strength is None else 1.0 + 3.0 * strength
    text = "?" if strength is None else f"{strength:.2f}"
    if j == i + 1:
        x0, x1 = xs[i] + widths[i], xs[j]
        path, lx, ly = f"M{x0:.1f},{mid:.1f} L{x1:.1f},{mid:.1f}", (x0 + x1) / 2, mid - 9
    else:
        above = i == 0
        lift = ARC * min(j - i, 4) * (1 if above else -1)
        y = top if above else top + 50
        x0, x1 = xs[i] + widths[i] / 2, xs[j] + widths[j] / 2
        cy = y - 2 * lift
        path, lx, ly = f"M{x0:.1f},{y:.1f} Q{(x0 + x1) / 2:.1f},{cy:.1f} {x1:.1f},{y:.1f}", (x0 + x1) / 2, y - lift
        ly += -4 if above else 12
    return (f'<g class="edge"><path d="{path}" fill="none" stroke="#444" stroke-width="{stroke:.2f}"{dash} '
            f'marker-end="url(#{marker})"/><text x="{lx:.1f}" y="{ly:.1f}" text-anchor="middle" '
            f'class="strength">{h(text)}</text></g>')
