"""The SPARQL 1.1 Protocol (`/sparql`) and Graph Store HTTP Protocol (`/rdf-graphs`) as a FastAPI router.

Dataset semantics (docs/server.md): a query without ``default-graph-uri``/``named-graph-uri`` and
without FROM sees the union of all graphs as its default graph, like ``oxigraph serve
--union-default-graph`` (so debugtune's remote store works against it); a protocol dataset replaces
the query's own, and ``default-graph-uri`` alone leaves no named graphs. Updates and the Graph Store
``?default`` graph use the store's real default graph. ``using-graph-uri``/``using-named-graph-uri``
become ``USING`` clauses (pyoxigraph's update takes no dataset). Every text passes the SPARQL guard
(`sparql_guard`: no SERVICE/LOAD unless allowed, bounded size and nesting) before it is parsed;
queries run in the worker processes (`query_workers`), updates in the server under `store.writing`.
Requests whose path, query string or body is not UTF-8 get 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox
from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from debugtune.kg.endpoint import (
    EndpointError,
    EndpointSettings,
    Limits,
    base_url,
    read_body,
    store_errors,
    strict_form,
    strict_text,
    utf8_request,
)
from debugtune.kg.errors import KgError
from debugtune.kg.namespaces import PREFIXES
from debugtune.kg.negotiation import BOOLEAN_TYPES, GRAPH_FORMATS, RESULTS_FORMATS, choose, media_type
from debugtune.kg.sparql_scan import DatasetConflict, names_dataset, query_form, with_using
from debugtune.kg.store import OxigraphStore, Store, writing

_XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
_FORMS = "application/x-www-form-urlencoded"


@dataclass(frozen=True)
class Operation:
    """One protocol request: a query or an update, its text and its dataset parameters."""

    kind: str
    text: str
    graphs: tuple[str, ...] = ()
    named: tuple[str, ...] = ()


def _decode(body: bytes, charset: str | None) -> str:
    if charset not in (None, "utf-8", "utf8"):
        raise EndpointError(415, f"only UTF-8 request bodies are accepted, not {charset}")
    return strict_text(body, "the request body")


def _iris(values: Iterable[str], name: str) -> tuple[str, ...]:
    out = []
    for v in values:
        try:
            ox.NamedNode(v)
        except ValueError:
            raise EndpointError(400, f"{name} is not an absolute IRI: {v!r}") from None
        out.append(v)
    return tuple(out)


def parse_operation(method: str, url_params: list[tuple[str, str]], content_type: str | None,
                    body: bytes) -> Operation:
    """The operation a protocol request asks for; malformed requests raise 400/415."""
    params = list(url_params)
    media, charset = media_type(content_type)
    direct: tuple[str, str] | None = None
    if method == "POST":
        if media == _FORMS:
            params += strict_form(_decode(body, charset), "the form body")
        elif media in ("application/sparql-query", "application/sparql-update"):
            direct = ("query" if media.endswith("query") else "update", _decode(body, charset))
        else:
            raise EndpointError(415, f"unsupported content type {media or '(none)'!r}: POST a query or update as "
                                     f"{_FORMS}, application/sparql-query or application/sparql-update")
    queries = [v for k, v in params if k == "query"]
    updates = [v for k, v in params if k == "update"]
    if direct:
        (queries if direct[0] == "query" else updates).append(direct[1])
    if method == "GET" and updates:
        raise EndpointError(400, "updates must be sent with POST, not GET")
    if len(queries) + len(updates) != 1:
        raise EndpointError(400, "give exactly one query or one update (got "
                                 f"{len(queries)} query and {len(updates)} update parameters)")
    kind = "query" if queries else "update"
    keys = ("default-graph-uri", "named-graph-uri") if kind == "query" else ("using-graph-uri",
                                                                               "using-named-graph-uri")
    graphs = _iris((v for k, v in params if k == keys[0]), keys[0])
    named = _iris((v for k, v in params if k == keys[1]), keys[1])
    return Operation(kind, (queries or updates)[0], graphs, named)


def _term(t: Any) -> dict[str, Any]:
    if isinstance(t, ox.NamedNode):
        return {"type": "uri", "value": t.value}
    if isinstance(t, ox.BlankNode):
        return {"type": "bnode", "value": t.value}
    if isinstance(t, ox.Literal):
        out: dict[str, Any] = {"type": "literal", "value": t.value}
        if t.language:
            out["xml:lang"] = t.language
        elif t.datatype.value not in (_XSD_STRING, _LANG_STRING):
            out["datatype"] = t.datatype.value
        return out
    return {"type": "triple", "value": {"subject": _term(t.subject), "predicate": _term(t.predicate),
                                        "object": _term(t.object)}}


def solutions_json(solutions: ox.QuerySolutions, settings: EndpointSettings) -> bytes:
    """SPARQL JSON results of a SELECT, refusing (422) more rows than the endpoint's cap."""
    names = [v.value for v in solutions.variables]
    rows: list[dict[str, Any]] = []
    for sol in solutions:
        settings.check_rows(len(rows) + 1)
        rows.append({n: _term(sol[i]) for i, n in enumerate(names) if sol[i] is not None})
    return json.dumps({"head": {"vars": names}, "results": {"bindings": rows}}).encode()


