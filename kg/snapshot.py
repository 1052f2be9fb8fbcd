"""Compiled snapshots of the ontology and knowledge base: each graph's Turtle, parsed once, kept as N-Quads.

``load_knowledge`` asks ``load_source`` for a graph whose stored content hash differs from its files (a new
or in-memory store, or a changed ``cases/``): the graph comes from ``kb-<graph>-<hash>.nq`` in
``$DEBUGTUNE_HOME/cache`` (or ``$DEBUGTUNE_CACHE``), which Oxigraph reads in one native call, about three
times faster than parsing the Turtle files and inserting their triples from Python. The file name carries
the hash of the graph's files, so an edit of ``cases/`` or ``ontology/`` compiles a new snapshot and removes
the old one. Two processes compiling at once each write a temporary file and rename it into place (the
rename is atomic, both write the same bytes). A cache that cannot be written, a remote store, or an
unreadable snapshot fall back to parsing the Turtle; a syntax error still names the file and line.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pyoxigraph as ox

from debugtune.kg.namespaces import DT
from debugtune.kg.store import OxigraphStore, Store

if TYPE_CHECKING:
    from debugtune.kg.knowledge import KnowledgeSource

HASH = ox.NamedNode(DT + "contentHash")
_SLUG = re.compile(r"[^A-Za-z0-9]+")


def cache_dir() -> Path:
    """``$DEBUGTUNE_CACHE``, else ``$DEBUGTUNE_HOME/cache`` (home as ``debugtune.settings.home()`` reads it;
    kg/ does not import the front door). The tests share one cache across their separate homes."""
    if os.environ.get("DEBUGTUNE_CACHE"):
        return Path(os.environ["DEBUGTUNE_CACHE"])
    return Path(os.environ.get("DEBUGTUNE_HOME") or Path.home() / ".debugtune") / "cache"


def snapshot_path(graph: str, digest: str, root: Path | None = None) -> Path:
    """Where the snapshot of ``graph`` with content hash ``digest`` lives."""
    slug = _SLUG.sub("-", graph.rsplit("/", 1)[-1]).strip("-") or "graph"
    return (root or cache_dir()) / f"kb-{slug}-{digest[:32]}.nq"


def stamped_quads(src: KnowledgeSource, digest: str) -> list[ox.Quad]:
    """The graph's triples parsed from its files (first syntax error names file and line), plus the hash stamp."""
    from debugtune.kg.knowledge import parse_files

    g = ox.NamedNode(src.graph)
    quads = [ox.Quad(t.subject, t.predicate, t.object, g) for t in parse_files(src.files)]
    quads.append(ox.Quad(g, HASH, ox.Literal(digest), g))
    return quads


def compile_snapshot(src: KnowledgeSource, digest: str, root: Path | None = None) -> Path | None:
    """Parse the graph's files once and write its snapshot atomically; None when the cache is not writable."""
    quads = stamped_quads(src, digest)
    path = snapshot_path(src.graph, digest, root)
    data = ox.serialize(quads, format=ox.RdfFormat.N_QUADS) or b""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
        return None
    for old in path.parent.glob(path.name.rsplit("-", 1)[0] + "-*.nq"):  # earlier versions of this graph
        if old != path:
            with contextlib.suppress(OSError):
                old.unlink()
    return path


def load_source(store: Store, src: KnowledgeSource, digest: str, root: Path | None = None) -> int:
    """Replace the graph of ``src`` in ``store`` by its files' content (from the snapshot); quads loaded."""
    if isinstance(store, OxigraphStore):
        path = snapshot_path(src.graph, digest, root)
        for attempt in range(2):
            if not path.is_file():
                path = compile_snapshot(src, digest, root)  # type: ignore[assignment]
                if path is None:
                    break
            try:
                data = path.read_bytes()
                store.clear(src.graph)
                store.raw.load(data, format=ox.RdfFormat.N_QUADS)
                return data.count(b"\n")
            except (OSError, SyntaxError):  # removed or damaged meanwhile: compile it again, once
                with contextlib.suppress(OSError):
                    path.unlink()
                if attempt:
                    break
    quads = stamped_quads(src, digest)
    store.clear(src.graph)
    return store.load(quads, graph=src.graph)
