"""The HTTP server over real HTTP (uvicorn on 127.0.0.1): real clients, the token rule, limits, DSL and runs."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from rdflib import Dataset, Graph, Literal, URIRef
from rdflib.plugins.stores.sparqlstore import SPARQLStore, SPARQLUpdateStore
from SPARQLWrapper import CSV, JSON, TSV, TURTLE, XML, SPARQLWrapper
from SPARQLWrapper.SPARQLExceptions import QueryBadFormed, Unauthorized

from debugtune.kg import KgError, open_store
from debugtune.kg.namespaces import GRAPH_KB
from debugtune.server import Limits, create_app
from tests.app_server import serving
from tests.query_kb import make_store

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CAUSES = "PREFIX dt: <https://w3id.org/debugtune#> SELECT ?c WHERE { ?c a dt:Cause } ORDER BY ?c"


@pytest.fixture(scope="module")
def server():
    store = make_store()
    with serving(create_app(store, allow_update=True, token=TOKEN)) as url:
        yield url, store


@pytest.fixture(scope="module")
def readonly():
    with serving(create_app(make_store())) as url:
        yield url


def _wrapper(url: str, fmt: str) -> SPARQLWrapper:
    sw = SPARQLWrapper(url + "/sparql")
    sw.setReturnFormat(fmt)
    return sw


# --- real clients ----------------------------------------------------------------------------------

def test_sparqlwrapper_reads_in_every_results_format(server):
    url, _ = server
    sw = _wrapper(url, JSON)
    sw.setQuery(CAUSES)
    got = [b["c"]["value"].rsplit("/", 1)[-1] for b in sw.queryAndConvert()["results"]["bindings"]]
    assert got == ["AuxLossDisabled", "GateInitBias", "LearningRateTooHigh"]
    for fmt, media in ((XML, "application/sparql-results+xml"), (CSV, "text/csv"),
                       (TSV, "text/tab-separated-values")):
        sw = _wrapper(url, fmt)
        sw.setQuery(CAUSES)
        resp = sw.query()
        assert resp.response.headers["content-type"].startswith(media)
        assert b"GateInitBias" in resp.response.read()
    sw = _wrapper(url, JSON)
    sw.setMethod("POST")
    sw.setQuery("ASK { kb:GateInitBias a dt:Cause }")  # dt:, kb:, ... are predeclared
    assert sw.queryAndConvert()["boolean"] is True


def test_sparqlwrapper_construct_and_errors(server):
    url, _ = server
    sw = _wrapper(url, TURTLE)
    sw.setQuery("CONSTRUCT { ?c a dt:Cause } WHERE { ?c a dt:Cause }")
    g = Graph().parse(data=sw.queryAndConvert(), format="turtle")
    assert len(g) == 3
    sw = _wrapper(url, JSON)
    sw.setQuery("SELECT * WHERE { ?s ?p }")
    with pytest.raises(QueryBadFormed):
        sw.query()


def test_sparqlwrapper_writes_with_the_token_only(server):
    url, store = server
    sw = _wrapper(url, JSON)
    sw.setMethod("POST")
    sw.setQuery("INSERT DATA { GRAPH <urn:test:sw> { <urn:a> <urn:b> 'via SPARQLWrapper' } }")
    with pytest.raises(Unauthorized):
        sw.query()
    sw.addCustomHttpHeader("Authorization", f"Bearer {TOKEN}")
    sw.query()
    assert store.query("ASK { GRAPH <urn:test:sw> { <urn:a> <urn:b> 'via SPARQLWrapper' } }")


def test_rdflib_sparqlstore_reads_and_updatestore_writes_with_the_token(server):
    url, store = server
    g = Graph(store=SPARQLStore(url + "/sparql"))
    assert len(list(g.query(CAUSES))) == 3
    up = SPARQLUpdateStore(url + "/sparql", url + "/sparql", headers=dict(AUTH))
    graph = Graph(store=up, identifier=URIRef("urn:test:rdflib"))
    graph.add((URIRef("urn:x"), URIRef("urn:p"), Literal("written by rdflib")))
    assert store.query("ASK { GRAPH <urn:test:rdflib> { <urn:x> <urn:p> 'written by rdflib' } }")
    assert {str(o) for o in graph.objects(URIRef("urn:x"), URIRef("urn:p"))} == {"written by rdflib"}
    denied = Graph(store=SPARQLUpdateStore(url + "/sparql", url + "/sparql"), identifier=URIRef("urn:test:no"))
    with pytest.raises(Exception, match="401|Unauthorized"):
        denied.add((URIRef("urn:x"), URIRef("urn:p"), Literal("no")))


def test_rdflib_dataset_default_graph_pitfall(server):
    """rdflib's Dataset sends default-graph-uri=urn:x-rdflib:default; only default_union=True sees the graphs."""
    url, _ = server
    q = "SELECT (COUNT(DISTINCT ?g) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }"
    union = Dataset(store=SPARQLUpdateStore(url + "/sparql", url + "/sparql"), default_union=True)
    assert int(next(iter(union.query(q)))[0]) >= 3


