"""RO-Crate 1.1 metadata (``ro-crate-metadata.json``) of a package: writing it and reading it offline.

The metadata is JSON-LD in the flattened, compacted form RO-Crate 1.1 asks for, with the remote
context ``https://w3id.org/ro/crate/1.1/context``. pyoxigraph cannot fetch remote contexts (and
nothing here should touch the network), so before parsing, that context is replaced by the project's
own copy of the terms it uses (`ontology/contexts/ro-crate-1.1.jsonld`); any other remote context is
refused. Reading checks the RO-Crate structure: the metadata descriptor conforms to RO-Crate 1.1 and
is about the root data entity, which is a ``Dataset`` listing its files in ``hasPart``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pyoxigraph as ox

from debugtune import ontology
from debugtune.kg.errors import RdfSyntaxError
from debugtune.kg.namespaces import DCT, RDF, SCHEMA
from debugtune.kg.package_archive import METADATA, PackageError
from debugtune.kg.store import check_rdf_nesting

RO_CRATE_SPEC = "https://w3id.org/ro/crate/1.1"
RO_CRATE_CONTEXT = "https://w3id.org/ro/crate/1.1/context"
CONTEXT_FILE = ontology.CONTEXTS_DIR / "ro-crate-1.1.jsonld"
SPDX = "https://spdx.org/licenses/"
_SPDX_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+-]{0,63}$")

RDF_FORMATS = {".ttl": "text/turtle", ".trig": "application/trig"}
"""Media types of the RDF parts a package may hold."""

MEDIA_TYPES = {**RDF_FORMATS, ".json": "application/json", ".py": "text/x-python", ".md": "text/markdown"}


@lru_cache(maxsize=1)
def offline_context() -> dict[str, Any]:
    """The project's copy of the RO-Crate 1.1 context terms (term → schema.org / dct IRI)."""
    context: dict[str, Any] = json.loads(CONTEXT_FILE.read_text(encoding="utf-8"))["@context"]
    return context


def license_iri(license_id: str) -> str:
    """An SPDX licence id (``CC-BY-SA-4.0``) as its SPDX URL; an http(s) URL is kept as it is."""
    text = license_id.strip()
    if text.startswith(("https://", "http://")) and not any(c in text for c in ' <>"{}|\\^`'):
        return text
    if not _SPDX_ID.match(text):
        raise PackageError("--license", f"{license_id!r} is neither an SPDX licence id (e.g. CC-BY-SA-4.0) nor a URL")
    return SPDX + text


def media_type(name: str) -> str:
    """The media type of a package file from its extension."""
    suffix = name[name.rfind("."):].lower() if "." in name else ""
    return MEDIA_TYPES.get(suffix, "application/octet-stream")


@dataclass(frozen=True)
class Part:
    """One file of a package as the metadata describes it."""

    name: str
    data: bytes
    description: str
    about: tuple[str, ...] = ()
    code: bool = False

    def entity(self) -> dict[str, Any]:
        out: dict[str, Any] = {"@id": self.name, "@type": ["File", "SoftwareSourceCode"] if self.code else "File",
                               "name": self.name, "description": self.description,
                               "encodingFormat": media_type(self.name), "contentSize": str(len(self.data))}
        if self.about:
            out["about"] = [{"@id": a} for a in self.about]
        if self.code:
            out["programmingLanguage"] = {"@id": "#python"}
        return out


@dataclass(frozen=True)
class CrateInfo:
    """What a crate says about itself: root, files (name → media type), licence, authors, subjects."""

    root: str
    parts: dict[str, str]
    sizes: dict[str, str]
    licenses: tuple[str, ...]
    authors: tuple[str, ...]
    about: tuple[str, ...]
    name: str = ""
    triples: tuple[ox.Triple, ...] = field(default=(), repr=False)

    def rdf_parts(self) -> list[str]:
        """Names of the parts holding RDF (Turtle or TriG), sorted."""
        return sorted(n for n, fmt in self.parts.items() if fmt in RDF_FORMATS.values())


def crate_metadata(*, name: str, description: str, license_id: str, author: str, date_published: str,
                   parts: Sequence[Part], about: Sequence[str] = (), root_types: Sequence[str] = (),
                   keywords: Sequence[str] = ()) -> dict[str, Any]:
    """The RO-Crate 1.1 metadata document (JSON-LD) of a package."""
    lic = license_iri(license_id)
    author_id = author if author.startswith(("https://", "http://")) else "#author"
    root: dict[str, Any] = {
        "@id": "./", "@type": ["Dataset", *root_types], "name": name, "description": description,
        "datePublished": date_published, "license": {"@id": lic}, "author": {"@id": author_id},
        "hasPart": [{"@id": p.name} for p in sorted(parts, key=lambda p: p.name)],
    }
    if about:
        root["about"] = [{"@id": a} for a in about]
    if keywords:
        root["keywords"] = ", ".join(keywords)
    graph: list[dict[str, Any]] = [
        {"@id": METADATA, "@type": "CreativeWork", "conformsTo": {"@id": RO_CRATE_SPEC}, "about": {"@id": "./"}},
        root,
        {"@id": author_id, "@type": "Person", "name": author},
        {"@id": lic, "@type": "CreativeWork", "name": license_id.strip(), "identifier": license_id.strip()},
        *[p.entity() for p in sorted(parts, key=lambda p: p.name)],
    ]
    if any(p.code for p in parts):
        graph.append({"@id": "#python", "@type": "ComputerLanguage", "name": "Python",
                      "url": {"@id": "https://www.python.org/"}})
    return {"@context": RO_CRATE_CONTEXT, "@graph": graph}


