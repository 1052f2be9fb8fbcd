"""The diagnosis report: findings, hypotheses and what was (not) diagnosed, with its stable JSON form.

The JSON schema is documented in ``docs/report-schema.md``; ``SCHEMA_VERSION`` changes only when a
field is removed or changes meaning (new fields may be added at any time).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from debugtune.engine.infer.blind import BlindSpots
from debugtune.engine.infer.undetermined import Undetermined
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.kg.records import CorrelationEdge, Finding, Hypothesis

SCHEMA_VERSION = 1
REPORT_FILE = "diagnosis.json"


@dataclass(frozen=True)
class Candidate:
    """A scored cause (or "unknown") whether or not it was reported."""

    cause: str
    confidence: float
    log_score: float

    def as_dict(self) -> dict[str, Any]:
        return {"cause": self.cause, "confidence": round(self.confidence, 4), "log_score": round(self.log_score, 4)}


@dataclass
class DiagnosisReport:
    """What ``debugtune.diagnose`` returns and ``cann-debug diagnose --json`` prints."""

    run: str
    findings: list[Finding]
    hypotheses: list[Hypothesis]
    edges: list[CorrelationEdge] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)
    coverage: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    timing_s: dict[str, float] = field(default_factory=dict)
    run_dir: str | None = None
    steps: int = 0
    report_threshold: float = 0.0
    stored_in: str | None = None
    advice: list[Hypothesis] = field(default_factory=list)
    """Advisory causes and set-up risks with no observed failure: worth a look, not a root cause."""
    undetermined: Undetermined | None = None
    """When no cause is reported or the first two are close: the candidates and what would tell them apart."""
    blind: BlindSpots | None = None
    """When the training flows were judged on too few symptoms to call a run without findings healthy."""
    signs: list[Finding] = field(default_factory=list)
    """Observations that speak for a working run (``dt:healthSign``): never findings, counter-evidence only."""

    @property
    def status(self) -> str:
        """"diagnosed" (a cause above the threshold), "undetermined" (findings but no such cause, or no findings
        from too few judged symptoms) or "healthy"."""
        if self.hypotheses:
            return "diagnosed"
        return "undetermined" if self.findings or self.blind is not None else "healthy"

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    def summary(self) -> str:
        """One sentence saying what the diagnosis concluded."""
        done = [d for d, s in self.coverage.items() if s == "diagnosed"]
        scope = f"{', '.join(done) or 'no'} flow{'s' if len(done) != 1 else ''} diagnosed"
        if self.hypotheses:
            h = self.hypotheses[0]
            return f"root cause: {h.cause} (confidence {h.confidence:.2f}); {scope}"
        best = next((c for c in self.candidates if c.cause != "unknown"), None)
        if not self.findings and self.blind is not None:
            return f"{self.blind.sentence()} ({scope})"
        if not self.findings:
            return f"no findings and no hypothesis: the run looks healthy ({scope})"
        if self.advice:
            a = self.advice[0]
            return (f"{len(self.findings)} finding(s), no root cause (none explains an observed failure); advice: "
                    f"{a.cause} (confidence {a.confidence:.2f}), worth a look ({scope})")
        if self.undetermined is not None:
            return f"{len(self.findings)} finding(s), {self.undetermined.sentence()} ({scope})"
        near = f"; best candidate {best.cause} at {best.confidence:.2f}" if best else ""
        return (f"{len(self.findings)} finding(s) but no cause reaches the reporting threshold "
                f"{self.report_threshold:.2f}{near} ({scope})")

    def as_dict(self) -> dict[str, Any]:
        """The report as in docs/report-schema.md."""
        return {
            "schema_version": SCHEMA_VERSION,
            "run": self.run,
            "run_dir": self.run_dir,
            "status": self.status,
            "summary": self.summary(),
            "steps": self.steps,
            "findings": [f.as_dict() for f in self.findings],
            "hypotheses": [{**h.as_dict(), "rank": h.rank} for h in self.hypotheses],
            "candidates": [c.as_dict() for c in self.candidates],
            "correlations": [{"a": e.a, "b": e.b, "lag_steps": e.lag_steps, "correlation": e.correlation}
                             for e in self.edges],
            "coverage": dict(self.coverage),
            "notes": list(self.notes),
            "advice": [{**h.as_dict(), "rank": h.rank} for h in self.advice],
            "undetermined": self.undetermined.as_dict() if self.undetermined is not None else None,
            "blind_spots": self.blind.as_dict() if self.blind is not None else None,
            "signs": [f.as_dict() for f in self.signs],
            "report_threshold": self.report_threshold,
            "timing_s": {k: round(v, 4) for k, v in self.timing_s.items()},
            "stored_in": self.stored_in,
        }

    def save(self, run_dir: str | Path) -> Path:
        """Write ``<run_dir>/diagnosis.json`` atomically; returns its path."""
        path = Path(run_dir) / REPORT_FILE
        atomic_write_bytes(path, (json.dumps(self.as_dict(), indent=2, allow_nan=False, default=_jsonable)
                                  + "\n").encode())
        return path


def _jsonable(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
