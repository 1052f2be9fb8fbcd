"""SHACL check of a package's triples (crate metadata + case graph) against `ontology/shapes.ttl`.

A package is checked on its own triples together with the ontology and the knowledge base, never
with other packages (another package typing a node must not excuse this one's violations). A
package refers to knowledge-base items (``kb:GateInitBias``, ``dt:ExpertLocation``) without
describing them, so ``sh:class`` constraints need their types: the types the ontology and knowledge
base graphs give every IRI the package mentions are added to the data graph. Violations are
reported for every node but the ontology's and knowledge base's own items: those are checked by
``cann-debug kb check``, and what a package says about them is the business of the clash check
(`package_clash`). A node another package typed is the package's own here.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyoxigraph as ox

from debugtune.kg.namespaces import GRAPH_KB, GRAPH_ONTOLOGY, RDF
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store
from debugtune.kg.validate import Violation, to_rdflib, validate_graph

_TYPE = ox.NamedNode(RDF + "type")
_BATCH = 400


def _mentioned(triples: Sequence[ox.Triple]) -> set[str]:
    return ({t.subject.value for t in triples if isinstance(t.subject, ox.NamedNode)}
            | {t.object.value for t in triples if isinstance(t.object, ox.NamedNode)})


_KNOWLEDGE = f"VALUES ?g {{ {iri(GRAPH_ONTOLOGY)} {iri(GRAPH_KB)} }}"


def _types(store: Store, iris: Sequence[str]) -> list[ox.Triple]:
    """The rdf:type triples the ontology and knowledge base graphs hold for ``iris``."""
    out: list[ox.Triple] = []
    for i in range(0, len(iris), _BATCH):
        values = " ".join(iri(x) for x in iris[i:i + _BATCH])
        result = store.select(f"SELECT DISTINCT ?s ?t WHERE {{ VALUES ?s {{ {values} }} {_KNOWLEDGE} "
                             "GRAPH ?g { ?s a ?t } }", prefixes=False)
        out += [ox.Triple(s, _TYPE, t) for s, t in result.rows
                if isinstance(s, ox.NamedNode | ox.BlankNode) and isinstance(t, ox.NamedNode)]
    return out


def validate_package_triples(store: Store, triples: Sequence[ox.Triple]) -> list[Violation]:
    """SHACL violations of the package (see the module docstring; [] when the package conforms)."""
    types = _types(store, sorted(_mentioned(triples)))
    known = {t.subject.value for t in types if not isinstance(t.subject, ox.Triple)}
    return [v for v in validate_graph(to_rdflib([*triples, *types])) if v.focus not in known]


def describe(violations: Sequence[Violation], limit: int = 8) -> str:
    """A short multi-line account of violations for an error message."""
    lines = [f"  - {v.focus}{' ' + v.path if v.path else ''}: {v.message}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)
