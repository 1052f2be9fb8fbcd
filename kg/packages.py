"""Case packages in the store: checking a package, importing it into its own named graph, listing imports.

A package (RO-Crate zip, docs/contribute.md) is imported in one atomic write into the named graph
``urn:debugtune:package:<content hash>`` (`namespaces.package_graph`): its crate metadata, its case
graph(s), and provenance on the crate's root (a ``dt:CasePackage``): the content hash, who imported
it and when, its licence and attribution. Before anything is written the archive passes
`package_archive.read_archive`, the crate structure `package_crate.read_crate`, the SHACL shapes
(`package_validate`) and the clash check (`package_clash`); any refusal raises `PackageError` and
leaves the store as it was. A case is imported once: the same archive, or another archive with the
same case graph (`case_graph_hash`: its RDF parts with blank nodes and the package base neutralised,
so re-serialised metadata does not make a new case), is reported as already imported; a package
whose case IRI another graph already holds as a case is refused. Nothing in a package is ever
executed here.
"""

from __future__ import annotations

import getpass
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

import pyoxigraph as ox

from debugtune.kg.errors import RdfSyntaxError
from debugtune.kg.input_errors import reading
from debugtune.kg.namespaces import DCT, DT, PROV, RDF, SCHEMA, SKOS, XSD, package_graph
from debugtune.kg.package_archive import METADATA, SANDBOX_DIR, ArchiveLimits, PackageError, content_hash, read_archive
from debugtune.kg.package_clash import Clash, find_clashes
from debugtune.kg.package_crate import RDF_FORMATS, CrateInfo, media_type, read_crate
from debugtune.kg.package_validate import describe, validate_package_triples
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store, parse_rdf

_RDF_OX = {".ttl": ox.RdfFormat.TURTLE, ".trig": ox.RdfFormat.TRIG}


@dataclass(frozen=True)
class ImportResult:
    """What an import did (or found already done)."""

    content_hash: str
    graph: str
    root: str
    cases: tuple[str, ...]
    triples: int
    already_imported: bool
    clashes: tuple[Clash, ...] = ()
    licenses: tuple[str, ...] = ()
    authors: tuple[str, ...] = ()
    has_sandbox: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"content_hash": self.content_hash, "graph": self.graph, "root": self.root, "cases": list(self.cases),
                "triples": self.triples, "already_imported": self.already_imported,
                "clashes": [c.as_dict() for c in self.clashes], "licenses": list(self.licenses),
                "authors": list(self.authors), "has_sandbox": self.has_sandbox}


def base_iri(digest: str) -> str:
    """The base IRI a package's relative identifiers resolve against (its root is this IRI)."""
    return package_graph(digest) + "/"


def _case_triples(files: Mapping[str, bytes], crate: CrateInfo, base: str, source: str) -> list[ox.Triple]:
    out: list[ox.Triple] = []
    for name in sorted(crate.parts):
        suffix = PurePosixPath(name).suffix.lower()
        if suffix in _RDF_OX:
            parsed = parse_rdf(files[name], _RDF_OX[suffix], f"{source}:{name}", base + name)
            out += [ox.Triple(t.subject, t.predicate, t.object) for t in parsed]
    return out


_CANONICAL_BASE = base_iri("canonical")


def _term_key(term: Any, bnodes: Mapping[str, str]) -> str:
    if isinstance(term, ox.BlankNode):
        return bnodes.get(term.value, "_:b")
    if isinstance(term, ox.Triple):
        return "<<" + " ".join(_term_key(x, bnodes) for x in (term.subject, term.predicate, term.object)) + ">>"
    return str(term)


def case_graph_hash(triples: Sequence[ox.Triple]) -> str:
    """sha256 of a case graph that does not depend on blank-node labels or on how its files were serialised.

    Each blank node is named by the hash of what it says (its outgoing triples, blank objects as a
    placeholder), then the sorted N-Triples lines are hashed: linear, unlike full RDF canonicalisation.
    """
    out: dict[str, list[str]] = {}
    for t in triples:
        if isinstance(t.subject, ox.BlankNode):
            out.setdefault(t.subject.value, []).append(f"{t.predicate} {_term_key(t.object, {})}")
    names = {b: "_:" + hashlib.sha256("\n".join(sorted(lines)).encode()).hexdigest()[:32] for b, lines in out.items()}
    lines = sorted({" ".join(_term_key(x, names) for x in (t.subject, t.predicate, t.object)) for t in triples})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def case_graph_node(digest: str) -> ox.NamedNode:
    """The node a package's root names (``dct:hasPart``) for the case graph it holds."""
    return ox.NamedNode(f"urn:debugtune:case-graph:{digest}")


