"""What a run without findings could not show: a run is called healthy only when it could have shown a fault.

A log of a loss, a learning rate and a gradient norm (an imported JSONL or TensorBoard file, a callback without the
probe's hooks) leaves most training symptoms unjudged: dead units, stale gradients, label errors, saturation. No
finding in it is no evidence of health. When the training flows (gradient, convergence) were diagnosed but less
than ``infer.healthy_min_judged`` of their symptoms could be judged, the report says so and names what to record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from debugtune.engine.diagnose.detectors import DETECTORS
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.telemetry.schema import MOE_METRICS

TRAINING_FLOWS = ("gradient", "convergence")
"""The flows whose symptoms say whether the model learns; communication and hardware are judged apart."""


def metrics_for(symptom: str) -> tuple[str, ...]:
    """The metrics some detector of ``symptom`` reads (every option of every requirement group), in order."""
    out: list[str] = []
    for det in DETECTORS:
        if det.symptom == symptom:
            for group in det.requires:
                out += [m for m in group if m not in out]
    return tuple(out)


@cache
def moe_only(symptom: str) -> bool:
    """Whether every detector of ``symptom`` needs a metric only a mixture of experts records."""
    dets = [d for d in DETECTORS if d.symptom == symptom]
    return bool(dets) and all(any(set(group) <= MOE_METRICS for group in d.requires) for d in dets)


@dataclass(frozen=True)
class BlindSpots:
    """The training flows' symptoms this run could not judge, and the share it could."""

    judged_share: float
    judged: int
    total: int
    unjudged: tuple[str, ...]         # in the detector registry's order
    record: tuple[str, ...]           # metrics that would let a next run judge them, most useful first

    def as_dict(self) -> dict[str, Any]:
        return {"judged_share": round(self.judged_share, 3), "judged": self.judged, "total": self.total,
                "unjudged": list(self.unjudged), "record": list(self.record)}

    def sentence(self) -> str:
        """For a run without findings: why it is not called healthy."""
        return f"no findings, but {self._judged()}: too little to call the run healthy; {self._record()}"

    def caveat(self) -> str:
        """For a run with findings and no root cause: what it could not rule out."""
        return f"{self._judged()}: a cause that shows only in those cannot be ruled out; {self._record()}"

    def _judged(self) -> str:
        shown = ", ".join(self.unjudged[:4]) + (" …" if len(self.unjudged) > 4 else "")
        return (f"only {self.judged} of {self.total} training symptoms could be judged from what was recorded "
                f"({shown} could not)")

    def _record(self) -> str:
        return f"recording {', '.join(self.record[:4])} (the probe records them) would judge them"


def blind_spots(judged: Iterable[str], coverage: Mapping[str, str], recorded: Iterable[str],
                th: Thresholds, impossible: Iterable[str] = ()) -> BlindSpots | None:
    """The blind spots of a run whose training flows were diagnosed on too few symptoms, with the metrics it did
    not record that would judge the most of them; None when it could judge enough (or when no training flow was
    diagnosed: a trace has nothing to say about learning). ``impossible``: symptoms the model cannot show (an
    MoE's, where it has none), counted in the share but neither listed nor asked for."""
    flows = [f for f in TRAINING_FLOWS if coverage.get(f) == "diagnosed"]
    if not flows:
        return None
    seen = set(judged)
    symptoms = list(dict.fromkeys(d.symptom for d in DETECTORS if d.dimension in flows))
    done = [s for s in symptoms if s in seen]
    share = len(done) / len(symptoms)
    if share >= th["infer.healthy_min_judged"]:
        return None
    skip = set(impossible)
    missing = [s for s in symptoms if s not in seen and s not in skip]
    have = set(recorded)
    counts: dict[str, int] = {}
    for s in missing:
        for m in metrics_for(s):
            if m not in have:
                counts[m] = counts.get(m, 0) + 1
    record = tuple(sorted(counts, key=lambda m: -counts[m]))
    return BlindSpots(share, len(done), len(symptoms), tuple(missing), record)
