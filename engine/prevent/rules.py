"""Prevention rules and derivation rules as stored in the graph (``cases/prevention/*.ttl`` and the
local graph of learned rules), read into plain records."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from debugtune.engine.prevent.vocab import ANY, Version, in_range
from debugtune.kg.namespaces import DCT, DT, KB, SKOS
from debugtune.kg.results import to_python
from debugtune.kg.store import Store


@dataclass(frozen=True)
class PreventionRule:
    """A pre-launch check: its condition is a SPARQL SELECT or ASK over a config graph."""

    iri: str
    rule_id: str
    severity: str
    message: str
    fix: str
    framework: str
    query: str
    label: str = ""
    error_class: str = ""
    min_version: str | None = None
    max_version: str | None = None
    sources: tuple[str, ...] = ()
    prevents: tuple[str, ...] = ()
    learned_from: str | None = None
    violating: tuple[str, ...] = ()
    passing: tuple[str, ...] = ()

    def applies(self, framework: str, version: Version | None) -> bool:
        """Whether the rule checks configurations of ``framework`` at ``version`` (None: the newest)."""
        return self.framework in (framework, ANY) and in_range(version, self.min_version, self.max_version)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.rule_id, "severity": self.severity, "framework": self.framework, "label": self.label,
                "error_class": self.error_class, "message": self.message, "fix": self.fix,
                "min_version": self.min_version, "max_version": self.max_version, "sources": list(self.sources),
                "prevents": list(self.prevents), "learned_from": self.learned_from, "condition": self.query}


@dataclass(frozen=True)
class DerivationRule:
    iri: str
    framework: str
    position: int
    update: str
    label: str = ""
    derives: tuple[str, ...] = ()
    """The keys it adds, when its INSERT template does not name them (``dt:derivesKey``)."""


def _by_subject(store: Store, cls: str) -> dict[str, dict[str, list[Any]]]:
    rows = store.select(f"SELECT ?s ?p ?o WHERE {{ ?s a {cls} ; ?p ?o }}")
    out: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for s, p, o in rows.rows:
        values = out[to_python(s)][to_python(p)]
        v = to_python(o)
        if v not in values:
            values.append(v)
    return out


def load_rules(store: Store) -> list[PreventionRule]:
    """Every prevention rule of the store (all graphs), sorted by id."""
    out = []
    for iri, p in _by_subject(store, "dt:PreventionRule").items():
        def one(name: str, ns: str = DT, p: dict[str, list[Any]] = p) -> Any:
            values = p.get(ns + name)
            return str(values[0]) if values else None

        if not (one("ruleId") and one("askQuery")):
            continue
        out.append(PreventionRule(
            iri=iri, rule_id=one("ruleId"), severity=one("ruleSeverity") or "error", message=one("message") or "",
            fix=one("fix") or "", framework=one("framework") or ANY, query=one("askQuery"),
            label=one("prefLabel", SKOS) or "", error_class=one("errorClass") or "",
            min_version=one("minVersion"), max_version=one("maxVersion"),
            sources=tuple(sorted(map(str, p.get(DCT + "source", [])))),
            prevents=tuple(sorted(str(c)[len(KB):] if str(c).startswith(KB) else str(c)
                                  for c in p.get(DT + "preventsCause", []))),
            learned_from=one("learnedFrom"),
            violating=tuple(map(str, p.get(DT + "exampleViolating", []))),
            passing=tuple(map(str, p.get(DT + "examplePassing", [])))))
    return sorted(out, key=lambda r: r.rule_id)


def load_derivations(store: Store) -> list[DerivationRule]:
    """Every derivation rule, in position order."""
    out = []
    for iri, p in _by_subject(store, "dt:DerivationRule").items():
        update = p.get(DT + "updateQuery")
        if not update:
            continue
        out.append(DerivationRule(iri=iri, framework=str((p.get(DT + "framework") or [ANY])[0]),
                                  position=int((p.get(DT + "position") or [0])[0]), update=str(update[0]),
                                  label=str((p.get(SKOS + "prefLabel") or [""])[0]),
                                  derives=tuple(sorted(map(str, p.get(DT + "derivesKey", []))))))
    return sorted(out, key=lambda d: (d.position, d.iri))
