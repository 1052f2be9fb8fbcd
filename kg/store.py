"""The one `Store` interface and its two embedded Oxigraph backends (in memory, on disk).

A query sees the union of all named graphs unless a dataset is given. Every write is one atomic
pyoxigraph call: it fully succeeds or changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pyoxigraph as ox

from debugtune.kg.errors import KgError, RdfSyntaxError, SparqlSyntaxError, StoreLockedError
from debugtune.kg.namespaces import SPARQL_PREFIXES
from debugtune.kg.results import AskResult, GraphResult, QueryResult, SelectResult, from_oxigraph
from debugtune.kg.sparql import iri
from debugtune.kg.sparql_scan import names_dataset, query_form

_EXT_FORMATS = {
    ".ttl": ox.RdfFormat.TURTLE, ".turtle": ox.RdfFormat.TURTLE, ".nt": ox.RdfFormat.N_TRIPLES,
    ".nq": ox.RdfFormat.N_QUADS, ".trig": ox.RdfFormat.TRIG, ".rdf": ox.RdfFormat.RDF_XML,
    ".owl": ox.RdfFormat.RDF_XML, ".xml": ox.RdfFormat.RDF_XML, ".jsonld": ox.RdfFormat.JSON_LD,
    ".n3": ox.RdfFormat.N3,
}
_QUAD_FORMATS = {ox.RdfFormat.N_QUADS, ox.RdfFormat.TRIG}
_POSITION = re.compile(r"(?:line (\d+) column (\d+))|(?:at (\d+):(\d+))")

WRITE_LOCK = threading.RLock()
"""Held by every write to an embedded store in this process (query workers fork only between writes)."""
_writes = [0]


def write_generation() -> int:
    """How many writes embedded stores of this process have taken (a query worker older than that is stale)."""
    return _writes[0]


@contextmanager
def writing() -> Iterator[None]:
    """One write to an embedded store: holds `WRITE_LOCK` and counts the write when it ends."""
    with WRITE_LOCK:
        try:
            yield
        finally:
            _writes[0] += 1


def rdf_format(path: str | os.PathLike[str], fmt: str | ox.RdfFormat | None = None) -> ox.RdfFormat:
    """The RDF format of a file, from ``fmt`` (name, media type or extension) or the file extension."""
    if isinstance(fmt, ox.RdfFormat):
        return fmt
    if fmt:
        found = ox.RdfFormat.from_media_type(fmt) or ox.RdfFormat.from_extension(fmt.lstrip("."))
        if found is None:
            raise KgError(f"unknown RDF format {fmt!r}")
        return found
    suffixes = Path(path).suffixes
    ext = suffixes[-2] if suffixes and suffixes[-1] == ".gz" and len(suffixes) > 1 else (suffixes or [""])[-1]
    if ext.lower() not in _EXT_FORMATS:
        raise KgError(f"{path}: cannot tell the RDF format from the extension {ext!r}; pass format=")
    return _EXT_FORMATS[ext.lower()]


def position_of(message: str) -> tuple[int | None, int | None]:
    """Line and column in an Oxigraph parser message, if it names them."""
    m = _POSITION.search(message)
    if not m:
        return None, None
    line, col = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return int(line), int(col)


_PREFIX_LINES = SPARQL_PREFIXES.count("\n")


def sparql_error(text: str, err: Exception, prefixed: bool) -> SparqlSyntaxError:
    """A syntax error positioned in the user's text (not counting the PREFIX block we added)."""
    message = str(err)
    line, col = position_of(message)
    if prefixed and line is not None:
        line -= _PREFIX_LINES
        text = text[len(SPARQL_PREFIXES):]
        message = _POSITION.sub(f"at {line}:{col}", message, count=1)
    return SparqlSyntaxError(text, message, line, col)


MAX_RDF_NESTING = 1000
"""Deepest nesting of JSON-LD objects/arrays or of RDF 1.2 triple terms (``<<…>>``) parsed: Oxigraph's
parsers recurse on them and overflow the stack (and kill the process) at a few thousand levels."""

_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")
_TRIPLE_TERM = re.compile(rb"<<|>>")


def rdf_nesting(data: bytes, fmt: ox.RdfFormat) -> int:
    """How deep ``data`` nests what Oxigraph's parser recurses on (an upper bound; cheap when there is none)."""
    opening: tuple[bytes, ...]
    if fmt == ox.RdfFormat.JSON_LD:
        marks, opening = _JSON_BRACKET.finditer(_JSON_STRING.sub(b"", data)), (b"[", b"{")
    elif b"<<" in data:
        marks, opening = _TRIPLE_TERM.finditer(data), (b"<<",)
    else:
        return 0
    depth = deepest = 0
    for m in marks:
        depth = depth + 1 if m.group() in opening else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def check_rdf_nesting(data: bytes, fmt: ox.RdfFormat, source: str) -> None:
    """RdfSyntaxError naming ``source`` when ``data`` nests deeper than `MAX_RDF_NESTING`."""
    depth = rdf_nesting(data, fmt)
    if depth > MAX_RDF_NESTING:
        raise RdfSyntaxError(source, f"nested {depth} levels deep (JSON-LD objects and arrays, or << >> triple "
                                     f"terms); the limit is {MAX_RDF_NESTING}")