# --- the token rule and protocol statuses ----------------------------------------------------------

def test_updates_need_allow_update_and_a_valid_token(server, readonly):
    url, _ = server
    update = {"content-type": "application/sparql-update"}
    body = "INSERT DATA { <urn:a> <urn:b> <urn:c> }"
    assert httpx.post(url + "/sparql", content=body, headers=update).status_code == 401
    bad = httpx.post(url + "/sparql", content=body, headers={**update, "Authorization": "Bearer nope"})
    assert bad.status_code == 401 and bad.headers["www-authenticate"].startswith("Bearer")
    assert httpx.post(url + "/sparql", content=body, headers={**update, **AUTH}).status_code == 204
    assert httpx.post(readonly + "/sparql", content=body, headers={**update, **AUTH}).status_code == 403
    assert httpx.post(readonly + "/sparql", data={"update": body}, headers=AUTH).status_code == 403
    put = httpx.put(readonly + "/rdf-graphs", params={"graph": "urn:g"}, content="<urn:a> <urn:b> <urn:c> .",
                    headers={"content-type": "text/turtle", **AUTH})
    assert put.status_code == 403
    put = httpx.put(url + "/rdf-graphs", params={"graph": "urn:g"}, content="<urn:a> <urn:b> <urn:c> .",
                    headers={"content-type": "text/turtle"})
    assert put.status_code == 401
    assert httpx.get(readonly + "/rdf-graphs", params={"graph": GRAPH_KB}).status_code == 200


def test_allow_update_without_a_token_is_refused():
    with pytest.raises(KgError, match="token"):
        create_app(open_store(None), allow_update=True)


