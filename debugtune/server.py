"""The HTTP server: SPARQL 1.1 Protocol + Graph Store Protocol, the DSL, runs and health (docs/server.md).

```python
from debugtune.server import create_app, sparql_router
app = create_app(store)                         # a whole FastAPI app (cann-debug serve)
other_app.include_router(sparql_router(store))  # or mount just the SPARQL endpoint (docs/embedding.md)
```
"""

from __future__ import annotations

import json
from typing import Any

import pyoxigraph as ox
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from debugtune import __version__
from debugtune.dashboard import dashboard_router
from debugtune.engine.infer.model import split_stored_signs
from debugtune.engine.infer.report import DiagnosisReport
from debugtune.kg.assertions import read_experiments, read_findings, read_hypotheses, runs
from debugtune.kg.endpoint import (
    EndpointError,
    EndpointSettings,
    Limits,
    no_surrogates,
    read_body,
    strict_text,
    utf8_request,
)
from debugtune.kg.namespaces import check_run_id, run_base, run_graph
from debugtune.kg.protocol import protocol_router
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store
from debugtune.query import DslError, run_query

__all__ = ["Limits", "create_app", "dsl_router", "sparql_router"]


def sparql_router(store: Store | ox.Store, *, allow_update: bool = False, token: str | None = None,
                  limits: Limits | None = None) -> APIRouter:
    """An APIRouter serving ``/sparql`` and ``/rdf-graphs`` over an embedded store, to mount in any app.

    Read-only unless ``allow_update`` (then every write needs ``Authorization: Bearer <token>``).
    """
    return protocol_router(store, allow_update=allow_update, token=token, limits=limits)


def run_report(store: Store, run_id: str) -> dict[str, Any]:
    """The diagnosis report of a run (docs/report-schema.md) rebuilt from its graph, plus its experiments.

    Candidates, coverage and timings are not kept in the graph; they are in ``<run_dir>/diagnosis.json``.
    """
    try:
        check_run_id(run_id)
    except ValueError as err:
        raise EndpointError(404, str(err)) from None
    meta = store.select(f"""SELECT ?p ?o WHERE {{ GRAPH {iri(run_graph(run_id))} {{
        {iri(run_base(run_id))} ?p ?o }} }}""").dicts()
    if not meta:
        raise EndpointError(404, f"no run {run_id!r} in the store")
    info = {r["p"].rsplit("#", 1)[-1]: r["o"] for r in meta}
    findings, signs = split_stored_signs(store, read_findings(store, run_id))
    report = DiagnosisReport(run=run_id, findings=findings, signs=signs,
                             hypotheses=read_hypotheses(store, run_id), run_dir=info.get("runDir"),
                             steps=int(info.get("stepCount") or 0), stored_in=store.target,
                             notes=["rebuilt from the knowledge graph; candidates and coverage are in "
                                    "<run_dir>/diagnosis.json"])
    return {**report.as_dict(),
            "experiments": [{"id": e.id, "remedy": e.remedy, "parameters": e.parameters, "objectives": e.objectives,
                             "cost": e.cost, "seed": e.seed, "status": e.status}
                            for _, e in read_experiments(store, run_id)]}


def dsl_router(store: Store, settings: EndpointSettings) -> APIRouter:
    """``/dsl`` (POST a DSL query, JSON back), ``/runs``, ``/runs/{id}`` and ``/health``."""
    settings.share(store)
    router = APIRouter(dependencies=[Depends(utf8_request)])

    async def body(request: Request) -> bytes:
        return await read_body(request, settings.limits.max_body_bytes)

    @router.post("/dsl", tags=["dsl"], summary="Run a DSL query: JSON {\"query\": \"…\"} or text/plain")
    def dsl(request: Request, data: bytes = Depends(body)) -> JSONResponse:
        text = _dsl_text(request.headers.get("content-type") or "", data)
        try:
            result = settings.run_limited(run_query, text, store)
        except DslError as err:
            return JSONResponse(err.as_dict(), status_code=400)
        return JSONResponse(result.as_dict())

    @router.get("/runs", tags=["runs"], summary="Every run with its top hypothesis")
    def list_runs() -> JSONResponse:
        return JSONResponse(settings.run_limited(runs, store))

    @router.get("/runs/{run_id}", tags=["runs"], summary="The diagnosis report of one run")
    def get_run(run_id: str) -> JSONResponse:
        return JSONResponse(settings.run_limited(run_report, store, run_id))

    @router.get("/health", tags=["health"], summary="Liveness and what the endpoint allows")
    def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "store": store.target, "updates": settings.allow_update,
                "query_timeout_s": settings.limits.query_timeout_s, "max_rows": settings.limits.max_rows}

    return router


def _dsl_text(content_type: str, data: bytes) -> str:
    raw = strict_text(data, "the request body")
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError) as err:
            raise EndpointError(400, f"the body is not JSON: {err}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("query"), str):
            raise EndpointError(400, 'send {"query": "<DSL query>"}')
        return no_surrogates(obj["query"], "the query")
    return raw


def create_app(store: Store, *, allow_update: bool = False, token: str | None = None,
               limits: Limits | None = None, title: str = "debugtune") -> FastAPI:
    """The full app: ``/sparql``, ``/rdf-graphs``, ``/dsl``, ``/runs``, ``/runs/{id}``, ``/health``, ``/docs``."""
    settings = EndpointSettings(limits or Limits(), allow_update, token)
    app = FastAPI(title=title, version=__version__,
                  description="SPARQL 1.1 Protocol and Graph Store endpoint over the debugtune knowledge graph, "
                              "the tuning DSL and run reports. See docs/server.md.")
    app.include_router(protocol_router(store, settings=settings))
    app.include_router(dsl_router(store, settings))
    app.include_router(dashboard_router(store, settings))  # /, /query, /runs/{id}/report (issue 9)
    app.state.settings = settings
    return app
