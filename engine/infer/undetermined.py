"""When the evidence does not decide: the leading candidates and the observations that would tell them apart.

For the leading candidates, every symptom the run could not judge is ranked by how differently the candidates
predict it (P(symptom | cause) from their links and calibration profiles); for each such symptom the registered
detectors say which metrics would let the next run judge it, leaving out those this run recorded. Where it
recorded them all and the symptom was still not judged (a balancing loss logged raw, which bounds its coefficient
only loosely), recording more is not the answer, and the sentence says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.infer.blind import metrics_for
from debugtune.engine.infer.causal import CauseScore


@dataclass(frozen=True)
class Decider:
    """A symptom this run did not judge whose presence would favour one candidate over another."""

    symptom: str
    metrics: tuple[str, ...]          # record one of these (of the metrics its detectors read, those not recorded)
    probabilities: dict[str, float]   # candidate → P(symptom | candidate)

    def as_dict(self) -> dict[str, Any]:
        return {"symptom": self.symptom, "record": list(self.metrics),
                "probabilities": {k: round(v, 3) for k, v in self.probabilities.items()}}

    def clause(self) -> str:
        if self.metrics:
            return f"recording {' or '.join(self.metrics)} (to judge {self.symptom}) would tell them apart"
        return (f"judging {self.symptom} would tell them apart, and this run recorded what its detectors read "
                f"without settling it (the notes say why)")


@dataclass(frozen=True)
class Undetermined:
    """The leading candidates (cause, confidence) and what would decide between them."""

    candidates: list[tuple[str, float]]
    deciders: list[Decider] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"candidates": [{"cause": c, "confidence": round(p, 4)} for c, p in self.candidates],
                "would_decide": [d.as_dict() for d in self.deciders]}

    def sentence(self) -> str:
        names = " or ".join(f"{c} ({p:.2f})" for c, p in self.candidates)
        if len(self.candidates) == 1:
            return f"undetermined: {names} is the one candidate left, below the reporting threshold"
        if not self.deciders:
            return f"undetermined between {names}; nothing this probe can record would tell them apart"
        return f"undetermined between {names}; {self.deciders[0].clause()}"


def undetermined(scores: Sequence[CauseScore], confidences: Mapping[str, float], judged: set[str], *,
                 floor: float, spread_min: float, top: int = 3, deciders: int = 3,
                 recorded: frozenset[str] = frozenset(), impossible: frozenset[str] = frozenset()
                 ) -> Undetermined | None:
    """The ``top`` candidates above ``floor`` and the unjudged symptoms whose probability under them differs by
    at least ``spread_min`` (``infer.list_threshold`` and ``infer.decider_spread`` in the knowledge base);
    ``recorded``: the metrics the run recorded, which no decider asks for again; ``impossible``: symptoms this
    model cannot show (an MoE's, where it has no experts), which no decider asks for."""
    lead = [s for s in sorted(scores, key=lambda s: -confidences.get(s.cause, 0.0))
            if confidences.get(s.cause, 0.0) >= floor][:top]
    if not lead:
        return None
    ranked: list[tuple[float, Decider]] = []
    if len(lead) >= 2:
        symptoms = {sym for s in lead for sym in s.activation} - judged - impossible
        for sym in symptoms:
            p = {s.cause: float(s.activation.get(sym, 0.0)) for s in lead}
            metrics = metrics_for(sym)
            spread = max(p.values()) - min(p.values())
            if metrics and spread >= spread_min:
                ranked.append((spread, Decider(sym, tuple(m for m in metrics if m not in recorded), p)))
    ranked.sort(key=lambda x: -x[0])
    return Undetermined([(s.cause, confidences[s.cause]) for s in lead], [d for _, d in ranked[:deciders]])
