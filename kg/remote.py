"""The remote backend: any SPARQL 1.1 endpoint over the SPARQL 1.1 Protocol (query and update).

The endpoint should expose the union of its named graphs as the default graph (``oxigraph serve
--union-default-graph``; Fuseki ``unionDefaultGraph``) so that queries behave as on the embedded store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pyoxigraph as ox

from debugtune.kg.errors import EndpointError, SparqlSyntaxError
from debugtune.kg.namespaces import SPARQL_PREFIXES
from debugtune.kg.results import AskResult, GraphResult, QueryResult, SelectResult
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store, position_of, with_prefixes

_ACCEPT = "application/sparql-results+json, application/n-triples;q=0.9"


class RemoteStore(Store):
    """A SPARQL 1.1 Protocol endpoint. ``url`` ending in ``/query`` implies ``/update`` for updates."""

    def __init__(self, url: str, *, update_url: str | None = None, timeout_s: float = 60.0,
                 connect_timeout_s: float = 3.0, token: str | None = None):
        self.target = url
        self.query_url = url
        self.update_url = update_url or (url[: -len("/query")] + "/update" if url.endswith("/query") else url)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s), headers=headers)
        self._check_reachable()

    def _check_reachable(self) -> None:
        self._post(self.query_url, "ASK { }", "application/sparql-query", {}, "application/sparql-results+json")

    def _post(self, url: str, body: str, content_type: str, params: dict[str, Any], accept: str) -> httpx.Response:
        try:
            r = self._http.post(url, content=body.encode("utf-8"), params=params,
                                headers={"content-type": content_type, "accept": accept})
        except httpx.TimeoutException as err:
            raise EndpointError(url, f"timed out ({type(err).__name__})") from None
        except httpx.HTTPError as err:
            raise EndpointError(url, f"unreachable: {err}") from None
        if r.status_code == 400:
            line, col = position_of(r.text)
            raise SparqlSyntaxError(body, r.text.strip()[:500], line, col)
        if r.status_code >= 300:
            raise EndpointError(url, r.text.strip()[:500] or r.reason_phrase, r.status_code)
        return r

    def query(self, sparql: str, *, default_graph: Sequence[str] | None = None,
              named_graphs: Sequence[str] | None = None, base_iri: str | None = None,
              prefixes: bool = True) -> QueryResult:
        text = with_prefixes(sparql) if prefixes else sparql
        if base_iri:
            text = f"BASE {iri(base_iri)}\n" + text
        params: dict[str, Any] = {}
        if default_graph is not None or named_graphs is not None:
            params["default-graph-uri"] = list(default_graph or [])
            params["named-graph-uri"] = list(named_graphs or [])
        try:
            r = self._post(self.query_url, text, "application/sparql-query", params, _ACCEPT)
        except SparqlSyntaxError as err:
            raise _unprefixed(err, prefixes) from None
        ctype = r.headers.get("content-type", "").split(";")[0].strip()
        if ctype == "application/sparql-results+json":
            parsed = ox.parse_query_results(r.content, format=ox.QueryResultsFormat.JSON)
            if isinstance(parsed, ox.QueryBoolean):
                return AskResult(bool(parsed))
            return SelectResult.from_solutions(parsed)
        fmt = ox.RdfFormat.from_media_type(ctype)
        if fmt is None:
            raise EndpointError(self.query_url, f"unexpected content type {ctype!r}")
        return GraphResult(tuple(ox.parse(r.content, format=fmt)))

    def update(self, sparql: str, *, base_iri: str | None = None, prefixes: bool = True) -> None:
        text = with_prefixes(sparql) if prefixes else sparql
        if base_iri:
            text = f"BASE {iri(base_iri)}\n" + text
        try:
            self._post(self.update_url, text, "application/sparql-update", {}, "*/*")
        except SparqlSyntaxError as err:
            raise _unprefixed(err, prefixes) from None

    def _load_quads(self, quads: list[ox.Quad], *, bulk: bool) -> None:
        if not quads:
            return
        by_graph: dict[str, list[ox.Quad]] = {}
        for q in quads:
            assert isinstance(q.graph_name, ox.NamedNode), "Store.load puts every quad in a named graph"
            by_graph.setdefault(q.graph_name.value, []).append(q)
        blocks = []
        for g, qs in by_graph.items():
            nt = (ox.serialize([ox.Triple(q.subject, q.predicate, q.object) for q in qs],
                              format=ox.RdfFormat.N_TRIPLES) or b"").decode()
            blocks.append(f"GRAPH {iri(g)} {{\n{nt}}}")
        self.update("INSERT DATA {\n" + "\n".join(blocks) + "\n}", prefixes=False)

    def graphs(self) -> list[str]:
        rows = self.select("SELECT DISTINCT ?g WHERE { GRAPH ?g { } }", prefixes=False)
        return sorted(v for v in rows.column("g") if isinstance(v, str) and not v.startswith("_:"))

    def clear(self, graph: str | None = None) -> None:
        self.update("DROP ALL" if graph is None else f"DROP SILENT GRAPH {iri(graph)}", prefixes=False)

    def close(self) -> None:
        self._http.close()


def _unprefixed(err: SparqlSyntaxError, prefixed: bool) -> SparqlSyntaxError:
    if prefixed and err.line is not None:
        return SparqlSyntaxError(err.text[len(SPARQL_PREFIXES):], err.detail,
                                 err.line - SPARQL_PREFIXES.count("\n"), err.column)
    return err
