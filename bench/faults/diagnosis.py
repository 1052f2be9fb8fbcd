"""The two diagnosers the benchmark compares, behind one result type: debugtune and AutoTrainer's rules.

debugtune is called exactly as a user would: ``debugtune.api.diagnose(run_dir, store=...)`` on the run
directory (which holds only what the probe wrote); its *reported* hypotheses (those above the
knowledge base's reporting threshold) are the ranking. A cause's detection step is the earliest
``detection_step`` (else ``onset_step``) of the findings that support it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.faults import autotrainer

SYSTEMS = ("debugtune", "autotrainer")


@dataclass(frozen=True)
class Ranked:
    """A diagnoser's answer for one run: causes best first, with when each was first supported."""

    causes: tuple[str, ...]
    confidences: tuple[float, ...] = ()
    detection: dict[str, int] = field(default_factory=dict)
    symptoms: tuple[str, ...] = ()
    seconds: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"causes": list(self.causes), "confidences": [round(c, 4) for c in self.confidences],
                "detection": self.detection, "symptoms": list(self.symptoms), "seconds": round(self.seconds, 3),
                "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ranked:
        return cls(tuple(d["causes"]), tuple(d.get("confidences", ())), dict(d.get("detection", {})),
                   tuple(d.get("symptoms", ())), float(d.get("seconds", 0.0)), d.get("error"))


_STORE: Any = None


def _store() -> Any:
    """One in-memory store with the knowledge base per process (each run gets its own named graph)."""
    global _STORE
    if _STORE is None:
        from debugtune.kg import open_store

        _STORE = open_store(None)
    return _STORE


def debugtune_ranked(run_dir: str | Path) -> Ranked:
    from debugtune.api import diagnose

    t0 = time.perf_counter()
    try:
        report = diagnose(run_dir, store=_store(), save=False)
    except Exception as err:  # noqa: BLE001 — one failing run is recorded (and counted), the benchmark goes on
        return Ranked((), seconds=time.perf_counter() - t0, error=f"{type(err).__name__}: {err}")
    seconds = time.perf_counter() - t0
    by_id = {f.id: f for f in report.findings}
    detection: dict[str, int] = {}
    for h in report.hypotheses:
        steps = [f.detection_step if f.detection_step is not None else f.onset_step
                 for f in (by_id.get(i) for i in h.findings) if f is not None]
        if steps:
            detection[h.cause] = int(min(steps))
    return Ranked(tuple(h.cause for h in report.hypotheses), tuple(float(h.confidence) for h in report.hypotheses),
                  detection, tuple(sorted({f.symptom for f in report.findings})), seconds)


def autotrainer_ranked(run_dir: str | Path) -> Ranked:
    v = autotrainer.diagnose(run_dir)
    detection = {c: v.detection_step for c in v.causes} if v.detection_step is not None else {}
    return Ranked(v.causes, (), detection, (v.problem,) if v.problem else (), v.seconds)


def diagnose_both(run_dir: str | Path) -> dict[str, Ranked]:
    return {"debugtune": debugtune_ranked(run_dir), "autotrainer": autotrainer_ranked(run_dir)}
