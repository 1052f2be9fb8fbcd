"""The data passed between stages (DESIGN §3): plain frozen dataclasses.

They live in `kg/` because every stage may import `kg/`, and `kg.assertions` maps them to RDF.
Identifiers of symptoms, causes and remedies are the local names of DESIGN §2 (e.g. "GateInitBias").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DIMENSIONS = ("gradient", "convergence", "communication", "hardware")
"""Dimension keywords; their ontology individuals are dt:GradientFlow, dt:ConvergenceFlow, ..."""

DIMENSION_IRIS = {
    "gradient": "GradientFlow", "convergence": "ConvergenceFlow",
    "communication": "CommunicationFlow", "hardware": "HardwareFlow",
}

LOCATION_KINDS = ("run", "layer", "expert", "rank", "link", "device")
"""Location kinds; their ontology individuals are dt:RunLocation, dt:LayerLocation, ..."""

RISKS = ("low", "medium", "high")
STATUSES = ("ok", "failed", "stopped")


def location_kind(entity: str) -> str:
    """The location kind of an entity name.

    Conventions: "" → run; "expert:<i>" or "<path>/expert:<i>" → expert; "rank:<r>" → rank;
    "link:<a>-<b>" → link; "device:<name>" → device; anything else (a module path) → layer.
    """
    if not entity:
        return "run"
    tail = entity.rsplit("/", 1)[-1]
    for kind in ("expert", "rank", "link", "device"):
        if tail.startswith(kind + ":"):
            return kind
    return "layer"


@dataclass(frozen=True)
class Finding:
    """An observation that a symptom occurred: where, from which step to which, how severe, and why."""

    id: str
    symptom: str
    dimension: str
    entity: str
    onset_step: int
    end_step: int
    severity: float
    evidence: dict[str, float | str | bool] = field(default_factory=dict)
    """Numbers as floats; categorical values (a rule's name, yes/no) as strings and booleans."""
    detector: str = ""
    detection_step: int | None = None

    @property
    def location_kind(self) -> str:
        return location_kind(self.entity)

    def evidence_text(self, sep: str = "=", digits: int = 4, limit: int | None = None) -> str:
        """``key=value, …`` with numbers to ``digits`` significant digits and categorical values as they are."""
        items = list(self.evidence.items())[:limit]
        return ", ".join(f"{k}{sep}{v:.{digits}g}" if isinstance(v, int | float) and not isinstance(v, bool)
                         else f"{k}{sep}{v}" for k, v in items)

    def as_dict(self) -> dict[str, Any]:
        """The finding as in the `--json` report schema (docs/report-schema.md)."""
        return {"id": self.id, "symptom": self.symptom, "dimension": self.dimension, "entity": self.entity,
                "onset_step": self.onset_step, "end_step": self.end_step, "severity": round(self.severity, 4),
                "evidence": dict(self.evidence), "detector": self.detector,
                "detection_step": self.detection_step}


@dataclass(frozen=True)
class CorrelationEdge:
    """Two findings whose series co-move: ``a`` leads ``b`` by ``lag_steps`` with coefficient ``correlation``."""

    a: str
    b: str
    lag_steps: int
    correlation: float


@dataclass(frozen=True)
class Hypothesis:
    """An inferred root cause: confidence, chain (cause then symptoms in onset order), evidence, explanation."""

    cause: str
    confidence: float
    chain: tuple[str, ...]
    findings: tuple[str, ...]
    explanation: str
    rank: int = 0
    basis: str = ""  # why the confidence is what it is (specific evidence, or the ceiling without it)

    def as_dict(self) -> dict[str, Any]:
        out = {"cause": self.cause, "confidence": round(self.confidence, 4), "chain": list(self.chain),
               "findings": list(self.findings), "explanation": self.explanation}
        return {**out, "confidence_basis": self.basis} if self.basis else out


@dataclass(frozen=True)
class TuningParameter:
    """A parameter a remedy exposes: ``kind`` continuous/integer/categorical, ``scale`` linear/log."""

    name: str
    kind: str
    default: Any
    low: float | None = None
    high: float | None = None
    scale: str = "linear"
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigChange:
    """The configuration change a remedy makes (``to_value`` may be an expression such as "x0.9")."""

    key: str
    to_value: str
    from_value: str | None = None


@dataclass(frozen=True)
class Suggestion:
    """A ranked remedy for a run."""

    remedy: str
    score: float
    effectiveness: float
    cost: float
    risk: str
    success_rate: float
    addresses: tuple[str, ...]
    parameters: tuple[TuningParameter, ...] = ()
    config_changes: tuple[ConfigChange, ...] = ()
    cases: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class Experiment:
    """A tuning trial: parameters, objective values, cost (card-hours), seed, status, replay reference."""

    id: str
    remedy: str
    parameters: dict[str, Any]
    objectives: dict[str, float]
    cost: float
    seed: int
    status: str = "ok"
    replay_ref: str | None = None
