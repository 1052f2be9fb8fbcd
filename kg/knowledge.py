"""Loading the ontology and the knowledge base (`cases/`) into their named graphs, and reading them.

Every Turtle file is parsed before anything is written, so a syntax error in any file names the
file and line and leaves the store as it was. A content hash kept in the store skips reloading an
unchanged knowledge base (the on-disk store keeps it between commands); a changed one is loaded from its
compiled snapshot (kg/snapshot.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyoxigraph as ox

from debugtune import cases, ontology
from debugtune.kg.errors import KgError, MissingThresholdError
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
    found = rows.scalar()
    return found if isinstance(found, str) else None


def class_counts(store: Store) -> dict[str, int]:
    """Instances per dt: class over all graphs (knowledge items, findings, cases, ...)."""
    rows = store.select(f"""
        SELECT ?c (COUNT(DISTINCT ?x) AS ?n) WHERE {{
          GRAPH <{GRAPH_ONTOLOGY}> {{ ?c a <http://www.w3.org/2002/07/owl#Class> }}
          FILTER(STRSTARTS(STR(?c), "{DT}"))
          ?x a ?c .
        }} GROUP BY ?c ORDER BY ?c""", prefixes=False)
    return {r["c"][len(DT):]: r["n"] for r in rows.dicts()}


class Thresholds(Mapping[str, float]):
    """The knowledge base's ``dt:Threshold`` values, key → number: the one way code reads them.

    ``th[key]`` and ``th.require(*keys)`` raise `MissingThresholdError` naming every missing key; ``th.get(key)``
    is for a knob that is optional by design (a feature off without it) and takes no default, so a Python
    fallback for a knowledge-base value cannot be written.
    """

    def __init__(self, values: Mapping[str, float]):
        self._values = dict(values)

    @classmethod
    def from_store(cls, store: Store) -> Thresholds:
        return thresholds(store)

    def __getitem__(self, key: str) -> float:
        try:
            return self._values[key]
        except KeyError:
            raise MissingThresholdError(key) from None

    def __contains__(self, key: object) -> bool:  # not through __getitem__: a missing key is no error here
        return key in self._values

    def get(self, key: str) -> float | None:  # type: ignore[override]  # no default: see the class docstring
        return self._values.get(key)

    def require(self, *keys: str) -> dict[str, float]:
        """The values of ``keys``; one error naming all those the knowledge base lacks."""
        missing = [k for k in keys if k not in self._values]
        if missing:
            raise MissingThresholdError(*missing)
        return {k: self._values[k] for k in keys}

    def as_int(self, key: str) -> int:
        """A count or window (steps, samples) stored as a number."""
        return int(round(self[key]))

    def prefixed(self, prefix: str) -> dict[str, float]:
        """Every threshold whose key starts with ``prefix``, keyed by the rest of the key."""
        return {k[len(prefix):]: v for k, v in self._values.items() if k.startswith(prefix)}

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Thresholds({len(self._values)} keys)"


def thresholds(store: Store) -> Thresholds:
    """Every ``dt:Threshold`` of the store as key → value (numbers as float)."""
    rows = store.select("""
        SELECT ?k ?v WHERE { ?t a dt:Threshold ; dt:thresholdKey ?k ; dt:value ?v }""")
    out: dict[str, float] = {}
    for r in rows.dicts():
        v = r["v"]
        if not isinstance(v, (int, float)):
            raise KgError(f"threshold {r['k']!r} has a non-numeric value {v!r}")
        out[r["k"]] = float(v)
    return Thresholds(out)
