"""Clashes between a package and the local knowledge: statements about identifiers the package does not own.

An identifier belongs to the knowledge already in the store when it is a subject in the ontology,
the knowledge base or the local graph, or a debugtune identifier (``https://w3id.org/debugtune...``)
that an imported package describes (run graphs do not count); every identifier in the ontology
namespace belongs to the ontology. A package may refer to such
identifiers freely, and may repeat what is already said about them, but a statement that is not
already there (another label or definition, new numbers for a remedy) is a clash. Success and failure
counts of an identifier it does not own are always a clash: they are summed over graphs, so even a
repeated count would be counted twice (counts are recorded by `cann-tune feedback`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyoxigraph as ox

from debugtune.kg.namespaces import DT, GRAPH_KB, GRAPH_LOCAL, GRAPH_ONTOLOGY, PREFIXES
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

PACKAGE_GRAPH_PREFIX = "urn:debugtune:package:"
_OURS = "https://w3id.org/debugtune"
_COUNTS = {DT + "successCount", DT + "failureCount"}
_BATCH = 300


@dataclass(frozen=True)
class Clash:
    """One subject and property where the package says something the store's knowledge does not."""

    subject: str
    predicate: str
    package_values: tuple[str, ...]
    existing_values: tuple[str, ...]
    graphs: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"subject": self.subject, "predicate": self.predicate, "package": list(self.package_values),
                "existing": list(self.existing_values), "graphs": list(self.graphs)}

    def __str__(self) -> str:
        had = ", ".join(self.existing_values) or "nothing"
        return (f"{short(self.subject)} {short(self.predicate)}: the package says {', '.join(self.package_values)}; "
                f"the knowledge base ({', '.join(short(g) for g in self.graphs) or 'ontology namespace'}) says {had}")


def short(value: str) -> str:
    """An IRI with a known prefix (``kb:GateInitBias``); other text unchanged."""
    for prefix, ns in PREFIXES.items():
        if value.startswith(ns) and len(value) > len(ns):
            return f"{prefix}:{value[len(ns):]}"
    return value


def _text(term: ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple) -> str:
    return short(term.value) if isinstance(term, ox.NamedNode) else str(term)


Statement = tuple[ox.NamedNode, ox.NamedNode | ox.BlankNode | ox.Literal, str]


def _existing(store: Store, subjects: Sequence[str]) -> dict[str, list[Statement]]:
    """(predicate, object, graph) of the statements about ``subjects`` in the knowledge graphs, by subject."""
    out: dict[str, list[Statement]] = {}
    graphs = ", ".join(iri(g) for g in (GRAPH_ONTOLOGY, GRAPH_KB, GRAPH_LOCAL))
    for i in range(0, len(subjects), _BATCH):
        values = " ".join(iri(s) for s in subjects[i:i + _BATCH])
        rows = store.select(f"""SELECT ?s ?p ?o ?g WHERE {{ VALUES ?s {{ {values} }} GRAPH ?g {{ ?s ?p ?o }}
            FILTER(?g IN ({graphs}) || (STRSTARTS(STR(?g), {literal(PACKAGE_GRAPH_PREFIX)})
                                        && STRSTARTS(STR(?s), {literal(_OURS)}))) }}""", prefixes=False)
        for s, p, o, g in rows.rows:  # the pattern binds IRIs to ?s ?p ?g; a quoted triple as ?o is not compared
            if isinstance(s, ox.NamedNode) and isinstance(p, ox.NamedNode) and isinstance(g, ox.NamedNode) \
                    and isinstance(o, ox.NamedNode | ox.BlankNode | ox.Literal):
                out.setdefault(s.value, []).append((p, o, g.value))
    return out


def find_clashes(store: Store, triples: Sequence[ox.Triple]) -> list[Clash]:
    """Clashes of a package's triples with the store's knowledge (see the module docstring), sorted."""
    subjects = sorted({t.subject.value for t in triples if isinstance(t.subject, ox.NamedNode)})
    existing = _existing(store, subjects)
    said: dict[tuple[str, str], set[ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple]] = {}
    for t in triples:
        if isinstance(t.subject, ox.NamedNode):
            said.setdefault((t.subject.value, t.predicate.value), set()).add(t.object)
    clashes = []
    for (s, p), objects in sorted(said.items()):
        known = existing.get(s)
        if known is None and not s.startswith(DT):
            continue
        there = {(o, g) for pp, o, g in known or () if pp.value == p}
        new = objects - {o for o, _ in there}
        if new or (p in _COUNTS and known):
            clashes.append(Clash(s, p, tuple(sorted(_text(o) for o in objects)),
                                 tuple(sorted({_text(o) for o, _ in there})),
                                 tuple(sorted({g for _, g in there} or {g for _, _, g in known or ()}))))
    return clashes
