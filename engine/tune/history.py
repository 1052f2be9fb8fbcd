"""History for a tuning session: the experiments of similar cases and runs in the graph, one task each.

Every ``dt:Experiment`` of the remedy is read once (from any named graph) with its owner: the case
that lists it (``dt:hasExperiment``, or the case ``dt:aboutRun`` its run), else its run (``dt:inRun``).
Cases count when ``similar_cases`` finds them similar to the target run; other runs when their
findings' signature is as similar (the query stage's formula), both at ``tune.history.similarity``: lower than
the suggestions' threshold, since RGPE weighs every task again on the target's own experiments. The target
run's own earlier experiments are returned apart, as ``prior`` observations of the target task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.suggest import case_similarity, run_signature, similar_cases
from debugtune.engine.tune.data import Task, finite
from debugtune.kg.knowledge import thresholds
from debugtune.kg.namespaces import DT, KB
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store


@dataclass(frozen=True)
class History:
    """Historical tasks (most similar first) and the target run's own earlier observations."""

    tasks: tuple[Task, ...] = ()
    prior: tuple[tuple[dict[str, Any], dict[str, float]], ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> list[dict[str, Any]]:
        return [{"task": t.name, "source": t.source, "similarity": round(t.similarity, 4), "experiments": len(t)}
                for t in self.tasks]


def _experiments_sparql(remedies: Sequence[str]) -> str:
    values = " ".join(iri(KB + r) for r in remedies)
    return f"""
        SELECT ?e ?params ?status ?run ?case ?name ?value WHERE {{
          VALUES ?remedy {{ {values} }}
          ?e a dt:Experiment ; dt:remedy ?remedy ; dt:parametersJson ?params .
          OPTIONAL {{ ?e dt:status ?status }}
          OPTIONAL {{ ?e dt:inRun ?r . ?r dt:runId ?run }}
          OPTIONAL {{ {{ ?case dt:hasExperiment ?e }} UNION {{ ?e dt:inRun ?r2 . ?case a dt:Case ; dt:aboutRun ?r2 }} }}
          OPTIONAL {{ ?e dt:objective ?o . ?o dt:metricName ?name ; dt:value ?value }}
        }}"""


def _observations(store: Store, remedies: Sequence[str]) -> dict[tuple[str, str], dict[str, tuple[dict, dict]]]:
    """(owner kind, owner) → experiment IRI → (parameters, metric values), ok experiments only."""
    out: dict[tuple[str, str], dict[str, tuple[dict, dict]]] = {}
    for r in store.select(_experiments_sparql(remedies)).dicts():
        if r["status"] not in (None, DT + "StatusOk"):
            continue
        owner = ("case", r["case"]) if r["case"] else ("run", r["run"]) if r["run"] else None
        if owner is None:
            continue
        try:
            params = json.loads(r["params"])
        except (TypeError, json.JSONDecodeError):
            continue
        if not isinstance(params, dict):
            continue
        _, values = out.setdefault(owner, {}).setdefault(r["e"], (params, {}))
        if r["name"] is not None and finite(r["value"]):
            values[str(r["name"])] = float(r["value"])
    return out


def load_history(store: Store, run_id: str, remedy: str | Sequence[str], objectives: Sequence[str], *,
                 threshold: float | None = None, any_objective: bool = False) -> History:
    """The tasks for ``remedy`` (or any of several: a joint tuning) similar to ``run_id`` whose experiments report
    every one of ``objectives`` (``any_objective``: at least one of them, as joint targets read them)."""
    threshold = thresholds(store)["tune.history.similarity"] if threshold is None else threshold
    observed = _observations(store, [remedy] if isinstance(remedy, str) else list(remedy))
    reports = any if any_objective else all
    case_scores = {c.case: c.score for c in similar_cases(store, run_id, threshold=threshold)}
    target_signature = run_signature(store, run_id)
    tasks, prior, skipped = [], [], {}
    for (kind, owner), experiments in sorted(observed.items()):
        rows = [(p, v) for p, v in experiments.values() if reports(o in v for o in objectives)]
        if kind == "run" and owner == run_id:
            prior.extend(rows)
            continue
        name = owner if kind == "case" else f"run:{owner}"
        if kind == "case":
            score = case_scores.get(owner)
        else:
            score = case_similarity(target_signature, run_signature(store, owner))
            score = score if score >= threshold else None
        if score is None:
            skipped[name] = f"similarity below {threshold:g}"
        elif not rows:
            skipped[name] = f"no experiment reports {', '.join(objectives)}"
        else:
            rows.sort(key=lambda pv: json.dumps(pv[0], sort_keys=True))
            tasks.append(Task(name, tuple(p for p, _ in rows), tuple(v for _, v in rows), score, kind))
    tasks.sort(key=lambda t: (-t.similarity, t.name))
    prior.sort(key=lambda pv: json.dumps(pv, sort_keys=True))
    return History(tuple(tasks), tuple(prior), skipped)
