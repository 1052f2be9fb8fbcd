"""SHACL validation (pyshacl) of the knowledge base, of case packages and of any RDF graph."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import pyoxigraph as ox
import rdflib
from pyshacl import validate as shacl_validate

from debugtune import ontology
from debugtune.kg.namespaces import GRAPH_KB, GRAPH_ONTOLOGY, SH
from debugtune.kg.store import Store

_SH = rdflib.Namespace(SH)


@dataclass(frozen=True)
class Violation:
    """One SHACL result: the item, the property path, the message and the shape that failed."""

    focus: str
    path: str | None
    message: str
    severity: str
    shape: str
    value: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"focus": self.focus, "path": self.path, "message": self.message,
                "severity": self.severity, "shape": self.shape, "value": self.value}


def shapes_graph() -> rdflib.Graph:
    """The project's SHACL shapes."""
    return rdflib.Graph().parse(ontology.SHAPES, format="turtle")


def to_rdflib(triples: Iterable[ox.Triple | ox.Quad]) -> rdflib.Graph:
    """An rdflib graph of pyoxigraph triples (via N-Triples, which both sides read exactly)."""
    plain = [ox.Triple(t.subject, t.predicate, t.object) if isinstance(t, ox.Quad) else t for t in triples]
    data = ox.serialize(plain, format=ox.RdfFormat.N_TRIPLES) or b""
    return rdflib.Graph().parse(data=data.decode("utf-8"), format="nt")


def validate_graph(data: rdflib.Graph, *, with_ontology: bool = True) -> list[Violation]:
    """Check ``data`` (plus the ontology's class hierarchy) against the shapes; [] when it conforms."""
    if with_ontology:
        data = data + rdflib.Graph().parse(ontology.ONTOLOGY, format="turtle")
    _, report, _ = shacl_validate(data, shacl_graph=shapes_graph(), inference="none",
                                  advanced=True, allow_warnings=True)
    return _violations(report)


def validate_store(store: Store, graphs: Sequence[str] = (GRAPH_ONTOLOGY, GRAPH_KB),
                   progress: Callable[[str], None] | None = None) -> list[Violation]:
    """Validate the union of named graphs of a store (default: ontology and knowledge base); ``progress``
    hears each stage as it starts (pyshacl itself reports nothing until it is done)."""
    g = rdflib.Graph()
    for name in graphs:
        if progress:
            progress(f"reading {name.rsplit('/', 1)[-1]} for pyshacl")
        g.parse(data=store.dump(name, ox.RdfFormat.N_TRIPLES).decode("utf-8"), format="nt")
    if progress:
        progress(f"validating {len(g):,} triples against ontology/shapes.ttl (pyshacl)")
    return validate_graph(g, with_ontology=GRAPH_ONTOLOGY not in graphs)


def _violations(report: rdflib.Graph) -> list[Violation]:
    out = []
    for r in report.subjects(rdflib.RDF.type, _SH.ValidationResult):
        def one(p: rdflib.URIRef, r: rdflib.term.Node = r) -> str | None:
            v = report.value(r, p)
            return None if v is None else str(v)
        severity = one(_SH.resultSeverity) or ""
        out.append(Violation(
            focus=one(_SH.focusNode) or "", path=one(_SH.resultPath),
            message=one(_SH.resultMessage) or "", severity=severity.rsplit("#", 1)[-1],
            shape=one(_SH.sourceShape) or "", value=one(_SH.value)))
    return sorted(out, key=lambda v: (v.focus, v.path or "", v.message))
