"""What every detector shares: its context (the run's telemetry and the thresholds) and how a finding is built."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from debugtune.engine.diagnose.frame import TelemetryView
from debugtune.engine.diagnose.scan import Partial, ScanJob, ScanPlan
from debugtune.engine.diagnose.stats import ffill
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.kg.records import Finding

if TYPE_CHECKING:
    from debugtune.engine.diagnose.lazyview import LazyView

Series = tuple[np.ndarray, np.ndarray]


@dataclass
class Context:
    """One run's decoded telemetry and the knowledge-base thresholds."""

    view: TelemetryView | LazyView
    th: Thresholds

    @property
    def meta(self) -> dict:
        return self.view.meta

    @property
    def plan(self) -> ScanPlan:
        """How scans cut the run (``diagnose.scan.*``)."""
        return ScanPlan(self.th.as_int("diagnose.scan.chunk_steps"), self.th.as_int("diagnose.scan.window_cells"))

    def scan(self, job: ScanJob) -> Partial:
        """Run a scan over this run's windows (in memory, out of core or on Ray: the view decides)."""
        return self.view.scan(job, self.plan)

    @staticmethod
    def spacing(steps: np.ndarray) -> float:
        """Training steps between two samples of a series recorded at ``steps`` (the median gap; 1 when unknown)."""
        return max(float(np.median(np.diff(steps))), 1.0) if steps.size >= 2 else 1.0

    def persist(self, key: str, steps: np.ndarray) -> int:
        """The persistence window ``key`` (training steps) in samples of a series recorded at ``steps``: a
        metric the probe writes every k-th step (update ratios on detail steps) needs fewer samples."""
        return max(1, int(np.ceil(self.th.as_int(key) / self.spacing(steps))))


_UNSAFE = re.compile(r"[^A-Za-z0-9._:/-]+")


@dataclass(frozen=True)
class LrSchedule:
    """What the recorded learning rate says about a run, on the steps it was asked for."""

    lr: np.ndarray | None     # aligned to the steps, or None when no learning rate was recorded
    warmup_end: int           # index where a warm-up reaches its peak (0 without a warm-up)
    drops: np.ndarray         # indices where the learning rate fell by a scheduled step

    def first_drop(self, n: int) -> int:
        return int(self.drops[0]) if self.drops.size else n


def lr_schedule(ctx: Context, steps: np.ndarray) -> LrSchedule:
    """The learning rate on ``steps``: the end of its warm-up and its scheduled drops."""
    th, view = ctx.th, ctx.view
    none = LrSchedule(None, 0, np.zeros(0, dtype=np.int64))
    if not view.has("lr") or steps.size < 2:
        return none
    ls, lv = view.series("lr")
    if ls.size < 2 or not np.isfinite(lv).any():
        return none
    lr = np.interp(steps, ls, ffill(lv))
    peak = float(np.max(lr[: max(2, steps.size // 2)]))
    warm = 0
    if peak > 0 and lr[0] < th["convergence.warmup.start_frac"] * peak:
        warm = int(np.argmax(lr >= 0.99 * peak))
    with np.errstate(divide="ignore", invalid="ignore"):
        drop = lr[1:] < (1 - th["convergence.lr_drop.frac"]) * lr[:-1]
    return LrSchedule(lr, warm, np.flatnonzero(drop) + 1)


def finding_id(symptom: str, entity: str) -> str:
    """Stable id: the symptom and where (``LossSpike@run``, ``DeadUnits@net.2``)."""
    where = _UNSAFE.sub("_", entity) if entity else "run"
    return f"{symptom}@{where}"


def make_finding(symptom: str, dimension: str, entity: str, steps: np.ndarray, onset: int, end: int,
                 severity: float, evidence: Mapping[str, float | str | bool | None], detector: str,
                 detection: int | None = None) -> Finding:
    """A finding whose onset/end/detection are given as indices into ``steps`` (converted to step numbers).

    Evidence keeps categorical values (a rule's name, a yes/no) as strings and booleans; numbers that are not
    finite are left out."""
    last = steps.size - 1
    onset, end = min(max(onset, 0), last), min(max(end, 0), last)
    det = None if detection is None else int(steps[min(max(detection, onset), last)])
    clean: dict[str, float | str | bool] = {}
    for k, v in evidence.items():
        if isinstance(v, str | bool):
            clean[k] = v
        elif v is not None and math.isfinite(float(v)):
            clean[k] = float(v)
    return Finding(id=finding_id(symptom, entity), symptom=symptom, dimension=dimension, entity=entity,
                   onset_step=int(steps[onset]), end_step=int(steps[max(end, onset)]),
                   severity=float(np.clip(severity, 0.0, 1.0)), evidence=clean, detector=detector,
                   detection_step=det)


def severity(value: float, threshold: float, saturate: float) -> float:
    """0.5 at the threshold rising to 1 at ``saturate`` on a log scale (either direction of deviation)."""
    if not (math.isfinite(value) and threshold > 0 and saturate > 0 and value > 0):
        return 1.0 if not math.isfinite(value) else 0.5
    span = math.log(saturate / threshold)
    if span == 0:
        return 1.0
    return float(np.clip(0.5 + 0.5 * math.log(value / threshold) / span, 0.5, 1.0))


def natural_key(name: str) -> list:
    """Sort key that orders ``layers.2`` before ``layers.10``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def layer_order(view: TelemetryView | LazyView, names: list[str]) -> list[str]:
    """Layers from input to output: run.json's ``layers`` (or ``probe.layers``) order when given, else natural
    name order (``body.0`` < ``body.2`` < ``head``), which is right for sequential models."""
    given = view.meta.get("layers") or view.meta.get("layer_order") or (view.meta.get("probe") or {}).get("layers")
    if isinstance(given, list) and given:
        pos = {str(n): i for i, n in enumerate(given)}
        return sorted(names, key=lambda n: (pos.get(n, len(pos)), natural_key(n)))
    return sorted(names, key=natural_key)
