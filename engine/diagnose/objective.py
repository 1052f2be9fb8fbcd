"""Whether the logged loss is a supervised loss whose shape the convergence detectors may judge.

Spike, divergence, plateau, oscillation and slow-convergence tests assume a loss that training drives down
towards a floor (cross-entropy, squared error, BCE are all >= 0). A GAN's discriminator loss, or a policy-gradient
surrogate (-log pi * return), moves by design: judged as a supervised loss, a healthy game reads as a learning
rate that is too high. The objective kinds and the metric names that reveal them are knowledge-base data
(``cases/objectives.ttl``); a loss that is often negative is not bounded at 0 either
(``convergence.objective.negative_share``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from debugtune.engine.telemetry.aliases import normalise
from debugtune.kg.namespaces import DT, SKOS

_OBJECTIVES_TTL = "objectives.ttl"


@dataclass(frozen=True)
class ObjectiveKind:
    name: str                     # local name (AdversarialObjective)
    label: str
    spellings: frozenset[str]     # normalised metric spellings that indicate it


def read_objectives(path: str | Path | None = None) -> tuple[ObjectiveKind, ...]:
    """The objective kinds of a Turtle file (default: the shipped ``cases/objectives.ttl``)."""
    import pyoxigraph as ox

    if path is None:
        from debugtune import cases

        path = cases.HERE / _OBJECTIVES_TTL
    spell: dict[str, set[str]] = {}
    label: dict[str, str] = {}
    for t in ox.parse(path=str(path), format=ox.RdfFormat.TURTLE):
        s, p = str(t.subject.value), t.predicate.value
        if p == DT + "metricSpelling":
            spell.setdefault(s, set()).add(normalise(t.object.value))
        elif p == SKOS + "prefLabel":
            label[s] = t.object.value
    return tuple(ObjectiveKind(s.rsplit("/", 1)[-1], label.get(s, s), frozenset(v)) for s, v in sorted(spell.items()))


@cache
def objectives() -> tuple[ObjectiveKind, ...]:
    return read_objectives()


def indicated(metrics: Iterable[str], kinds: Iterable[ObjectiveKind] | None = None) -> tuple[ObjectiveKind, str] | None:
    """The first objective kind one of ``metrics`` indicates (matched whole or on its last path segment)."""
    names = sorted(metrics)
    for kind in kinds if kinds is not None else objectives():
        for name in names:
            if normalise(name) in kind.spellings or normalise(name.rsplit("/", 1)[-1]) in kind.spellings:
                return kind, name
    return None


def not_supervised(metrics: Iterable[str], loss: np.ndarray, negative_share: float) -> str | None:
    """Why the loss's shape is not judged (one clause), or None for a loss that may be judged as supervised."""
    hit = indicated(metrics)
    if hit is not None:
        kind, name = hit
        return f"the run logs {name!r} ({kind.label}): its loss is not a supervised loss that decreases to a floor"
    finite = loss[np.isfinite(loss)]
    if finite.size and float(np.mean(finite < 0)) > negative_share:
        share = float(np.mean(finite < 0))
        return (f"the loss is negative on {share:.0%} of its steps: not a supervised loss bounded at 0 (a "
                f"policy-gradient surrogate or an unbounded likelihood)")
    return None
