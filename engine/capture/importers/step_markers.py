"""Steps of a Kineto trace that has no ``ProfilerStep`` annotations, from a repeated named marker: the family of
user annotations (names compared by their last ``|`` / ``/`` / ``:`` field, digits and brackets dropped, so
PARAM's ``[param|…|warmup|forward]`` and ``[param|…|measure|forward]`` are one family) that occurs at least twice
without overlapping itself (an instance inside another of its family, an iteration inside its phase, is left out)
and covers the most time. Its instances, in time order, are steps 0, 1, …"""

from __future__ import annotations

import re
from collections import defaultdict

_FIELD = re.compile(r"[|/:]")
_NOISE = re.compile(r"[\[\]()#\d\s]+")
MIN_STEPS = 2


def family(name: str) -> str:
    """The marker family of an annotation name ('' when nothing is left)."""
    last = _FIELD.split(name.strip().strip("[]"))[-1]
    return _NOISE.sub("", last).lower()


def marker_steps(annotations: list[tuple[str, float, float, int]]) -> tuple[list[tuple[int, float, float, int]], str]:
    """(steps as (number, start µs, duration µs, thread), the family's name) from (name, ts, dur, thread)
    annotations; ([], '') when no family repeats without overlap."""
    by: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for name, ts, dur, tid in annotations:
        key = family(name)
        if key and dur > 0:
            by[key].append((ts, dur, tid))
    best: tuple[float, str, list[tuple[float, float, int]]] | None = None
    for key, found in by.items():
        spans = _outermost(sorted(found))
        if len(spans) < MIN_STEPS or any(a[0] + a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
            continue
        covered = sum(d for _, d, _ in spans)
        if best is None or covered > best[0]:
            best = (covered, key, spans)
    if best is None:
        return [], ""
    return [(i, ts, dur, tid) for i, (ts, dur, tid) in enumerate(best[2])], best[1]


def _outermost(spans: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """The spans (sorted by start) not inside an earlier one of the same family (a phase wrapping its iteration)."""
    out: list[tuple[float, float, int]] = []
    for span in spans:
        if out and span[0] + span[1] <= out[-1][0] + out[-1][1]:
            continue
        out.append(span)
    return out