def parse_rdf(data: bytes, fmt: ox.RdfFormat, source: str, base_iri: str | None = None) -> list[Any]:
    """Parse RDF bytes into triples or quads; a syntax error names ``source``, line and column."""
    check_rdf_nesting(data, fmt, source)
    try:
        return list(ox.parse(data, format=fmt, base_iri=base_iri))
    except SyntaxError as err:
        line, col = position_of(str(err))
        raise RdfSyntaxError(source, str(err), line, col) from None


def with_prefixes(sparql: str) -> str:
    """Prepend the project's PREFIX block, so queries may use dt:, kb:, sosa:, ... freely."""
    return SPARQL_PREFIXES + sparql


class Store(ABC):
    """A quad store with SPARQL 1.1 query and update; three backends share this interface."""

    #: Human-readable location ("memory", a directory, or a URL).
    target: str

    @abstractmethod
    def query(self, sparql: str, *, default_graph: Sequence[str] | None = None,
              named_graphs: Sequence[str] | None = None, base_iri: str | None = None,
              prefixes: bool = True) -> QueryResult:
        """Run a SPARQL query. Without a dataset, the default graph is the union of all graphs."""

    def select(self, sparql: str, *, default_graph: Sequence[str] | None = None,
               named_graphs: Sequence[str] | None = None, base_iri: str | None = None,
               prefixes: bool = True) -> SelectResult:
        """Run a SELECT query (a query of another form is a `KgError`, before it runs)."""
        result = self.query(_form(sparql, "SELECT"), default_graph=default_graph, named_graphs=named_graphs,
                            base_iri=base_iri, prefixes=prefixes)
        return _typed(result, SelectResult, sparql)

    def ask(self, sparql: str, *, default_graph: Sequence[str] | None = None,
            named_graphs: Sequence[str] | None = None, base_iri: str | None = None, prefixes: bool = True) -> bool:
        """Run an ASK query; its answer."""
        result = self.query(_form(sparql, "ASK"), default_graph=default_graph, named_graphs=named_graphs,
                            base_iri=base_iri, prefixes=prefixes)
        return _typed(result, AskResult, sparql).value

    def construct(self, sparql: str, *, default_graph: Sequence[str] | None = None,
                  named_graphs: Sequence[str] | None = None, base_iri: str | None = None,
                  prefixes: bool = True) -> GraphResult:
        """Run a CONSTRUCT or DESCRIBE query; its triples."""
        result = self.query(_form(sparql, "CONSTRUCT", "DESCRIBE"), default_graph=default_graph,
                            named_graphs=named_graphs, base_iri=base_iri, prefixes=prefixes)
        return _typed(result, GraphResult, sparql)

    @abstractmethod
    def update(self, sparql: str, *, base_iri: str | None = None, prefixes: bool = True) -> None:
        """Run a SPARQL update atomically."""

    @abstractmethod
    def _load_quads(self, quads: list[ox.Quad], *, bulk: bool) -> None:
        """Insert parsed quads atomically."""

    @abstractmethod
    def graphs(self) -> list[str]:
        """IRIs of the named graphs, sorted."""

    @abstractmethod
    def clear(self, graph: str | None = None) -> None:
        """Remove one named graph (or, with None, everything)."""

    def load(self, source: str | os.PathLike[str] | Iterable[Any], *, graph: str,
             format: str | ox.RdfFormat | None = None, base_iri: str | None = None) -> int:
        """Load a file, a list of files, or an iterable of triples into ``graph``; returns triples added.

        All of ``source`` is parsed before anything is written, so a syntax error in any file
        leaves the store unchanged.
        """
        target = ox.NamedNode(graph)
        quads: list[ox.Quad] = []
        for item in _as_items(source):
            if isinstance(item, (str, os.PathLike)):
                path = Path(item)
                if not path.is_file():
                    raise KgError(f"{path}: no such file")
                fmt = rdf_format(path, format)
                parsed = parse_rdf(path.read_bytes(), fmt, str(path), base_iri or path.resolve().as_uri())
                quads.extend(_into_graph(parsed, target, keep_graphs=fmt in _QUAD_FORMATS))
            else:
                quads.extend(_into_graph([item], target, keep_graphs=False))
        self._load_quads(quads, bulk=len(quads) > 200_000)
        return len(quads)

    def load_data(self, data: str | bytes, *, graph: str, format: str | ox.RdfFormat = ox.RdfFormat.TURTLE,
                  base_iri: str | None = None, source: str = "<data>") -> int:
        """Parse RDF text and load it into ``graph``; returns triples added."""
        fmt = rdf_format(source, format)
        raw = data.encode() if isinstance(data, str) else data
        parsed = parse_rdf(raw, fmt, source, base_iri)
        quads = list(_into_graph(parsed, ox.NamedNode(graph), keep_graphs=fmt in _QUAD_FORMATS))
        self._load_quads(quads, bulk=len(quads) > 200_000)
        return len(quads)

    def count(self, graph: str | None = None) -> int:
        """Number of quads in one named graph, or in all graphs."""
        if graph is None:
            q = "SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
        else:
            q = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH {iri(graph)} {{ ?s ?p ?o }} }}"
        return int(self.select(q, prefixes=False).scalar() or 0)

    def dump(self, graph: str, fmt: ox.RdfFormat = ox.RdfFormat.TURTLE) -> bytes:
        """Serialise one named graph."""
        return self.construct(f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ GRAPH {iri(graph)} {{ ?s ?p ?o }} }}",
                              prefixes=False).serialize(fmt)

    def version(self) -> int | None:
        """A number that changes whenever the store's content may have (None: unknown, e.g. a remote store).

        Lets callers cache what they derive from the store (`engine.suggest.stored_cases`).
        """
        return None

    def close(self) -> None:
        """Release the store (flushes an on-disk store)."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.target}>"


class OxigraphStore(Store):
    """Embedded Oxigraph: in memory (``path=None``) or RocksDB on disk (``path`` a directory).

    On disk a store is open read-write by one process at a time (RocksDB's lock); ``read_only`` opens a
    snapshot beside that writer instead (``pyoxigraph.Store.read_only``), for commands that only read.
    A writer that finds the lock taken retries for ``wait_s`` seconds and then names the process holding it.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, read_only: bool = False, wait_s: float = 0.0):
        self.path = None if path is None else Path(path)
        self.read_only = read_only and path is not None
        self.target = "memory" if path is None else str(self.path)
        self._store: ox.Store | None
        if self.path is None:
            self._store = ox.Store()
            return
        if self.read_only:
            try:
                self._store = ox.Store.read_only(str(self.path))
            except OSError as err:
                raise KgError(f"{self.path}: cannot open the store read-only: {err}") from None
            return
        deadline = time.monotonic() + max(wait_s, 0.0)
        while True:
            try:
                self._store = ox.Store(str(self.path))
                break
            except OSError as err:
                if "LOCK" not in str(err) and "lock" not in str(err):
                    raise KgError(f"{self.path}: cannot open the store: {err}") from None
                if time.monotonic() >= deadline:
                    waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
                    raise StoreLockedError(
                        f"{self.path}: the store is open read-write in {lock_holder(self.path)}{waited} (RocksDB "
                        "lock); close it there, query that process's endpoint, or use a read-only command") from None
                time.sleep(0.2)
        _write_holder(self.path)

    @property
    def raw(self) -> ox.Store:
        """The underlying pyoxigraph store (for the protocol router and benchmarks)."""
        return self._live

    @property
    def _live(self) -> ox.Store:
        if self._store is None:
            raise KgError(f"{self.target}: the store is closed")
        return self._store

    def query(self, sparql: str, *, default_graph: Sequence[str] | None = None,
              named_graphs: Sequence[str] | None = None, base_iri: str | None = None,
              prefixes: bool = True) -> QueryResult:
        text = with_prefixes(sparql) if prefixes else sparql
        kwargs: dict[str, Any] = {"base_iri": base_iri}
        if default_graph is None and named_graphs is None:
            # A query naming its own dataset (FROM / FROM NAMED) keeps it; otherwise: union of all graphs.
            kwargs["use_default_graph_as_union"] = not names_dataset(sparql)
        else:
            kwargs["default_graph"] = [ox.NamedNode(g) for g in (default_graph or [])]
            if named_graphs is not None:
                kwargs["named_graphs"] = [ox.NamedNode(g) for g in named_graphs]
        try:
            return from_oxigraph(self._live.query(text, **kwargs))
        except SyntaxError as err:
            raise sparql_error(text, err, prefixes) from None

    def update(self, sparql: str, *, base_iri: str | None = None, prefixes: bool = True) -> None:
        self._writable()
        text = with_prefixes(sparql) if prefixes else sparql
        try:
            with writing():
                self._live.update(text, base_iri=base_iri)
        except SyntaxError as err:
            raise sparql_error(text, err, prefixes) from None

    def _writable(self) -> None:
        if self.read_only:
            raise KgError(f"{self.path}: the store is open read-only; this command cannot write to it")

    def _load_quads(self, quads: list[ox.Quad], *, bulk: bool) -> None:
        self._writable()
        with writing():
            if bulk and self.path is not None:
                self._live.bulk_extend(quads)
            else:
                self._live.extend(quads)

    def graphs(self) -> list[str]:
        return sorted(g.value for g in self._live.named_graphs() if isinstance(g, ox.NamedNode))

    def clear(self, graph: str | None = None) -> None:
        self._writable()
        with writing():
            if graph is None:
                self._live.clear()
            else:
                node = ox.NamedNode(graph)
                if self._live.contains_named_graph(node):
                    self._live.remove_graph(node)

    def version(self) -> int | None:
        # every write of this process counts; a read-only or locked directory sees no other writer
        return write_generation()

    def use_read_only(self, directory: Path | None = None) -> ox.Store:
        """Switch this object to a read-only handle on its directory, or on ``directory`` (a checkpoint of it), in
        a query worker process; returns the handle it held, which the caller must keep alive (dropping a RocksDB
        handle copied by fork may hang)."""
        old = self._live
        if self.path is not None:
            self._store = ox.Store.read_only(str(directory or self.path))
        return old

    def count(self, graph: str | None = None) -> int:
        if graph is None:
            return len(self._live)
        return super().count(graph)

    def dump(self, graph: str, fmt: ox.RdfFormat = ox.RdfFormat.TURTLE) -> bytes:
        return self._live.dump(format=fmt, from_graph=ox.NamedNode(graph)) or b""

    def close(self) -> None:
        """Flush and release the store (an on-disk store's lock is freed at once)."""
        if self._store is not None and self.path is not None:
            if not self.read_only:
                self._store.flush()
                _remove_holder(self.path)
            self._store = None  # dropping the last reference releases the RocksDB lock