def package_triples(files: Mapping[str, bytes], base: str, source: str) -> tuple[CrateInfo, list[ox.Triple]]:
    """The crate summary and all triples (metadata + RDF parts) of a package, after the structural checks."""
    crate = read_crate(files[METADATA], base, f"{source}:{METADATA}")
    types = {t.object for t in crate.triples if isinstance(t.subject, ox.NamedNode) and t.subject.value == crate.root
             and t.predicate.value == RDF + "type"}
    if ox.NamedNode(DT + "CasePackage") not in types:
        raise PackageError(source, "the crate's root is not a dt:CasePackage: not a debugtune case package "
                                   "(a `cann-debug kb export` is a backup to load, not a package to import)")
    unlisted = sorted(set(files) - {METADATA} - set(crate.parts))
    if unlisted:
        raise PackageError(source, f"file(s) not described in {METADATA} (hasPart): {', '.join(unlisted)}")
    missing = sorted(set(crate.parts) - set(files))
    if missing:
        raise PackageError(source, f"{METADATA} lists file(s) the archive lacks: {', '.join(missing)}")
    wrong = sorted(n for n, fmt in crate.parts.items() if fmt != media_type(n))
    if wrong:
        raise PackageError(source, f"encodingFormat does not match the file type of: {', '.join(wrong)}")
    resized = sorted(n for n, size in crate.sizes.items() if size and size != str(len(files[n])))
    if resized:
        raise PackageError(source, f"contentSize in {METADATA} differs from the file (altered after packaging?): "
                                   f"{', '.join(resized)}")
    if not any(fmt in RDF_FORMATS.values() for fmt in crate.parts.values()):
        raise PackageError(source, "the package has no case file (Turtle or TriG)")
    try:
        rdf = _case_triples(files, crate, base, source)
    except RdfSyntaxError as err:
        raise PackageError(source, f"a case file does not parse: {err}") from None
    return crate, [*crate.triples, *rdf]


def check_shapes(store: Store, triples: Sequence[ox.Triple], source: str) -> None:
    """PackageError listing the SHACL violations of a package's triples, if any."""
    violations = validate_package_triples(store, triples)
    if violations:
        raise PackageError(source, f"the package violates the SHACL shapes ({len(violations)}):\n"
                                   + describe(violations))


def check_package(store: Store, files: Mapping[str, bytes], source: str,
                  base: str = base_iri("unverified")) -> tuple[CrateInfo, list[ox.Triple]]:
    """Structure and SHACL shapes of a package (what export and import both check); PackageError if bad."""
    with reading(source, _package_error):
        crate, triples = package_triples(files, base, source)
        check_shapes(store, triples, source)
    return crate, triples


def is_imported(store: Store, digest: str) -> bool:
    """Whether the package with this content hash has a graph in the store."""
    return bool(store.ask(f"ASK {{ GRAPH {iri(package_graph(digest))} {{ ?s ?p ?o }} }}", prefixes=False))


def _graph_holding_case(store: Store, case_digest: str) -> str | None:
    """The package graph that already holds a case graph with this hash, if any."""
    rows = store.select(f"SELECT ?g WHERE {{ GRAPH ?g {{ ?root a dt:CasePackage ; dct:hasPart "
                       f"{iri(case_graph_node(case_digest).value)} }} }} LIMIT 1").rows
    return rows[0][0].value if rows and isinstance(rows[0][0], ox.NamedNode) else None


def _cases_held(store: Store, cases: Sequence[str]) -> list[tuple[str, str]]:
    """(case, graph) for each of ``cases`` some graph already holds as a dt:Case."""
    if not cases:
        return []
    values = " ".join(iri(c) for c in cases)
    rows = store.select(f"SELECT ?case ?g WHERE {{ VALUES ?case {{ {values} }} GRAPH ?g {{ ?case a dt:Case }} }} "
                       "ORDER BY ?case ?g").rows
    return [(c.value, g.value) for c, g in rows if isinstance(c, ox.NamedNode) and isinstance(g, ox.NamedNode)]


