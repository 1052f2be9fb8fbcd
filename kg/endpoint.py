"""Shared parts of the HTTP endpoints: settings and limits, the bearer-token rule, capped bodies, query workers.

pyoxigraph cannot interrupt a running query, so queries run on a small pool of worker threads and the
request waits at most ``query_timeout_s``; a query past its time is abandoned (HTTP 503) but keeps its
worker busy until it finishes — that is the residual cost (docs/server.md).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from fastapi import HTTPException, Request

from debugtune.kg.errors import KgError

T = TypeVar("T")


class EndpointError(HTTPException):
    """An HTTP error answered as ``text/plain`` with a one-line explanation."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(status_code=status, detail=message, headers=headers)


@dataclass(frozen=True)
class Limits:
    """Per-query timeout, result cap (rows or triples), request-body cap and the worker-pool size."""

    query_timeout_s: float = 30.0
    max_rows: int = 100_000
    max_body_bytes: int = 16 * 1024 * 1024
    workers: int = 4
    allow_service: bool = False
    """Allow SPARQL ``SERVICE`` (federated queries make the server fetch other URLs; off by default)."""


@dataclass
class EndpointSettings:
    """What one mounted endpoint needs: its limits, the update rule and its worker pool."""

    limits: Limits = field(default_factory=Limits)
    allow_update: bool = False
    token: str | None = None
    workers: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        if self.allow_update and not self.token:
            raise KgError("updates need a bearer token: pass token= (cann-debug serve --token-file FILE)")
        if self.limits.query_timeout_s <= 0 or self.limits.max_rows < 1 or self.limits.max_body_bytes < 1:
            raise KgError(f"endpoint limits must be positive: {self.limits}")
        self.workers = ThreadPoolExecutor(max_workers=max(1, self.limits.workers), thread_name_prefix="sparql")

    def run_limited(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on a worker; past ``query_timeout_s`` answer 503 (the worker finishes in the background)."""
        assert self.workers is not None
        future = self.workers.submit(_contained, fn)
        try:
            ok, value = future.result(timeout=self.limits.query_timeout_s)
        except FutureTimeout:
            raise self._timed_out(started=not future.cancel()) from None
        if not ok:
            raise value
        return value

    async def run_limited_async(self, fn: Callable[[], T]) -> T:
        """:meth:`run_limited` for an async route: the event loop waits on the worker, so a request costs one
        thread hop instead of two (the route's own thread-pool hop and the worker's)."""
        assert self.workers is not None
        future = self.workers.submit(_contained, fn)
        try:
            ok, value = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                               self.limits.query_timeout_s)
        except TimeoutError:
            raise self._timed_out(started=not future.cancel()) from None
        if not ok:
            raise value
        return value

    def _timed_out(self, started: bool) -> EndpointError:
        return EndpointError(503, (
            f"the query did not finish within the endpoint's time limit of {self.limits.query_timeout_s:g} s "
            + ("and was abandoned; it still runs to completion on a worker thread"
               if started else "because all query workers were busy; it was not started")))

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


def _contained(fn: Callable[[], T]) -> tuple[bool, object]:
    """Run ``fn``, returning its value or its exception stripped of tracebacks.

    pyoxigraph result iterators must be dropped on the thread that made them; a traceback would keep
    the worker's frames (and such iterators) alive into the request thread.
    """
    try:
        return True, fn()
    except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
        err: BaseException | None = exc
        while err is not None:
            err.__traceback__ = None
            err = err.__cause__ or err.__context__
        exc.__context__ = None
        return False, exc


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
