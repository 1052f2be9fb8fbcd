"""The SPARQL 1.1 Graph Store HTTP Protocol on `/rdf-graphs`: GET, HEAD, PUT, POST, DELETE of one graph.

A graph is named indirectly (``/rdf-graphs?graph=IRI``, ``/rdf-graphs?default``) or directly (its IRI
is the request URL, ``/rdf-graphs/<path>``). POST to ``/rdf-graphs`` itself creates a new graph and
answers 201 with its Location. Every write is one atomic SPARQL update; blank nodes in a payload are
new nodes. ``?default`` is the store's real default graph (docs/server.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from email.parser import BytesParser
from email.policy import HTTP

import pyoxigraph as ox
from fastapi import APIRouter, Depends, Request, Response

from debugtune.kg.endpoint import EndpointError, EndpointSettings, base_url, store_errors
from debugtune.kg.errors import RdfSyntaxError
from debugtune.kg.negotiation import GRAPH_FORMATS, choose, media_type
from debugtune.kg.sparql import iri
from debugtune.kg.store import check_rdf_nesting, writing

Target = ox.NamedNode | ox.DefaultGraph


def _target(request: Request, direct: bool) -> Target | None:
    """The graph a request names; None for the graph store itself (POST creates a graph there)."""
    params = request.query_params
    graphs, default = params.getlist("graph"), "default" in params
    if direct:
        if graphs or default:
            raise EndpointError(400, "a graph URL takes no ?graph= or ?default")
        return ox.NamedNode(base_url(request))
    if graphs and default or len(graphs) > 1:
        raise EndpointError(400, "name one graph: ?graph=IRI or ?default")
    if default:
        return ox.DefaultGraph()
    if graphs:
        try:
            return ox.NamedNode(graphs[0])
        except ValueError:
            raise EndpointError(400, f"?graph= is not an absolute IRI: {graphs[0]!r}") from None
    return None


def exists(raw: ox.Store, graph: Target) -> bool:
    """Whether a graph exists (the default graph always does)."""
    return isinstance(graph, ox.DefaultGraph) or raw.contains_named_graph(graph)


def _is_empty(raw: ox.Store, graph: Target) -> bool:
    return next(iter(raw.quads_for_pattern(None, None, None, graph)), None) is None


def read_graph(raw: ox.Store, graph: Target, settings: EndpointSettings) -> list[ox.Triple]:
    """The triples of a graph, refusing (422) more than the endpoint's result cap."""
    out: list[ox.Triple] = []
    for q in raw.quads_for_pattern(None, None, None, graph):
        settings.check_rows(len(out) + 1)
        out.append(ox.Triple(q.subject, q.predicate, q.object))
    return out


def serialized_graph(raw: ox.Store, graph: Target, media: str, settings: EndpointSettings) -> bytes:
    """A graph serialised in ``media`` (runs on a query worker)."""
    return ox.serialize(read_graph(raw, graph, settings), format=GRAPH_FORMATS[media]) or b""


def _parse(data: bytes, content_type: str | None, base: str) -> list[ox.Triple]:
    media, charset = media_type(content_type)
    fmt = GRAPH_FORMATS.get(media)
    if fmt is None:
        raise EndpointError(415, f"unsupported RDF content type {media or '(none)'!r}; use one of "
                                 f"{', '.join(list(GRAPH_FORMATS)[:4])}")
    if charset not in (None, "utf-8", "utf8"):
        raise EndpointError(415, f"only UTF-8 RDF is accepted, not {charset}")
    try:
        check_rdf_nesting(data, fmt, "the payload")
    except RdfSyntaxError as err:
        raise EndpointError(400, str(err)) from None
    try:
        return [t if isinstance(t, ox.Triple) else ox.Triple(t.subject, t.predicate, t.object)
                for t in ox.parse(data, format=fmt, base_iri=base)]
    except SyntaxError as err:
        raise EndpointError(400, f"the {media} payload does not parse: {err}") from None


def parse_payload(data: bytes, content_type: str | None, base: str) -> list[ox.Triple]:
    """The triples of a request body; ``multipart/form-data`` merges every part by its own type."""
    media, _ = media_type(content_type)
    if media != "multipart/form-data":
        return _parse(data, content_type, base)
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + (content_type or "").encode() + b"\r\n\r\n"
                                                  + data)
    if not message.is_multipart():
        raise EndpointError(400, "a multipart/form-data body without parts (is the boundary right?)")
    out: list[ox.Triple] = []
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)  # the bytes of a non-multipart part (None when empty)
        out += _parse(payload if isinstance(payload, bytes) else b"", part.get("content-type"), base)
    return out