def _holder_file(path: Path) -> Path:
    return path.with_name(path.name + ".holder")


def _write_holder(path: Path) -> None:
    """Record which process holds the store read-write, for the message a waiting writer prints."""
    try:
        _holder_file(path).write_text(json.dumps({"pid": os.getpid(), "command": " ".join(sys.argv)[:300],
                                                  "since": time.strftime("%Y-%m-%dT%H:%M:%S")}))
    except OSError:
        pass


def _remove_holder(path: Path) -> None:
    try:
        holder = _holder_file(path)
        if json.loads(holder.read_text()).get("pid") == os.getpid():
            holder.unlink()
    except (OSError, ValueError):
        pass


def lock_holder(path: Path) -> str:
    """The process that holds an on-disk store's lock: from the holder file its opener wrote, else from the
    open file descriptors in /proc; "another process" when neither tells."""
    try:
        info = json.loads(_holder_file(path).read_text())
        pid = int(info["pid"])
        if pid == os.getpid():
            return f"this process (pid {pid})"
        os.kill(pid, 0)
        return f"process {pid} ({info.get('command') or 'unknown command'}, since {info.get('since')})"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    lock = str((path / "LOCK").resolve())
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == lock for fd in fd_dir.iterdir()):
                cmd = (fd_dir.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"process {fd_dir.parent.name} ({cmd.strip()[:200]})"
        except OSError:
            continue
    return "another process"


def _form(sparql: str, *forms: str) -> str:
    """``sparql`` when its query form is one of ``forms`` (a SELECT passed to `Store.ask` is a caller's bug)."""
    found = query_form(sparql)
    if found is not None and found not in forms:
        raise KgError(f"a {found} query was given where a {' or '.join(forms)} query was expected: "
                      f"{' '.join(sparql.split())[:120]}")
    return sparql


_R = TypeVar("_R", SelectResult, AskResult, GraphResult)


def _typed(result: QueryResult, kind: type[_R], sparql: str) -> _R:
    if not isinstance(result, kind):
        raise KgError(f"expected a {kind.__name__} from: {' '.join(sparql.split())[:120]}")
    return result


def _as_items(source: Any) -> list[Any]:
    if isinstance(source, (str, os.PathLike)):
        return [source]
    return list(source)


def _into_graph(items: Iterable[Any], graph: ox.NamedNode, *, keep_graphs: bool) -> Iterable[ox.Quad]:
    for t in items:
        if isinstance(t, ox.Quad):
            g = t.graph_name if keep_graphs and not isinstance(t.graph_name, ox.DefaultGraph) else graph
            yield ox.Quad(t.subject, t.predicate, t.object, g)
        elif isinstance(t, ox.Triple):
            yield ox.Quad(t.subject, t.predicate, t.object, graph)
        else:
            s, p, o = t
            yield ox.Quad(s, p, o, graph)
