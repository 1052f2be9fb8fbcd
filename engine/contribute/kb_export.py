"""`cann-debug kb export`: the whole local knowledge base as one RO-Crate zip.

The crate holds ``knowledge-base.trig`` — the ontology, the knowledge base, the local graph
(feedback counts, learned rules) and every imported package graph, each as its own named graph —
plus ``privacy-report.json``. Run graphs (raw findings of this installation's runs) are not
exported. With privacy on (the default), string literals of the local and package graphs pass
through the scrubber (this machine's user and host names, secrets, paths, addresses): that is where
the names of whoever imported a package or gave feedback are. The ontology and knowledge base are
public project data and are exported as they are. The export is a backup and a way to share a
knowledge base with another store (``oxigraph load``, or any TriG reader); it is not a case package.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from debugtune.engine.contribute.scrub import Scrubber, local_identity
from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.kg.namespaces import GRAPH_KB, GRAPH_LOCAL, GRAPH_ONTOLOGY, PREFIXES
from debugtune.kg.package_archive import METADATA, archive_bytes, content_hash
from debugtune.kg.package_clash import PACKAGE_GRAPH_PREFIX
from debugtune.kg.package_crate import Part, crate_metadata, metadata_bytes, read_crate
from debugtune.kg.store import Store

TRIG = "knowledge-base.trig"
_PLAIN = {"http://www.w3.org/2001/XMLSchema#string", "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"}


@dataclass(frozen=True)
class ExportResult:
    """The export written: path, triples per graph, content hash."""

    path: Path
    graphs: dict[str, int]
    content_hash: str
    privacy: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "graphs": self.graphs, "triples": sum(self.graphs.values()),
                "content_hash": self.content_hash, "privacy": {k: v for k, v in self.privacy.items() if k != "items"}}


def exported_graphs(store: Store) -> list[str]:
    """The graphs an export holds: ontology, knowledge base, local graph, imported packages."""
    present = set(store.graphs())
    fixed = [g for g in (GRAPH_ONTOLOGY, GRAPH_KB, GRAPH_LOCAL) if g in present]
    return fixed + sorted(g for g in present if g.startswith(PACKAGE_GRAPH_PREFIX))


def _scrubbed(t: ox.Triple, scrub: Scrubber, where: str) -> ox.Triple:
    o = t.object
    if not isinstance(o, ox.Literal) or o.datatype.value not in _PLAIN:
        return t
    text = scrub.text(o.value, where)
    if text == o.value:
        return t
    return ox.Triple(t.subject, t.predicate, ox.Literal(text, language=o.language) if o.language else ox.Literal(text))


def importers(store: Store) -> list[str]:
    """Names of the agents recorded as importing packages or giving feedback (they are this site's people)."""
    return store.select("""SELECT DISTINCT ?name WHERE { ?activity a prov:Activity ; prov:wasAssociatedWith ?who .
                          ?who skos:prefLabel ?name }""").column("name")


def export_knowledge(store: Store, out: str | os.PathLike[str], *, license_id: str = "CC-BY-SA-4.0",
                     attribution: str | None = None, privacy_safe: bool = True) -> ExportResult:
    """Write the knowledge base of ``store`` as an RO-Crate zip (see the module docstring)."""
    known = local_identity()
    known["user"] |= set(importers(store))
    scrub = Scrubber(known, enabled=privacy_safe)
    quads: list[ox.Quad] = []
    counts: dict[str, int] = {}
    for graph in exported_graphs(store):
        node = ox.NamedNode(graph)
        private = graph == GRAPH_LOCAL or graph.startswith(PACKAGE_GRAPH_PREFIX)
        where = "knowledge-base.trig: " + ("local graph" if graph == GRAPH_LOCAL else "package graph")
        triples = list(ox.parse(store.dump(graph, ox.RdfFormat.N_TRIPLES), format=ox.RdfFormat.N_TRIPLES))
        for t in triples:
            t = _scrubbed(t, scrub, where) if private else t
            quads.append(ox.Quad(t.subject, t.predicate, t.object, node))
        counts[graph] = len(triples)
    trig = ox.serialize(quads, format=ox.RdfFormat.TRIG, prefixes=dict(PREFIXES)) or b""
    author = scrub.text(attribution or "anonymous contributor", "ro-crate-metadata.json: attribution", keep=("user",))
    report = {**scrub.report(), "not_included": ["run graphs (findings, hypotheses, experiments of local runs)",
                                                 "the inferred graph (derived again by the rules)"]}
    parts = [Part(TRIG, trig, "The knowledge base: one named graph each for the ontology, the knowledge base, the "
                  "local graph and every imported case package."),
             Part("privacy-report.json", (json.dumps(report, indent=2, sort_keys=True) + "\n").encode(),
                  "What the privacy scrubber hashed or removed, and where.")]
    meta = crate_metadata(
        name="debugtune knowledge base export",
        description=f"{len(counts)} named graphs, {sum(counts.values())} triples: "
                    + ", ".join(f"{g} ({n})" for g, n in counts.items()),
        license_id=license_id, author=author, date_published=datetime.now(UTC).date().isoformat(), parts=parts,
        keywords=("debugtune", "knowledge base"))
    files = {METADATA: metadata_bytes(meta), **{p.name: p.data for p in parts}}
    read_crate(files[METADATA], "urn:debugtune:export:check/")
    path = Path(out)
    atomic_write_bytes(path, archive_bytes(files))
    return ExportResult(path, counts, content_hash(files), report)