def _provenance(crate: CrateInfo, digest: str, importer: str, clashes: Sequence[Clash],
                when: datetime) -> list[ox.Triple]:
    root, activity = ox.NamedNode(crate.root), ox.NamedNode(crate.root + "#import")
    agent = ox.NamedNode(crate.root + "#importer")

    def t(s: ox.NamedNode, p: str, o: ox.NamedNode | ox.Literal) -> ox.Triple:
        return ox.Triple(s, ox.NamedNode(p), o)

    out = [t(root, DT + "contentHash", ox.Literal(digest)), t(root, PROV + "wasGeneratedBy", activity),
           t(activity, RDF + "type", ox.NamedNode(PROV + "Activity")),
           t(activity, SKOS + "prefLabel", ox.Literal("import of a case package", language="en")),
           t(activity, PROV + "endedAtTime", ox.Literal(when.isoformat(timespec="seconds"),
                                                        datatype=ox.NamedNode(XSD + "dateTime"))),
           t(activity, PROV + "wasAssociatedWith", agent), t(agent, RDF + "type", ox.NamedNode(PROV + "Agent")),
           t(agent, SKOS + "prefLabel", ox.Literal(importer))]
    out += [t(root, DCT + "license", ox.NamedNode(x)) for x in crate.licenses]
    out += [t(root, PROV + "wasAttributedTo", ox.NamedNode(x)) for x in crate.authors]
    out += [t(root, SKOS + "editorialNote", ox.Literal(f"clash kept with --allow-clash: {c}")) for c in clashes]
    return out


def _importer() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def import_package(store: Store, path: str | os.PathLike[str], *, allow_clash: bool = False,
                   importer: str | None = None, limits: ArchiveLimits = ArchiveLimits()) -> ImportResult:
    """Import a package into its own named graph (see the module docstring); one atomic write."""
    with reading(os.fspath(path), _package_error):
        return _import(store, os.fspath(path), allow_clash, importer, limits)


def _package_error(path: str, message: str, line: int | None, field: str | None) -> PackageError:
    where = "".join(f" ({k} {v})" for k, v in (("line", line), ("field", field)) if v is not None)
    return PackageError(path, message + where)


def _import(store: Store, source: str, allow_clash: bool, importer: str | None,
            limits: ArchiveLimits) -> ImportResult:
    path = source
    files = read_archive(path, limits)
    digest = content_hash(files)
    graph, base = package_graph(digest), base_iri(digest)
    crate, triples = package_triples(files, base, source)
    cases = tuple(sorted(t.subject.value for t in triples if isinstance(t.subject, ox.NamedNode)
                         and t.predicate.value == RDF + "type" and t.object == ox.NamedNode(DT + "Case")))
    sandbox = any(n.startswith(SANDBOX_DIR + "/") for n in files)
    case_digest = case_graph_hash(_case_triples(files, crate, _CANONICAL_BASE, source))
    same = _graph_holding_case(store, case_digest)
    if is_imported(store, digest) or same:
        graph = same or graph
        return ImportResult(digest, graph, crate.root, cases, store.count(graph), True, (), crate.licenses,
                            crate.authors, sandbox)
    held = _cases_held(store, cases)
    if held:
        listing = ", ".join(f"{case} (in {where})" for case, where in held[:5])
        raise PackageError(source, f"case(s) already in the store with different content: {listing}; a case is "
                                   "imported once (remove that graph first to replace it)")
    clashes = tuple(find_clashes(store, triples))
    if clashes and not allow_clash:
        listing = "\n".join(f"  - {c}" for c in clashes[:10]) + (
            f"\n  ... and {len(clashes) - 10} more" if len(clashes) > 10 else "")
        raise PackageError(source, f"{len(clashes)} statement(s) clash with the knowledge base; nothing imported "
                                   f"(use --allow-clash to keep them inside the package's own graph):\n{listing}")
    check_shapes(store, triples, source)
    everything = [*triples, *_provenance(crate, digest, importer or _importer(), clashes, datetime.now(UTC)),
                  ox.Triple(ox.NamedNode(crate.root), ox.NamedNode(DCT + "hasPart"), case_graph_node(case_digest))]
    added = store.load(everything, graph=graph)
    return ImportResult(digest, graph, crate.root, cases, added, False, clashes, crate.licenses, crate.authors,
                        sandbox)


def imported_packages(store: Store) -> list[dict[str, Any]]:
    """Every imported package: graph, root, content hash, name, when and by whom it was imported."""
    return store.select(f"""SELECT ?graph ?root ?hash ?name ?when ?importer WHERE {{ GRAPH ?graph {{
          ?root a dt:CasePackage ; dt:contentHash ?hash ; prov:wasGeneratedBy ?a .
          OPTIONAL {{ ?root {iri(SCHEMA + 'name')} ?name }}
          OPTIONAL {{ ?a prov:endedAtTime ?when }}
          OPTIONAL {{ ?a prov:wasAssociatedWith ?who . ?who skos:prefLabel ?importer }}
        }} }} ORDER BY ?when ?graph""").dicts()
