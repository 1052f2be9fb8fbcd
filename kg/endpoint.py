"""Shared parts of the HTTP endpoints: settings and limits, the bearer-token rule, capped bodies, strict
UTF-8, and the query workers.

Queries run in worker processes (`query_workers`); a query past ``query_timeout_s`` is stopped by
killing its worker (HTTP 503), which the next query replaces (docs/server.md, "Limits").
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

from fastapi import HTTPException, Request

from debugtune.kg.errors import KgError, SparqlRefused
from debugtune.kg.query_workers import QueryWorkers, WorkerError
from debugtune.kg.sparql_guard import SparqlBounds, check_sparql

T = TypeVar("T")


class EndpointError(HTTPException):
    """An HTTP error answered as ``text/plain`` with a one-line explanation."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(status_code=status, detail=message, headers=headers)

    def __reduce__(self) -> tuple[Any, ...]:
        return EndpointError, (self.status_code, self.detail, self.headers)


@dataclass(frozen=True)
class Limits:
    """Per-query time and memory, result cap (rows or triples), request-body cap, worker processes, the SPARQL
    text bounds (`sparql_guard`) and the SERVICE endpoints allowed."""

    query_timeout_s: float = 30.0
    max_rows: int = 100_000
    max_body_bytes: int = 16 * 1024 * 1024
    workers: int = 4
    services: tuple[str, ...] = ()
    """Endpoints SPARQL ``SERVICE`` (and ``LOAD``) may name; none by default (federated queries make the
    server fetch URLs). With none, workers also cannot open network sockets."""
    max_query_chars: int = SparqlBounds.max_chars
    max_query_depth: int = SparqlBounds.max_depth
    max_query_terms: int = SparqlBounds.max_terms
    query_memory_mb: int | None = 2048
    """Resident memory (MiB) a worker may add to what it inherits; a query past it kills only its worker."""

    def bounds(self) -> SparqlBounds:
        return SparqlBounds(self.max_query_chars, self.max_query_depth, self.max_query_terms, tuple(self.services))


@dataclass
class EndpointSettings:
    """What one mounted endpoint needs: its limits, the update rule and its worker processes."""

    limits: Limits = field(default_factory=Limits)
    allow_update: bool = False
    token: str | None = None
    workers: QueryWorkers | None = None

    def __post_init__(self) -> None:
        if self.allow_update and not self.token:
            raise KgError("updates need a bearer token: pass token= (cann-debug serve --token-file FILE)")
        if self.limits.query_timeout_s <= 0 or self.limits.max_rows < 1 or self.limits.max_body_bytes < 1:
            raise KgError(f"endpoint limits must be positive: {self.limits}")
        self.workers = QueryWorkers(self.limits.workers, self.limits.query_timeout_s,
                                    memory_mb=self.limits.query_memory_mb, no_network=not self.limits.services)
        self.workers.share(self)

    def share(self, *objs: Any) -> None:
        """Objects (stores) that calls pass to `run_limited` (see `QueryWorkers.share`)."""
        assert self.workers is not None
        self.workers.share(*objs)

    def run_limited(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker process (``fn`` a module-level function); 503 past ``query_timeout_s``."""
        assert self.workers is not None
        try:
            return self.workers.call(fn, *args)
        except WorkerError as err:
            raise self._stopped(err) from None

    async def run_limited_async(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`run_limited` for an async route: the event loop awaits the worker's thread directly."""
        assert self.workers is not None
        try:
            return await self.workers.call_async(fn, *args)
        except WorkerError as err:
            raise self._stopped(err) from None

    def _stopped(self, err: WorkerError) -> EndpointError:
        limit = self.limits.query_timeout_s
        if err.reason == "timeout":
            return EndpointError(503, f"the query did not finish within the endpoint's time limit of {limit:g} s; "
                                      f"{err}")
        if err.reason == "busy":
            return EndpointError(503, f"the query did not start within the endpoint's time limit of {limit:g} s: "
                                      f"{err}")
        return EndpointError(503, f"the query was stopped: {err}")  # "memory" or "crashed": what the log says too

    def check_text(self, text: str, *, update: bool) -> None:
        """400/403 for SPARQL text the guard refuses (`sparql_guard.check_sparql`), before anything parses it."""
        try:
            check_sparql(text, update=update, bounds=self.limits.bounds())
        except SparqlRefused as err:
            raise EndpointError(err.status, str(err)) from None

    def close(self) -> None:
        """Stop the worker processes (a later call forks new ones)."""
        if self.workers is not None:
            self.workers.close()

    def require_write(self, request: Request) -> None:
        """Updates need ``allow_update`` (else 403) and ``Authorization: Bearer <token>`` (else 401)."""
        if not self.allow_update:
            raise EndpointError(403, "updates are disabled on this endpoint "
                                     "(start it with --allow-update --token-file FILE)")
        scheme, _, given = (request.headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), (self.token or "").encode()):
            raise EndpointError(401, "updates need a valid bearer token (Authorization: Bearer <token>)",
                                {"WWW-Authenticate": 'Bearer realm="debugtune"'})

    def check_rows(self, n: int) -> None:
        if n > self.limits.max_rows:
            raise EndpointError(422, f"the result has more than {self.limits.max_rows} rows or triples (the "
                                     "endpoint's result cap); add LIMIT or narrow the query")