def serialize_result(result: Any, accept: str | None, settings: EndpointSettings) -> tuple[bytes, str]:
    """The body and media type of a query result in the format the client accepts (406 if none)."""
    if isinstance(result, ox.QueryBoolean):
        media = choose(accept, list(BOOLEAN_TYPES))
        if media is None:
            raise EndpointError(406, f"an ASK result is available as {', '.join(BOOLEAN_TYPES[:2])}")
        return result.serialize(format=RESULTS_FORMATS[media]) or b"", media
    if isinstance(result, ox.QuerySolutions):
        media = choose(accept, list(RESULTS_FORMATS))
        if media is None:
            raise EndpointError(406, f"SELECT results are available as {', '.join(list(RESULTS_FORMATS)[:4])}")
        body = solutions_json(result, settings)
        fmt = RESULTS_FORMATS[media]
        if fmt != ox.QueryResultsFormat.JSON:
            body = ox.parse_query_results(body, format=ox.QueryResultsFormat.JSON).serialize(format=fmt) or b""
        return body, media
    media = choose(accept, list(GRAPH_FORMATS))
    if media is None:
        raise EndpointError(406, f"graph results are available as {', '.join(list(GRAPH_FORMATS)[:4])}")
    triples: list[ox.Triple] = []
    for t in result:
        settings.check_rows(len(triples) + 1)
        triples.append(t)
    return ox.serialize(triples, format=GRAPH_FORMATS[media]) or b"", media


def _offers_exist(form: str | None, accept: str | None) -> None:
    """Answer 406 before running a query whose result form the client cannot accept."""
    offers = {"ASK": list(BOOLEAN_TYPES), "SELECT": list(RESULTS_FORMATS)}.get(form or "", list(GRAPH_FORMATS))
    if form and choose(accept, offers) is None:
        raise EndpointError(406, f"the client accepts none of {', '.join(offers[:4])} for a {form} result")


def run_query(raw: ox.Store, op: Operation, base: str, accept: str | None,
              settings: EndpointSettings) -> tuple[bytes, str]:
    """Evaluate and serialise a query (runs on a worker thread)."""
    kwargs: dict[str, Any] = {"base_iri": base, "prefixes": PREFIXES}
    if op.graphs or op.named:
        kwargs["default_graph"] = [ox.NamedNode(g) for g in op.graphs]
        kwargs["named_graphs"] = [ox.NamedNode(g) for g in op.named]
    elif not names_dataset(op.text):
        kwargs["use_default_graph_as_union"] = True
    with store_errors("query"):
        return serialize_result(raw.query(op.text, **kwargs), accept, settings)


def run_update(raw: ox.Store, op: Operation, base: str) -> None:
    """Apply an update atomically, with the protocol's USING dataset added to its WHERE clauses."""
    try:
        text = with_using(op.text, op.graphs, op.named)
    except DatasetConflict as err:
        raise EndpointError(400, str(err)) from None
    with store_errors("update"), writing():
        raw.update(text, base_iri=base, prefixes=PREFIXES)


def embedded(store: Store | ox.Store) -> ox.Store:
    """The pyoxigraph store behind an embedded debugtune store (the endpoint serves embedded stores only)."""
    if isinstance(store, ox.Store):
        return store
    if isinstance(store, OxigraphStore):
        return store.raw
    raise KgError(f"the SPARQL endpoint serves an embedded store (memory or a directory), not {store!r}; "
                  "a remote endpoint is already a SPARQL endpoint")


def protocol_router(store: Store | ox.Store, *, allow_update: bool = False, token: str | None = None,
                    limits: Limits | None = None, settings: EndpointSettings | None = None) -> APIRouter:
    """An APIRouter with ``/sparql`` (SPARQL 1.1 Protocol) and ``/rdf-graphs`` (Graph Store Protocol).

    Updates (SPARQL Update and Graph Store writes) need ``allow_update`` and ``Authorization: Bearer
    <token>``. ``settings`` (limits, update rule, worker pool) may be shared with other routes.
    """
    from debugtune.kg.graph_store import add_graph_store_routes

    raw = embedded(store)
    settings = settings or EndpointSettings(limits or Limits(), allow_update, token)
    settings.share(store)
    router = APIRouter(dependencies=[Depends(utf8_request)])

    async def body(request: Request) -> bytes:
        return await read_body(request, settings.limits.max_body_bytes)

    async def handle(request: Request, data: bytes) -> Response:
        op = parse_operation(request.method, list(request.query_params.multi_items()),
                             request.headers.get("content-type"), data)
        settings.check_text(op.text, update=op.kind == "update")
        base, accept = base_url(request), request.headers.get("accept")
        if op.kind == "update":
            settings.require_write(request)
            await run_in_threadpool(run_update, raw, op, base)
            return Response(status_code=204)
        _offers_exist(query_form(op.text), accept)
        content, media = await settings.run_limited_async(run_query, raw, op, base, accept, settings)
        charset = "; charset=utf-8" if media.startswith(("text/", "application/")) else ""
        return Response(content, media_type=media + charset, headers={"Vary": "Accept"})

    @router.get("/sparql", summary="SPARQL 1.1 query (GET ?query=…)", tags=["sparql"])
    async def sparql_get(request: Request) -> Response:
        return await handle(request, b"")

    @router.post("/sparql", summary="SPARQL 1.1 query or update (form or direct POST)", tags=["sparql"])
    async def sparql_post(request: Request, data: bytes = Depends(body)) -> Response:
        return await handle(request, data)

    add_graph_store_routes(router, raw, settings, body)
    return router
