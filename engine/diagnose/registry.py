"""Detectors as units: each judges one symptom from the metrics it names, with the thresholds it names.

A :class:`Detector` is registered once in ``engine.diagnose.detectors.DETECTORS``. The registry, not the
detector, decides whether a detector can run: when a metric it requires is absent it writes the "not judged"
note (grouped by reason, so a run without gradients gets one line, not twelve); when the detector itself finds
its input insufficient (too few steps, one rank, one layer) it raises :class:`NotJudged` with the reason. A
detector that ran without raising has *judged* its symptom, whether it found it or not: that absence is
evidence for the inference stage.

The shared precomputation of a family (the layers × steps gradient grid, the loss curve, the expert
statistics) is built once per run and handed to each of its detectors (``Detector.data``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from debugtune.engine.diagnose.base import Context, Series
from debugtune.engine.diagnose.errors import DiagnoseError
from debugtune.kg.records import Finding


class NotJudged(Exception):  # noqa: N818 — a verdict, not a failure
    """The detector could not judge its symptom on this run; the message says why (one clause)."""


@dataclass
class Emit:
    """Where a detector puts what it found; a finding of another symptom is a programming error."""

    detector: Detector
    found: list[tuple[Finding, Series | None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, finding: Finding, series: Series | None = None) -> None:
        if finding.symptom != self.detector.symptom:
            raise DiagnoseError(f"detector {self.detector.id} emitted {finding.symptom}, "
                                f"but it is registered for {self.detector.symptom}")
        self.found.append((finding, series))

    def note(self, text: str) -> None:
        self.notes.append(text)


def no_data(ctx: Context) -> None:
    return None


@dataclass(frozen=True)
class Detector:
    """One detector: the symptom it judges, its inputs, its thresholds and its function.

    ``requires``: groups of metric names; every group must have at least one metric recorded.
    ``thresholds``: the knowledge-base keys it reads (a trailing ``*`` is a prefix), checked by the contract test.
    ``data``: the family's shared precomputation, built once per run.
    ``signature_of``: causes whose injected fault this detector must find wherever it manifested and its inputs
    were recorded (its direct evidence; the contract test holds it to that).
    """

    id: str
    symptom: str
    dimension: str
    requires: tuple[tuple[str, ...], ...]
    thresholds: tuple[str, ...]
    fn: Callable[[Context, Any, Emit], None]
    data: Callable[[Context], Any] = no_data
    signature_of: tuple[str, ...] = ()

    def missing(self, has: Callable[[str], bool]) -> list[tuple[str, ...]]:
        """The requirement groups with no recorded metric."""
        return [group for group in self.requires if not any(has(m) for m in group)]

    def declares(self, key: str) -> bool:
        return any(key == k or (k.endswith("*") and key.startswith(k[:-1])) for k in self.thresholds)


@dataclass
class DimensionResult:
    """What the detectors of one dimension found and judged on one run, and what they could not judge."""

    dimension: str
    findings: list[Finding] = field(default_factory=list)
    series: dict[str, Series] = field(default_factory=dict)
    judged: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, finding: Finding, series: Series | None) -> None:
        ids = {f.id for f in self.findings}
        fid, n = finding.id, 2
        while fid in ids:
            fid, n = f"{finding.id}#{n}", n + 1
        if fid != finding.id:
            finding = Finding(**{**finding.__dict__, "id": fid})
        self.findings.append(finding)
        if series is not None and series[0].size:
            self.series[fid] = series


def _alternatives(group: tuple[str, ...]) -> str:
    return group[0] if len(group) == 1 else " or ".join(group)


def run_detectors(ctx: Context, detectors: Iterable[Detector], dimensions: Iterable[str]) -> dict[str, DimensionResult]:
    """Run every detector of the requested dimensions; notes for what could not be judged, grouped by reason."""
    wanted = list(dimensions)
    out = {d: DimensionResult(d) for d in wanted}
    unjudged: dict[str, dict[str, list[str]]] = {d: defaultdict(list) for d in wanted}
    ran: set[str] = set()
    data: dict[Callable[[Context], Any], Any] = {}
    for det in detectors:
        if det.dimension not in out:
            continue
        res, why = out[det.dimension], unjudged[det.dimension]
        missing = det.missing(ctx.view.has)
        if missing:
            why[" and ".join(_alternatives(g) for g in missing) + " not recorded"].append(det.symptom)
            continue
        ran.add(det.dimension)
        emit = Emit(det)
        t0 = time.perf_counter()
        try:
            if det.data not in data:
                data[det.data] = det.data(ctx)
            det.fn(ctx, data[det.data], emit)
        except NotJudged as exc:
            why[str(exc)].append(det.symptom)
            continue
        finally:
            res.seconds += time.perf_counter() - t0
        res.judged.add(det.symptom)
        for finding, series in emit.found:
            res.add(finding, series)
        res.notes += emit.notes
    for dim, res in out.items():
        if dim not in ran:
            res.notes.append(f"{dim} flow not diagnosed: none of the metrics its detectors read was recorded")
            continue
        for reason, symptoms in unjudged[dim].items():
            names = [s for s in dict.fromkeys(symptoms) if s not in res.judged]
            if names:
                res.notes.append(f"{', '.join(names)} not judged: {reason}")
    return out


def need_steps(ctx: Context, steps: np.ndarray, what: str) -> None:
    """Raise :class:`NotJudged` when ``what`` covers fewer training steps than the knowledge base's minimum (a
    metric sampled every k-th step covers k steps a sample) or has fewer than ``diagnose.min_samples`` samples."""
    minimum, samples = ctx.th.as_int("diagnose.min_steps"), ctx.th.as_int("diagnose.min_samples")
    covered = steps.size * ctx.spacing(steps)
    if covered < minimum or steps.size < samples:
        raise NotJudged(f"{steps.size} steps of {what} recorded, at least {minimum} are needed")


def late_median(ctx: Context, metric: str, from_key: str) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(steps, values, first step judged, median from it) of ``metric`` over the run from the share of its
    recorded steps ``from_key`` names (:func:`need_steps` first): measures judged once the training has
    settled into what it does."""
    steps, values = ctx.view.series(metric)
    need_steps(ctx, steps, metric)
    cut = float(steps[int(steps.size * ctx.th[from_key])])
    return steps, values, cut, float(np.nanmedian(values[steps >= cut]))


def by_symptom(detectors: Iterable[Detector]) -> Mapping[str, list[Detector]]:
    table: dict[str, list[Detector]] = defaultdict(list)
    for det in detectors:
        table[det.symptom].append(det)
    return table