def test_negotiation_and_media_type_errors(server):
    url, _ = server
    q = {"query": CAUSES}
    assert httpx.get(url + "/sparql", params=q, headers={"accept": "image/png"}).status_code == 406
    ask = {"query": "ASK {}"}
    assert httpx.get(url + "/sparql", params=ask, headers={"accept": "text/csv"}).status_code == 406
    r = httpx.get(url + "/sparql", params={"query": "CONSTRUCT { ?c a dt:Cause } WHERE { ?c a dt:Cause }"},
                  headers={"accept": "application/ld+json"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/ld+json")
    assert len(json.loads(r.text)) == 3
    for media in ("application/n-triples", "application/rdf+xml", "text/turtle"):
        r = httpx.get(url + "/sparql", params={"query": "DESCRIBE kb:GateInitBias"}, headers={"accept": media})
        assert r.headers["content-type"].startswith(media) and b"GateInitBias" in r.content
    assert httpx.post(url + "/sparql", content=CAUSES, headers={"content-type": "text/plain"}).status_code == 415
    r = httpx.put(url + "/rdf-graphs", params={"graph": "urn:g"}, content="x", headers={"content-type": "image/png",
                                                                                         **AUTH})
    assert r.status_code == 415
    r = httpx.put(url + "/rdf-graphs", params={"graph": "urn:g"}, content="<a> <b> .",
                  headers={"content-type": "text/turtle", **AUTH})
    assert r.status_code == 400 and "does not parse" in r.text
    assert httpx.delete(url + "/rdf-graphs", params={"graph": "urn:missing"}, headers=AUTH).status_code == 404


def test_dataset_semantics(server):
    url, _ = server
    q = "SELECT (COUNT(*) AS ?n) WHERE { ?c a dt:Cause }"

    def count(**params):
        r = httpx.get(url + "/sparql", params={"query": q, **params}, headers={"accept": "application/json"})
        return int(r.json()["results"]["bindings"][0]["n"]["value"])
    assert count() == 3  # no dataset: the union of all graphs
    assert count(**{"default-graph-uri": GRAPH_KB}) == 3
    assert count(**{"default-graph-uri": "urn:empty"}) == 0
    from_kb = "SELECT (COUNT(*) AS ?n) FROM <urn:empty> WHERE { ?c a dt:Cause }"
    r = httpx.get(url + "/sparql", params={"query": from_kb}, headers={"accept": "application/json"})
    assert r.json()["results"]["bindings"][0]["n"]["value"] == "0"  # FROM is honoured
    r = httpx.post(url + "/sparql", data={"update": "INSERT { GRAPH <urn:test:copy> { ?c a <urn:C> } } "
                                                    "WHERE { ?c a dt:Cause }",
                                          "using-graph-uri": GRAPH_KB}, headers=AUTH)
    assert r.status_code == 204
    assert count(**{"default-graph-uri": "urn:test:copy"}) == 0
    r = httpx.get(url + "/sparql", params={"query": "SELECT (COUNT(*) AS ?n) { ?c a <urn:C> }"},
                  headers={"accept": "application/json"})
    assert r.json()["results"]["bindings"][0]["n"]["value"] == "3"


def test_service_is_disabled(server):
    url, _ = server
    r = httpx.get(url + "/sparql", params={"query": "SELECT * { SERVICE <http://127.0.0.1:9/x> { ?s ?p ?o } }"})
    assert r.status_code == 403 and "SERVICE" in r.text


# --- limits -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def limited():
    store = open_store(None)
    # 3,000 values: the pairwise query below takes about 1 s on the 2-core dev machine, well past the 0.15 s limit
    # on a faster one too
    store.load_data("".join(f"<urn:s{i}> <urn:p> {i} .\n" for i in range(3000)), graph="urn:big")
    limits = Limits(query_timeout_s=0.15, max_rows=10, max_body_bytes=2000, workers=2)
    with serving(create_app(store, allow_update=True, token=TOKEN, limits=limits)) as url:
        yield url


def test_result_cap_timeout_and_body_cap(limited):
    url = limited
    r = httpx.get(url + "/sparql", params={"query": "SELECT * { ?s ?p ?o }"})
    assert r.status_code == 422 and "more than 10 rows" in r.text
    r = httpx.get(url + "/sparql", params={"query": "CONSTRUCT WHERE { ?s ?p ?o }"})
    assert r.status_code == 422
    assert httpx.get(url + "/sparql", params={"query": "SELECT * { ?s ?p ?o } LIMIT 10"}).status_code == 200
    slow = "SELECT (COUNT(*) AS ?n) { ?a <urn:p> ?x . ?b <urn:p> ?y FILTER(?x < ?y) }"
    t0 = time.perf_counter()
    r = httpx.get(url + "/sparql", params={"query": slow}, timeout=30)
    assert r.status_code == 503 and "time limit of 0.15 s" in r.text
    assert time.perf_counter() - t0 < 5
    r = httpx.post(url + "/sparql", content="ASK {} #" + "x" * 3000,
                   headers={"content-type": "application/sparql-query"})
    assert r.status_code == 413
    r = httpx.post(url + "/dsl", json={"query": "runs " + " " * 3000})
    assert r.status_code == 413


# --- DSL, runs, health, docs ---------------------------------------------------------------------------

def test_dsl_endpoint(server):
    url, _ = server
    r = httpx.post(url + "/dsl", json={"query": "suggest for run moe-1 limit 2"})
    body = r.json()
    assert r.status_code == 200 and body["kind"] == "suggest"
    assert [row["remedy"] for row in body["rows"]] == ["EnableAuxLoss", "RouterInitRescale"]
    assert body["sparql"] and "dt:Hypothesis" in body["sparql"][0] and body["python_step"]
    r = httpx.post(url + "/dsl", content="causes of run moe-1", headers={"content-type": "text/plain"})
    assert [row["cause"] for row in r.json()["rows"]] == ["GateInitBias", "AuxLossDisabled"]
    bad = httpx.post(url + "/dsl", json={"query": "causes of run moe-1 limt 3"}).json()
    assert bad["error"] == "DslSyntaxError" and bad["line"] == 1 and bad["column"] == 21
    unknown = httpx.post(url + "/dsl", json={"query": "remedies for cause GateInitBais"})
    assert unknown.status_code == 400 and unknown.json()["suggestions"] == ["GateInitBias"]
    assert httpx.post(url + "/dsl", json={"text": "x"}).status_code == 400


def test_runs_health_and_openapi(server):
    url, _ = server
    runs = httpx.get(url + "/runs").json()
    assert [r["run"] for r in runs] == ["clean-1", "dense-1", "moe-1"]
    report = httpx.get(url + "/runs/moe-1").json()
    assert report["run_dir"] == "/data/runs/moe-1"
    assert [f["id"] for f in report["findings"]] == ["f4", "f1", "f2", "f3"]
    assert [h["cause"] for h in report["hypotheses"]] == ["GateInitBias", "AuxLossDisabled"]
    assert {e["id"] for e in report["experiments"]} == {"t1", "t2"}
    assert httpx.get(url + "/runs/nope").status_code == 404
    assert httpx.get(url + "/runs/bad%20id").status_code == 404
    health = httpx.get(url + "/health").json()
    assert health["status"] == "ok" and health["updates"] is True
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert {"/sparql", "/rdf-graphs", "/dsl", "/runs", "/runs/{run_id}", "/health"} <= set(paths)
    assert httpx.get(url + "/docs").status_code == 200


def test_debugtune_remote_store_works_against_the_endpoint(server):
    """Our own tools: `open_store(<url>/sparql, token=…)` gives the same DSL answers as the embedded store."""
    from debugtune.query import run_query

    url, store = server
    remote = open_store(url + "/sparql", token=TOKEN)
    try:
        for text in ("suggest for run moe-1", "cases similar to run moe-1 threshold 0.5",
                     "symptoms of run moe-1 where severity >= 0.5", "explain cause GateInitBias for run moe-1"):
            assert run_query(text, remote).rows == run_query(text, store).rows, text
        remote.load_data("<urn:r> <urn:p> 'via the remote store' .", graph="urn:test:remote")
        assert "urn:test:remote" in remote.graphs()
        assert store.query("ASK { GRAPH <urn:test:remote> { <urn:r> <urn:p> 'via the remote store' } }")
    finally:
        remote.close()


def test_the_embedding_example_in_the_docs_runs():
    """docs/embedding.md's app, executed as written, serves /kg/sparql over the shipped knowledge base."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "embedding.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    namespace: dict = {"__name__": "embedding_example"}
    exec(compile(code, "docs/embedding.md", "exec"), namespace)
    with serving(namespace["app"]) as url:
        r = httpx.get(url + "/kg/sparql", params={"query": "ASK { kb:GateInitBias a dt:Cause }"})
        assert r.status_code == 200 and r.json()["boolean"] is True
        assert httpx.get(url + "/").json()["sparql"] == "/kg/sparql"
        r = httpx.put(url + "/kg/rdf-graphs", params={"graph": "urn:x"}, content="<urn:a> <urn:b> <urn:c> .",
                      headers={"content-type": "text/turtle"})
        assert r.status_code == 403


def test_a_sign_of_health_in_the_graph_is_rebuilt_as_a_sign_not_a_finding():
    """``/runs/{id}`` rebuilds the report from the graph, where a sign of health (LossFitsClosely) is stored
    beside the findings: it comes back under ``signs`` and leaves a run without findings healthy."""
    from debugtune.kg.assertions import replace_diagnosis
    from debugtune.kg.knowledge import load_knowledge
    from debugtune.server import run_report
    from tests.test_infer import f

    store = open_store(None)  # not the shared knowledge store: this adds a run
    load_knowledge(store)
    replace_diagnosis(store, "fit-1", {"run_dir": "/data/runs/fit-1"}, [f("LossFitsClosely", onset=150)])
    report = run_report(store, "fit-1")
    assert report["findings"] == [] and report["status"] == "healthy"
    assert [s["symptom"] for s in report["signs"]] == ["LossFitsClosely"]
