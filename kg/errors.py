"""Errors of the knowledge-graph layer: each names where the problem is."""

from __future__ import annotations

from typing import Any


class DebugtuneError(Exception):
    """Base class of every error debugtune reports to the user as a message (not a stack trace).

    Every stage's own errors derive from it; the CLI prints ``error: <message>`` and exits with 2.
    Errors pickle with their attributes whatever their ``__init__`` takes (a query worker process
    sends them back to the server, `kg.query_workers`).
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


def _rebuilt(cls: type[DebugtuneError], args: tuple[Any, ...], state: dict[str, Any]) -> DebugtuneError:
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class KgError(DebugtuneError):
    """Base class of every knowledge-graph error."""


class MissingThresholdError(KgError):
    """The knowledge base lacks ``dt:Threshold`` keys a computation needs (there is no Python default)."""

    def __init__(self, *keys: str):
        self.keys = keys
        self.key = keys[0] if keys else ""
        names = ", ".join(repr(k) for k in keys)
        super().__init__(f"threshold{'s' if len(keys) > 1 else ''} {names} not in the knowledge base (define "
                         f"{'each' if len(keys) > 1 else 'it'} as a dt:Threshold in cases/thresholds/*.ttl and "
                         "load the knowledge base)")


class RdfSyntaxError(KgError):
    """An RDF file or string that does not parse; names the source, line and column."""

    def __init__(self, source: str, message: str, line: int | None = None, column: int | None = None):
        self.source, self.line, self.column, self.detail = source, line, column, message
        where = source if line is None else f"{source}:{line}:{column or 0}"
        super().__init__(f"{where}: {message}")


class SparqlSyntaxError(KgError):
    """A malformed SPARQL query or update; names the position."""

    def __init__(self, text: str, message: str, line: int | None = None, column: int | None = None):
        self.text, self.line, self.column, self.detail = text, line, column, message
        where = "" if line is None else f" at line {line}, column {column}"
        super().__init__(f"malformed SPARQL{where}: {message}")


class EndpointError(KgError):
    """A remote SPARQL endpoint that is unreachable or answered with an error; names the URL."""

    def __init__(self, url: str, message: str, status: int | None = None):
        self.url, self.status = url, status
        code = f" (HTTP {status})" if status else ""
        super().__init__(f"SPARQL endpoint {url}{code}: {message}")


class StoreLockedError(KgError):
    """An on-disk store already opened read-write by another process."""


class FixpointError(KgError):
    """Inference rules still derived new triples after the maximum number of rounds."""


class SparqlRefused(KgError):
    """SPARQL text refused before it is parsed: a federated fetch (SERVICE, LOAD) that is not allowed, or a
    text too large or too deeply nested for the parser (docs/server.md, "Limits"); names the position."""

    def __init__(self, message: str, *, status: int = 400, line: int | None = None, column: int | None = None):
        self.status, self.line, self.column, self.detail = status, line, column, message
        where = "" if line is None else f" at line {line}, column {column}"
        super().__init__(f"SPARQL refused{where}: {message}")
