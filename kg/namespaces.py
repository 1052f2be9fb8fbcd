"""IRIs of the vocabulary, the knowledge base, the named graphs and run data."""

from __future__ import annotations

import re

DT = "https://w3id.org/debugtune#"
KB = "https://w3id.org/debugtune/kb/"
SOSA = "http://www.w3.org/ns/sosa/"
PROV = "http://www.w3.org/ns/prov#"
MLS = "http://www.w3.org/ns/mls#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
DCT = "http://purl.org/dc/terms/"
RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
XSD = "http://www.w3.org/2001/XMLSchema#"
OWL = "http://www.w3.org/2002/07/owl#"
SH = "http://www.w3.org/ns/shacl#"
QUDT = "http://qudt.org/schema/qudt/"
SCHEMA = "http://schema.org/"

PREFIXES = {
    "dt": DT, "kb": KB, "sosa": SOSA, "prov": PROV, "mls": MLS, "skos": SKOS, "dct": DCT,
    "rdf": RDF, "rdfs": RDFS, "xsd": XSD, "owl": OWL, "sh": SH, "qudt": QUDT, "schema": SCHEMA,
}

#: A block of PREFIX lines for generated SPARQL.
SPARQL_PREFIXES = "".join(f"PREFIX {p}: <{iri}>\n" for p, iri in PREFIXES.items())

GRAPH_ONTOLOGY = "https://w3id.org/debugtune/graph/ontology"
GRAPH_KB = "https://w3id.org/debugtune/graph/kb"
GRAPH_INFERRED = "https://w3id.org/debugtune/graph/inferred"
GRAPH_LOCAL = "https://w3id.org/debugtune/graph/local"
"""Knowledge learned on this installation (feedback counts, learned prevention rules)."""

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str) -> str:
    """Return ``run_id`` if it is a safe identifier (letters, digits, ``.``, ``_``, ``-``)."""
    if not _RUN_ID.match(run_id or ""):
        raise ValueError(
            f"invalid run id {run_id!r}: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return run_id


def run_base(run_id: str) -> str:
    """Base IRI of a run's data, ``urn:debugtune:run:<id>/``; it is also the run's named graph."""
    return f"urn:debugtune:run:{check_run_id(run_id)}/"


def run_graph(run_id: str) -> str:
    """Named graph holding one run's findings, hypotheses and experiments."""
    return run_base(run_id)


def run_id_of_graph(graph: str) -> str | None:
    """The run id of a run graph IRI, or None for other graphs."""
    prefix = "urn:debugtune:run:"
    if graph.startswith(prefix) and graph.endswith("/"):
        return graph[len(prefix):-1]
    return None


def package_graph(content_hash: str) -> str:
    """Named graph of an imported case package, keyed by its content hash."""
    return f"urn:debugtune:package:{content_hash}"


def dt(local: str) -> str:
    """Full IRI of an ontology term."""
    return DT + local


def kb(local: str) -> str:
    """Full IRI of a knowledge-base individual (cause, symptom, remedy, ...)."""
    return KB + local


def local_name(iri: str) -> str:
    """The local name after the last ``#`` or ``/``."""
    cut = max(iri.rfind("#"), iri.rfind("/"))
    return iri[cut + 1:]
