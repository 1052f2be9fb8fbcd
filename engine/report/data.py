"""Everything a report shows, read once: the run's graph (findings, hypotheses, experiments), the knowledge
base (labels, causal-link strengths), the ranked suggestions, run.json, diagnosis.json and the telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.report.cost import CostConstants, ProblemCost, problem_cost
from debugtune.engine.report.errors import ReportError
from debugtune.engine.report.series import RunSeries
from debugtune.engine.suggest import suggest
from debugtune.engine.suggest.similarity import require_run
from debugtune.engine.telemetry import TelemetryError, read_run_json
from debugtune.engine.telemetry.runmeta import RUN_JSON
from debugtune.engine.telemetry.writer import TELEMETRY_DIR
from debugtune.kg.assertions import read_experiments, read_findings, read_hypotheses
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.knowledge import thresholds
from debugtune.kg.namespaces import KB, local_name, run_base, run_graph
from debugtune.kg.records import CorrelationEdge, Experiment, Finding, Hypothesis, Suggestion
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store

DIAGNOSIS_FILE = "diagnosis.json"
MIN_HARDWARE_SAMPLES = "hardware.min_samples"  # the KB's threshold: fewer samples are not judged, nor drawn


@dataclass
class ReportData:
    """The inputs of one report; telemetry is None (with ``telemetry_note``) when the run directory is absent."""

    run_id: str
    run_dir: Path | None
    meta: dict[str, Any]
    graph_info: dict[str, Any]
    diagnosis: dict[str, Any]
    findings: list[Finding]
    hypotheses: list[Hypothesis]
    suggestions: list[Suggestion]
    experiments: list[Experiment]
    labels: dict[str, str]
    links: dict[tuple[str, str], float]
    telemetry: RunSeries | None
    telemetry_note: str = ""
    suggestion_note: str = ""
    cost: ProblemCost | None = None
    cost_note: str = ""
    maximize: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)
    correlations: list[CorrelationEdge] = field(default_factory=list)
    min_hardware_samples: int = 0

    def label(self, local: str) -> str:
        """The knowledge base's label of a cause, symptom or remedy, else its id."""
        return self.labels.get(local, local)

    @property
    def last_step(self) -> int | None:
        if self.telemetry is not None and self.telemetry.last_step is not None:
            return self.telemetry.last_step
        steps = self.graph_info.get("stepCount")
        return int(steps) - 1 if steps else None


def _graph_info(store: Store, run_id: str) -> dict[str, Any]:
    rows = store.select(f"""SELECT ?p ?o WHERE {{ GRAPH {iri(run_graph(run_id))} {{
        {iri(run_base(run_id))} ?p ?o }} }}""").dicts()
    return {local_name(r["p"]): r["o"] for r in rows}


def kb_labels(store: Store, locals_: Iterable[str]) -> dict[str, str]:
    """skos:prefLabel of knowledge-base items by local name (items without one are left out)."""
    names = sorted({n for n in locals_ if n})
    if not names:
        return {}
    values = " ".join(iri(KB + n) for n in names)
    rows = store.select(f"SELECT ?x ?l WHERE {{ VALUES ?x {{ {values} }} ?x skos:prefLabel ?l }}").dicts()
    return {r["x"][len(KB):]: str(r["l"]) for r in rows}


def causal_links(store: Store, nodes: Iterable[str]) -> dict[tuple[str, str], float]:
    """(from, to) → dt:strength of every causal link between the given causes and symptoms."""
    names = sorted({n for n in nodes if n})
    if not names:
        return {}
    values = " ".join(iri(KB + n) for n in names)
    rows = store.select(f"""SELECT ?f ?t ?s WHERE {{ VALUES ?f {{ {values} }} VALUES ?t {{ {values} }}
        ?l a dt:CausalLink ; dt:from ?f ; dt:to ?t ; dt:strength ?s }}""").dicts()
    out: dict[tuple[str, str], float] = {}
    for r in rows:
        key = (r["f"][len(KB):], r["t"][len(KB):])
        out[key] = max(out.get(key, 0.0), float(r["s"]))
    return out


def correlations(store: Store, run_id: str) -> list[CorrelationEdge]:
    """The correlation graph the diagnosis stored (``dt:CorrelationEdge`` between two findings), strongest first."""
    rows = store.select(f"""SELECT ?a ?b ?lag ?r WHERE {{ GRAPH {iri(run_graph(run_id))} {{
        ?e a dt:CorrelationEdge ; dt:findingA ?fa ; dt:findingB ?fb ; dt:lagSteps ?lag ; dt:correlation ?r .
        ?fa dt:findingId ?a . ?fb dt:findingId ?b }} }}""").dicts()
    edges = [CorrelationEdge(a=r["a"], b=r["b"], lag_steps=int(r["lag"]), correlation=float(r["r"])) for r in rows]
    return sorted(edges, key=lambda e: (-abs(e.correlation), e.a, e.b))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: cannot read the diagnosis report: {err}") from None
    return obj if isinstance(obj, dict) else {}