async def read_body(request: Request, cap: int) -> bytes:
    """The request body, refusing (413) anything over ``cap`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > cap:
        raise EndpointError(413, f"the request body is {declared} bytes; the limit is {cap}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise EndpointError(413, f"the request body is over the limit of {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def strict_text(data: bytes, what: str) -> str:
    """``data`` as UTF-8 text, or 400 naming ``what`` (invalid UTF-8, CESU-8 surrogates included)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise EndpointError(400, f"{what} is not valid UTF-8 (byte {err.start}: {err.reason})") from None


def no_surrogates(text: str, what: str) -> str:
    """``text`` unless it holds a lone surrogate (``"\\ud800"`` in JSON), which no UTF-8 text can; else 400."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise EndpointError(400, f"{what} holds a lone surrogate (U+{ord(text[err.start]):04X} at character "
                                 f"{err.start}), which is not text") from None
    return text


def strict_form(text: str, what: str) -> list[tuple[str, str]]:
    """The ``key=value&…`` pairs of a URL query or form body, percent-decoded as strict UTF-8 (else 400)."""
    pairs = []
    for item in text.split("&"):
        if not item:
            continue
        key, _, value = item.partition("=")
        pairs.append((strict_text(unquote_to_bytes(key.replace("+", " ")), what),
                      strict_text(unquote_to_bytes(value.replace("+", " ")), what)))
    return pairs


async def utf8_request(request: Request) -> None:
    """Router dependency: 400 when the request's path or query string percent-decodes to invalid UTF-8."""
    raw_path = request.scope.get("raw_path") or b""
    strict_text(unquote_to_bytes(raw_path), "the request path")
    strict_text(unquote_to_bytes(request.scope.get("query_string") or b""), "the query string")


@contextmanager
def store_errors(what: str) -> Iterator[None]:
    """pyoxigraph errors as HTTP answers: syntax and evaluation errors 400, storage errors 500."""
    try:
        yield
    except SyntaxError as err:
        raise EndpointError(400, f"malformed {what}: {err}") from None
    except (RuntimeError, ValueError) as err:
        raise EndpointError(400, f"the {what} failed: {err}") from None
    except OSError as err:
        raise EndpointError(500, f"the store failed: {err}") from None


def base_url(request: Request) -> str:
    """The request URL without its query string (the base IRI of the operation, or a graph's IRI)."""
    return str(request.url.replace(query="", fragment=""))
