"""Loading the ontology and the knowledge base (`cases/`) into their named graphs, and reading them.

Every Turtle file is parsed before anything is written, so a syntax error in any file names the
file and line and leaves the store as it was. A content hash kept in the store skips reloading an
unchanged knowledge base (the on-disk store keeps it between commands); a changed one is loaded from its
compiled snapshot (kg/snapshot.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox

from debugtune import cases, ontology
from debugtune.kg.errors import KgError
from debugtune.kg.namespaces import DT, GRAPH_KB, GRAPH_ONTOLOGY
from debugtune.kg.store import Store, parse_rdf, rdf_format


@dataclass(frozen=True)
class KnowledgeSource:
    """The files that make up one named graph."""

    graph: str
    files: tuple[Path, ...]

    def digest(self) -> str:
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        return h.hexdigest()


def default_sources() -> list[KnowledgeSource]:
    """The ontology graph and the knowledge-base graph shipped with the package."""
    return [
        KnowledgeSource(GRAPH_ONTOLOGY, (ontology.ONTOLOGY,)),
        KnowledgeSource(GRAPH_KB, tuple(cases.turtle_files())),
    ]


def parse_files(files: Sequence[Path]) -> list[ox.Triple | ox.Quad]:
    """Parse files (any RDF syntax by extension); the first syntax error names file, line and column."""
    out: list[ox.Triple | ox.Quad] = []
    for f in files:
        out.extend(parse_rdf(f.read_bytes(), rdf_format(f), str(f), f.resolve().as_uri()))
    return out


def load_knowledge(store: Store, *, force: bool = False,
                   sources: Sequence[KnowledgeSource] | None = None) -> dict[str, int]:
    """Load (or refresh) the ontology and knowledge base; returns triples loaded per graph (0 = unchanged)."""
    from debugtune.kg.snapshot import load_source

    loaded: dict[str, int] = {}
    for src in sources or default_sources():
        if not src.files:
            raise KgError(f"no files for graph {src.graph}")
        digest = src.digest()
        if not force and _stored_digest(store, src.graph) == digest:
            loaded[src.graph] = 0
            continue
        loaded[src.graph] = load_source(store, src, digest)  # from the compiled snapshot (kg/snapshot.py)
    return loaded


def is_current(store: Store, sources: Sequence[KnowledgeSource] | None = None) -> bool:
    """Whether the store already holds the ontology and knowledge base as shipped (nothing to load)."""
    return all(_stored_digest(store, src.graph) == src.digest() for src in sources or default_sources())


def _stored_digest(store: Store, graph: str) -> str | None:
    rows = store.select(
        f"SELECT ?h WHERE {{ GRAPH <{graph}> {{ <{graph}> <{DT}contentHash> ?h }} }}", prefixes=False)
    return rows.scalar()


def class_counts(store: Store) -> dict[str, int]:
    """Instances per dt: class over all graphs (knowledge items, findings, cases, ...)."""
    rows = store.select(f"""
        SELECT ?c (COUNT(DISTINCT ?x) AS ?n) WHERE {{
          GRAPH <{GRAPH_ONTOLOGY}> {{ ?c a <http://www.w3.org/2002/07/owl#Class> }}
          FILTER(STRSTARTS(STR(?c), "{DT}"))
          ?x a ?c .
        }} GROUP BY ?c ORDER BY ?c""", prefixes=False)
    return {r["c"][len(DT):]: r["n"] for r in rows.dicts()}


def thresholds(store: Store) -> dict[str, float]:
    """Every ``dt:Threshold`` as key → value (numbers as float)."""
    rows = store.select("""
        SELECT ?k ?v WHERE { ?t a dt:Threshold ; dt:thresholdKey ?k ; dt:value ?v }""")
    out: dict[str, float] = {}
    for r in rows.dicts():
        v = r["v"]
        if not isinstance(v, (int, float)):
            raise KgError(f"threshold {r['k']!r} has a non-numeric value {v!r}")
        out[r["k"]] = float(v)
    return out
