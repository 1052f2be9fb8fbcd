"""Remedies as the graph describes them: numbers, risk, success counts, tuning parameters, config changes."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from debugtune.engine.suggest.errors import SuggestError, unknown
from debugtune.engine.suggest.queries import config_sparql, known_sparql, parameters_sparql, remedy_sparql
from debugtune.engine.suggest.settings import SuggestSettings
from debugtune.kg.namespaces import KB, local_name
from debugtune.kg.records import ConfigChange, TuningParameter
from debugtune.kg.store import Store


@dataclass(frozen=True)
class RemedyFacts:
    """The numbers of one remedy that the ranking reads."""

    iri: str
    label: str
    effectiveness: float
    cost: float
    risk: str
    risk_rank: int
    max_risk_rank: int
    max_experiments: int | None
    successes: int
    failures: int
    addresses: tuple[str, ...] = ()

    def success_rate(self, settings: SuggestSettings) -> float:
        """Beta posterior mean (α0 + s) / (α0 + β0 + s + f)."""
        return (settings.alpha + self.successes) / (settings.alpha + settings.beta + self.successes + self.failures)

    def cost_score(self, settings: SuggestSettings) -> float:
        """h / (h + cost): 1 for a free remedy, 0.5 at h card-hours, towards 0 as cost grows."""
        return settings.half_cost / (settings.half_cost + max(0.0, self.cost))

    def risk_score(self) -> float:
        """(max_rank − rank) / (max_rank − 1): 1 for the lowest risk level, 0 for the highest."""
        if self.max_risk_rank <= 1:
            return 1.0
        return min(1.0, max(0.0, (self.max_risk_rank - self.risk_rank) / (self.max_risk_rank - 1)))

    def base_score(self, weights: dict[str, float], settings: SuggestSettings) -> float:
        """Weighted mean of effectiveness, cost score and risk score (weights normalised to sum 1)."""
        parts = {"effectiveness": self.effectiveness, "cost": self.cost_score(settings), "risk": self.risk_score()}
        return sum(weights[k] * parts[k] for k in parts) / sum(weights.values())


def remedy_iri(remedy: str) -> str:
    """A remedy's IRI from its local name (``RouterInitRescale``) or a full IRI."""
    return remedy if ":" in remedy else KB + remedy


def _int(x: Any) -> int:
    return int(x) if x is not None else 0


def facts_from_row(r: dict[str, Any]) -> RemedyFacts:
    """A RemedyFacts from a row of `remedy_sparql` or `candidate_sparql`."""
    return RemedyFacts(
        iri=r["remedy"], label=r.get("label") or local_name(r["remedy"]), effectiveness=float(r["effectiveness"]),
        cost=float(r["cost"]), risk=str(r["risk"]), risk_rank=_int(r["riskRank"]),
        max_risk_rank=_int(r["maxRiskRank"]) or _int(r["riskRank"]),
        max_experiments=None if r["maxExperiments"] is None else int(r["maxExperiments"]),
        successes=_int(r["successes"]), failures=_int(r["failures"]))


def remedy_facts(store: Store, remedies: Iterable[str]) -> dict[str, RemedyFacts]:
    """Facts of the given remedies (IRIs) keyed by IRI; remedies missing a number are left out."""
    iris = sorted(set(remedies))
    if not iris:
        return {}
    out: dict[str, RemedyFacts] = {}
    causes: dict[str, set[str]] = {}
    for r in store.select(remedy_sparql(iris)).dicts():
        out.setdefault(r["remedy"], facts_from_row(r))
        if r["cause"]:
            causes.setdefault(r["remedy"], set()).add(local_name(r["cause"]))
    return {k: replace(v, addresses=tuple(sorted(causes.get(k, ())))) for k, v in out.items()}


def tuning_parameters(store: Store, remedies: Iterable[str]) -> dict[str, tuple[TuningParameter, ...]]:
    """The tuning parameters of the given remedies (IRIs), by remedy IRI, each sorted by name."""
    iris = sorted(set(remedies))
    if not iris:
        return {}
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for r in store.select(parameters_sparql(iris)).dicts():
        p = acc.setdefault((r["remedy"], r["name"]), {**r, "choices": set()})
        if r["choice"] is not None:
            p["choices"].add(str(r["choice"]))
    out: dict[str, list[TuningParameter]] = {}
    for (remedy, name), p in sorted(acc.items()):
        out.setdefault(remedy, []).append(TuningParameter(
            name=name, kind=p["kind"], default=p["default"],
            low=None if p["low"] is None else float(p["low"]), high=None if p["high"] is None else float(p["high"]),
            scale=p["scale"] or "linear", choices=tuple(sorted(p["choices"]))))
    return {k: tuple(v) for k, v in out.items()}


def config_changes(store: Store, remedies: Iterable[str]) -> dict[str, tuple[ConfigChange, ...]]:
    """The configuration changes of the given remedies (IRIs), by remedy IRI, sorted by key."""
    iris = sorted(set(remedies))
    if not iris:
        return {}
    out: dict[str, set[ConfigChange]] = {}
    for r in store.select(config_sparql(iris)).dicts():
        change = ConfigChange(key=str(r["key"]), to_value=str(r["to"]),
                              from_value=None if r["from"] is None else str(r["from"]))
        out.setdefault(r["remedy"], set()).add(change)
    return {k: tuple(sorted(v, key=lambda c: (c.key, c.to_value))) for k, v in out.items()}


def require_remedy(store: Store, remedy: str) -> RemedyFacts:
    """The facts of one remedy; an unknown remedy raises SuggestError with the closest names."""
    iri = remedy_iri(remedy)
    facts = remedy_facts(store, [iri]).get(iri)
    if facts is None:
        known = [local_name(x) for x in store.select(known_sparql("Remedy")).column("x")]
        raise SuggestError(unknown("remedy", remedy, known))
    return facts