def _telemetry(run_dir: Path | None) -> tuple[RunSeries | None, dict[str, Any], str]:
    if run_dir is None:
        return None, {}, "the store records no run directory for this run, so no telemetry can be plotted"
    if not run_dir.is_dir():
        return None, {}, f"the run directory {run_dir} is not on this machine, so no telemetry can be plotted"
    meta = read_run_json(run_dir) if (run_dir / RUN_JSON).exists() else {}
    if not (run_dir / TELEMETRY_DIR).is_dir():
        return None, meta, f"{run_dir} holds no telemetry/ folder"
    try:
        return RunSeries(run_dir), meta, ""
    except TelemetryError as err:
        raise ReportError(f"cannot read the telemetry of the run: {err}") from None


def step_seconds(tel: RunSeries | None) -> float | None:
    """The job's typical step time: the median over steps of the slowest rank's step_time_ms, in seconds."""
    if tel is None:
        return None
    _, _, grid = tel.by_rank("step_time_ms")
    if grid.size == 0:
        return None
    with np.errstate(all="ignore"):
        slowest = np.nanmax(np.where(np.isfinite(grid), grid, np.nan), axis=1)
    slowest = slowest[np.isfinite(slowest) & (slowest > 0)]
    return float(np.median(slowest)) / 1000.0 if slowest.size else None


def _world_size(meta: dict[str, Any], info: dict[str, Any], tel: RunSeries | None) -> int | None:
    for value in (meta.get("world_size"), info.get("worldSize")):
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            return int(value)
    return len(tel.ranks) if tel is not None and tel.ranks else None


def _cost(data: ReportData, constants: CostConstants) -> tuple[ProblemCost | None, str]:
    top = data.hypotheses[0] if data.hypotheses else None
    concerned = [f for f in data.findings if top is None or f.id in top.findings] or data.findings
    if not concerned:
        return None, "no finding, so nothing was lost"
    cards = _world_size(data.meta, data.graph_info, data.telemetry)
    step_s = step_seconds(data.telemetry)
    last = data.last_step
    if step_s is None or cards is None or last is None:
        missing = "step_time_ms telemetry" if step_s is None else "the world size" if cards is None else "steps"
        return None, f"the cost needs {missing}, which this run does not record"
    detections = [f.detection_step for f in concerned if f.detection_step is not None]
    what = f"the findings of the top hypothesis ({top.cause})" if top is not None else "all findings"
    cost = problem_cost(cards=cards, step_seconds=step_s, onset_step=min(f.onset_step for f in concerned),
                        detection_step=min(detections) if detections else None, last_step=last,
                        constants=constants, notes=(f"onset and detection from {what}",))
    return cost, ""


def gather(store: Store, run_id: str, *, run_dir: str | Path | None = None, card_hour_cost: float | None = None,
           maximize: Iterable[str] = ()) -> ReportData:
    """Read everything the report of ``run_id`` shows (the run must have been diagnosed into ``store``)."""
    require_run(store, run_id)
    info = _graph_info(store, run_id)
    path = Path(run_dir) if run_dir is not None else Path(info["runDir"]) if info.get("runDir") else None
    tel, meta, tel_note = _telemetry(path)
    findings, hypotheses = read_findings(store, run_id), read_hypotheses(store, run_id)
    suggestion_note = ""
    try:
        suggestions = suggest(store, run_id)
    except DebugtuneError as err:
        suggestions, suggestion_note = [], f"no suggestions: {err}"
    experiments = [e for _, e in read_experiments(store, run_id)]
    nodes = {n for h in hypotheses for n in h.chain} | {h.cause for h in hypotheses} | {f.symptom for f in findings}
    diag_path = path / DIAGNOSIS_FILE if path is not None else None
    data = ReportData(
        run_id=run_id, run_dir=path, meta=meta, graph_info=info,
        diagnosis=_read_json(diag_path) if diag_path is not None and diag_path.is_file() else {},
        findings=findings, hypotheses=hypotheses, suggestions=suggestions, experiments=experiments,
        labels=kb_labels(store, nodes | {s.remedy for s in suggestions} | {e.remedy for e in experiments}),
        links=causal_links(store, nodes), telemetry=tel, telemetry_note=tel_note,
        suggestion_note=suggestion_note, maximize=frozenset(maximize))
    data.correlations = correlations(store, run_id)
    data.min_hardware_samples = thresholds(store).as_int(MIN_HARDWARE_SAMPLES)
    constants = CostConstants.from_store(store).override(card_hour_price=card_hour_cost)
    data.cost, data.cost_note = _cost(data, constants)
    return data
