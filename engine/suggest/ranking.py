"""Ranked suggestions for a run: remedies of its hypothesised causes, scored and filtered.

    relevance(r) = min(1, Σ confidence(h))  over the run's hypotheses h whose cause r addresses
    score(r)     = relevance(r) × base(r) × success_rate(r)
    base(r)      = (w_e·effectiveness + w_c·h/(h + cost) + w_r·risk_score) / (w_e + w_c + w_r)

Hypotheses are mutually exclusive explanations, so the summed confidence is the probability that
the remedy addresses the actual cause. See docs/query.md for the rest of the definitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from debugtune.engine.suggest.errors import SuggestError, unknown
from debugtune.engine.suggest.queries import candidate_sparql
from debugtune.engine.suggest.remedies import (
    RemedyFacts,
    config_changes,
    facts_from_row,
    remedy_facts,
    require_remedy,
    tuning_parameters,
)
from debugtune.engine.suggest.settings import SuggestSettings, check_weights, load_settings
from debugtune.engine.suggest.similarity import (
    StoredCase,
    normalised_similarity,
    require_run,
    run_signature,
    stored_cases,
)
from debugtune.kg.namespaces import local_name
from debugtune.kg.records import Suggestion
from debugtune.kg.store import Store


def risk_rank(store: Store, risk: str | int) -> int:
    """The rank of a risk keyword (``low`` 1, ``medium`` 2, ``high`` 3) from the ontology; ints pass through."""
    if isinstance(risk, int):
        return risk
    rows = store.select("SELECT ?k ?r WHERE { ?x a dt:RiskLevel ; dt:keyword ?k ; dt:rank ?r }").dicts()
    ranks = {r["k"]: int(r["r"]) for r in rows}
    if risk.lower() not in ranks:
        raise SuggestError(unknown("risk level", risk, ranks))
    return ranks[risk.lower()]


def _check_limits(max_cost: float | None, max_experiments: int | None, limit: int | None) -> None:
    if max_cost is not None and not max_cost >= 0:
        raise SuggestError(f"max cost must be non-negative card-hours, got {max_cost}")
    if max_experiments is not None and max_experiments < 0:
        raise SuggestError(f"max experiments must be non-negative, got {max_experiments}")
    if limit is not None and limit < 0:
        raise SuggestError(f"limit must be non-negative, got {limit}")


def suggestion_sparql(store: Store | None, run_id: str, *, max_risk: str | int | None = None,
                      max_cost: float | None = None, max_experiments: int | None = None) -> str:
    """The candidate query `suggest` runs (``store`` resolves a risk keyword; may be None for an int)."""
    rank = None if max_risk is None else risk_rank(store, max_risk) if store is not None else int(max_risk)
    return candidate_sparql(run_id, max_risk_rank=rank, max_cost=max_cost, max_experiments=max_experiments)


def _candidates(rows: list[dict[str, Any]]) -> tuple[dict[str, RemedyFacts], dict[str, dict[str, float]]]:
    """Facts per remedy and, per remedy, the confidence of each hypothesised cause it addresses."""
    facts: dict[str, RemedyFacts] = {}
    causes: dict[str, dict[str, float]] = {}
    for r in rows:
        facts.setdefault(r["remedy"], facts_from_row(r))
        by_cause = causes.setdefault(r["remedy"], {})
        by_cause[r["cause"]] = max(by_cause.get(r["cause"], 0.0), float(r["confidence"]))
    return facts, causes


def suggest(store: Store, run_id: str, *, weights: Mapping[str, float] | None = None,
            max_risk: str | int | None = None, max_cost: float | None = None,
            max_experiments: int | None = None, limit: int | None = None) -> list[Suggestion]:
    """Remedies for a run's hypothesised causes, best first (see the module docstring for the score).

    ``weights`` maps effectiveness/cost/risk to weights (unnamed criteria weigh 0; None = the knowledge
    base defaults). ``max_risk`` (low/medium/high), ``max_cost`` (card-hours) and ``max_experiments``
    filter. Each suggestion lists the cases it rests on: cases whose confirmed cause is one of the
    hypothesised causes the remedy addresses and whose applied remedy is this one, most similar first.
    """
    _check_limits(max_cost, max_experiments, limit)
    settings = load_settings(store)
    w = settings.weights if weights is None else check_weights(dict(weights))
    require_run(store, run_id)
    rows = store.select(suggestion_sparql(store, run_id, max_risk=max_risk, max_cost=max_cost,
                                         max_experiments=max_experiments)).dicts()
    facts, causes = _candidates(rows)
    ranked = sorted(((min(1.0, sum(causes[k].values())) * f.base_score(w, settings) * f.success_rate(settings), k)
                     for k, f in facts.items()), key=lambda x: (-x[0], local_name(x[1])))
    if limit is not None:
        ranked = ranked[:limit]
    return _build(store, settings, run_id, ranked, facts, causes)


def _build(store: Store, settings: SuggestSettings, run_id: str, ranked: list[tuple[float, str]],
           facts: dict[str, RemedyFacts], causes: dict[str, dict[str, float]]) -> list[Suggestion]:
    if not ranked:
        return []
    iris = [k for _, k in ranked]
    params, changes = tuning_parameters(store, iris), config_changes(store, iris)
    labels = {k: f.label for k, f in remedy_facts(store, iris).items()}
    all_causes = {c for k in iris for c in causes[k]}
    signature = run_signature(store, run_id, check=False)
    by_remedy: dict[str, list[tuple[float, StoredCase]]] = {}
    for c in stored_cases(store, all_causes):
        for remedy in c.remedies:
            by_remedy.setdefault(remedy, []).append((normalised_similarity(signature, c.signature), c))
    out = []
    for score, k in ranked:
        f, addressed = facts[k], {local_name(c) for c in causes[k]}
        rests_on = sorted(((s, c.case) for s, c in by_remedy.get(local_name(k), ()) if c.cause in addressed),
                          key=lambda x: (-x[0], x[1]))
        out.append(Suggestion(
            remedy=local_name(k), score=score, effectiveness=f.effectiveness, cost=f.cost, risk=f.risk,
            success_rate=f.success_rate(settings), addresses=tuple(sorted(addressed)),
            parameters=params.get(k, ()), config_changes=changes.get(k, ()),
            cases=tuple(c for _, c in rests_on), label=labels.get(k, f.label)))
    return out


def remedy_details(store: Store, remedy_id: str) -> Suggestion:
    """Everything about one remedy as a `Suggestion` not tied to a run.

    ``score`` is the knowledge-base-weighted base score × success rate (relevance 1), ``addresses``
    every cause it addresses, ``parameters`` its tuning parameters (the tuning search space),
    ``config_changes`` its configuration changes, ``cases`` every case that applied it (by IRI).
    """
    settings = load_settings(store)
    f = require_remedy(store, remedy_id)
    cases = tuple(c.case for c in stored_cases(store) if local_name(f.iri) in c.remedies)
    return Suggestion(
        remedy=local_name(f.iri), score=f.base_score(settings.weights, settings) * f.success_rate(settings),
        effectiveness=f.effectiveness, cost=f.cost, risk=f.risk, success_rate=f.success_rate(settings),
        addresses=f.addresses, parameters=tuning_parameters(store, [f.iri]).get(f.iri, ()),
        config_changes=config_changes(store, [f.iri]).get(f.iri, ()), cases=cases, label=f.label)


__all__ = ["remedy_details", "risk_rank", "suggest", "suggestion_sparql"]