def metadata_bytes(doc: dict[str, Any]) -> bytes:
    """The metadata document as UTF-8 JSON (indented, stable key order)."""
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _offline(doc: Any, source: str) -> Any:
    """``doc`` with the RO-Crate 1.1 context replaced by the local copy; other remote contexts are refused."""
    if not isinstance(doc, dict) or "@context" not in doc:
        raise PackageError(source, "not a JSON-LD document with an @context")
    contexts = doc["@context"] if isinstance(doc["@context"], list) else [doc["@context"]]
    local = []
    for ctx in contexts:
        if isinstance(ctx, str):
            if ctx.rstrip("/") != RO_CRATE_CONTEXT:
                raise PackageError(source, f"remote JSON-LD context {ctx!r} is not the RO-Crate 1.1 context; "
                                           "debugtune never fetches contexts")
            local.append(offline_context())
        elif isinstance(ctx, dict):
            local.append(ctx)
        else:
            raise PackageError(source, f"malformed @context entry {ctx!r}")
    return {**doc, "@context": local if len(local) > 1 else local[0]}


def parse_metadata(data: bytes, base_iri: str, source: str = METADATA) -> list[ox.Triple]:
    """The triples of an ``ro-crate-metadata.json`` (relative ids resolved against ``base_iri``)."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise PackageError(source, f"malformed JSON ({err})") from None
    text = json.dumps(_offline(doc, source)).encode()
    try:
        check_rdf_nesting(text, ox.RdfFormat.JSON_LD, source)
    except RdfSyntaxError as err:
        raise PackageError(source, str(err)) from None
    try:
        return [ox.Triple(t.subject, t.predicate, t.object)
                for t in ox.parse(text, format=ox.RdfFormat.JSON_LD, base_iri=base_iri)]
    except SyntaxError as err:
        raise PackageError(source, f"invalid JSON-LD: {err}") from None


def _objects(triples: Iterable[ox.Triple], subject: ox.NamedNode | ox.BlankNode, predicate: str) -> list[Any]:
    p = ox.NamedNode(predicate)
    return [t.object for t in triples if t.subject == subject and t.predicate == p]


def read_crate(data: bytes, base_iri: str, source: str = METADATA) -> CrateInfo:
    """Parse and check the RO-Crate structure of a metadata file (see the module docstring)."""
    triples = parse_metadata(data, base_iri, source)
    descriptor = ox.NamedNode(base_iri + METADATA)
    conforms = [o.value for o in _objects(triples, descriptor, DCT + "conformsTo")]
    if not any(c.rstrip("/").startswith(RO_CRATE_SPEC) for c in conforms):
        raise PackageError(source, f"the metadata descriptor does not conform to RO-Crate 1.1 "
                                   f"(conformsTo {conforms or 'missing'})")
    roots = _objects(triples, descriptor, SCHEMA + "about")
    if len(roots) != 1 or not isinstance(roots[0], ox.NamedNode):
        raise PackageError(source, "the metadata descriptor must be about exactly one root data entity")
    root = roots[0]
    if ox.NamedNode(SCHEMA + "Dataset") not in _objects(triples, root, RDF + "type"):
        raise PackageError(source, f"the root data entity {root.value} is not a Dataset")
    parts: dict[str, str] = {}
    sizes: dict[str, str] = {}
    for part in _objects(triples, root, SCHEMA + "hasPart"):
        if not isinstance(part, ox.NamedNode) or not part.value.startswith(base_iri):
            raise PackageError(source, f"hasPart {part} is not a file inside the package")
        name = part.value[len(base_iri):]
        formats = [o.value for o in _objects(triples, part, SCHEMA + "encodingFormat")]
        parts[name] = formats[0] if formats else ""
        sizes[name] = next((o.value for o in _objects(triples, part, SCHEMA + "contentSize")), "")
    names = [o.value for o in _objects(triples, root, SCHEMA + "name") if isinstance(o, ox.Literal)]
    return CrateInfo(
        root=root.value, parts=parts, sizes=sizes,
        licenses=tuple(o.value for o in _objects(triples, root, SCHEMA + "license")),
        authors=tuple(o.value for o in _objects(triples, root, SCHEMA + "author")),
        about=tuple(o.value for o in _objects(triples, root, SCHEMA + "about")),
        name=names[0] if names else "", triples=tuple(triples))