def _graph_clause(graph: Target, body: str) -> str:
    return body if isinstance(graph, ox.DefaultGraph) else f"GRAPH {iri(graph.value)} {{ {body} }}"


def write_graph(raw: ox.Store, graph: Target, triples: list[ox.Triple], *, replace: bool) -> None:
    """Replace (PUT) or extend (POST) a graph in one atomic update."""
    data = (ox.serialize(triples, format=ox.RdfFormat.N_TRIPLES) or b"").decode()
    ops = []
    if isinstance(graph, ox.NamedNode):
        if replace:
            ops.append(f"DROP SILENT GRAPH {iri(graph.value)}")
        ops.append(f"CREATE SILENT GRAPH {iri(graph.value)}")
    elif replace:
        ops.append("DROP SILENT DEFAULT")
    if triples:
        ops.append(f"INSERT DATA {{ {_graph_clause(graph, data)} }}")
    raw.update(" ;\n".join(ops))


def drop_graph(raw: ox.Store, graph: Target) -> None:
    raw.update("DROP SILENT DEFAULT" if isinstance(graph, ox.DefaultGraph) else f"DROP GRAPH {iri(graph.value)}")


def add_graph_store_routes(router: APIRouter, raw: ox.Store, settings: EndpointSettings,
                           body: Callable[[Request], Awaitable[bytes]]) -> None:
    """Register ``/rdf-graphs`` and ``/rdf-graphs/{path}`` on ``router``."""

    def get(request: Request, direct: bool) -> Response:
        graph = _target(request, direct)
        if graph is None:
            raise EndpointError(400, "name a graph: ?graph=IRI or ?default")
        media = choose(request.headers.get("accept"), list(GRAPH_FORMATS))
        if media is None:
            raise EndpointError(406, f"graphs are available as {', '.join(list(GRAPH_FORMATS)[:4])}")
        if not exists(raw, graph):
            raise EndpointError(404, f"no graph {graph}")
        content = settings.run_limited(serialized_graph, raw, graph, media, settings)
        return Response(content, media_type=media + "; charset=utf-8", headers={"Vary": "Accept"})

    def write(request: Request, data: bytes, direct: bool) -> Response:
        settings.require_write(request)
        graph = _target(request, direct)
        method = request.method
        if method == "DELETE":
            if graph is None or not exists(raw, graph):
                raise EndpointError(404, f"no graph {graph}" if graph is not None else "name a graph to delete")
            with store_errors("delete"), writing():
                drop_graph(raw, graph)
            return Response(status_code=200)
        headers = {}
        if graph is None:
            if method == "PUT":
                raise EndpointError(400, "name a graph to PUT: ?graph=IRI or ?default")
            location = base_url(request).rstrip("/") + "/" + uuid.uuid4().hex
            graph, headers = ox.NamedNode(location), {"Location": location}
        base = graph.value if isinstance(graph, ox.NamedNode) else base_url(request)
        triples = parse_payload(data, request.headers.get("content-type"), base)
        created = not exists(raw, graph) if isinstance(graph, ox.NamedNode) else _is_empty(raw, graph)
        with store_errors("write"), writing():
            write_graph(raw, graph, triples, replace=method == "PUT")
        if created:
            return Response(status_code=201, headers=headers)
        return Response(status_code=204 if method == "PUT" else 200)

    def graph_read(request: Request) -> Response:
        return get(request, False)

    def graph_write(request: Request, data: bytes = Depends(body)) -> Response:
        return write(request, data, False)

    def direct_read(path: str, request: Request) -> Response:
        return get(request, True)

    def direct_write(path: str, request: Request, data: bytes = Depends(body)) -> Response:
        return write(request, data, True)

    doc = {"GET": "read a graph", "HEAD": "check a graph", "PUT": "replace a graph",
           "POST": "add to a graph (to /rdf-graphs itself: create one)", "DELETE": "delete a graph"}
    for method, what in doc.items():
        reader = method in ("GET", "HEAD")
        router.add_api_route("/rdf-graphs", graph_read if reader else graph_write, methods=[method],
                             summary=f"Graph Store: {what} (?graph=IRI or ?default)", tags=["graph store"],
                             include_in_schema=method != "HEAD", name=f"graph_store_{method.lower()}")
        router.add_api_route("/rdf-graphs/{path:path}", direct_read if reader else direct_write, methods=[method],
                             summary=f"Graph Store: {what} named by its URL", tags=["graph store"],
                             include_in_schema=method != "HEAD", name=f"graph_store_direct_{method.lower()}")
