"""The W3C SPARQL 1.1 Protocol manifest, every test, against `cann-debug serve`'s app over real HTTP.

The manifest and data are read from ``../shared/fixtures/sparql-protocol/protocol`` (not copied). A
uvicorn on 127.0.0.1 (random free port) serves `debugtune.server.create_app` with updates enabled;
the runner adds ``Authorization: Bearer <token>`` to every request, because our endpoint refuses
updates without it (the unauthorised cases are tested in tests/test_server.py). Paths starting with
``/sparql/`` are mapped to our ``/sparql``, as the manifest's comment asks.

Inapplicable tests: none — all 34 run.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest
from rdflib import Graph, Namespace
from rdflib.collection import Collection
from rdflib.namespace import RDFS

from debugtune.kg import open_store
from debugtune.server import create_app
from tests.app_server import serving
from tests.conftest import SHARED_FIXTURES

MF = Namespace("http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#")
HT = Namespace("http://www.w3.org/2011/http#")
CNT = Namespace("http://www.w3.org/2011/content#")
UT = Namespace("http://www.w3.org/2009/sparql/tests/test-update#")
HTS = "http://www.w3.org/2011/http-statusCodes#StatusCode"
TOKEN = "w3c-runner-token"
INAPPLICABLE: dict[str, str] = {}
"""Test name → why it does not apply to this endpoint (none)."""


def _protocol_dir() -> Path:
    """Where `fixtures_dir` points (the tests are listed at collection time, before fixtures exist)."""
    return SHARED_FIXTURES / "sparql-protocol" / "protocol"


def _manifest_tests() -> list[tuple[str, dict]]:
    path = _protocol_dir() / "manifest.ttl"
    if not path.is_file():
        return []
    g = Graph().parse(path, format="turtle", publicID=path.as_uri())
    manifest = next(g.subjects(MF.entries, None))
    out = []
    for test in Collection(g, g.value(manifest, MF.entries)):
        data = [(str(g.value(d, UT.graph)), str(g.value(d, RDFS.label))) for d in g.objects(test, UT.graphData)]
        requests = []
        for req in Collection(g, g.value(g.value(test, MF.action), HT.requests)):
            body = g.value(req, HT.body)
            headers = {}
            hlist = g.value(req, HT.headers)
            if hlist is not None:
                for h in Collection(g, hlist):
                    headers[str(g.value(h, HT.fieldName))] = str(g.value(h, HT.fieldValue))
            resp = g.value(req, HT.resp)
            expected_bool = g.value(resp, MF.expectedBoolean)
            requests.append({
                "method": str(g.value(req, HT.methodName)), "path": str(g.value(req, HT.absolutePath)),
                "headers": headers,
                "body": None if body is None else (str(g.value(body, CNT.chars)),
                                                   str(g.value(body, CNT.characterEncoding) or "UTF-8")),
                "status": sorted(str(s)[len(HTS):-2] for s in g.objects(resp, MF.expectedStatus)),
                "format": None if g.value(resp, MF.expectedFormat) is None else str(g.value(resp, MF.expectedFormat)),
                "boolean": None if expected_bool is None else bool(expected_bool.toPython()),
            })
        name = str(test).rsplit("#", 1)[-1]
        out.append((name, {"name": str(g.value(test, MF.name)), "data": data, "requests": requests}))
    return out


TESTS = _manifest_tests()


@pytest.fixture(scope="module")
def endpoint(fixtures_dir):
    store = open_store(None)
    with serving(create_app(store, allow_update=True, token=TOKEN)) as url:
        yield url, store


def _boolean(resp: httpx.Response) -> bool:
    media = resp.headers["content-type"].split(";")[0]
    fmt = {"application/sparql-results+json": ox.QueryResultsFormat.JSON,
           "application/sparql-results+xml": ox.QueryResultsFormat.XML}[media]
    result = ox.parse_query_results(resp.content, format=fmt)
    assert isinstance(result, ox.QueryBoolean), f"not a boolean result: {resp.text[:200]}"
    return bool(result)


def _check_tabular(resp: httpx.Response) -> None:
    media = resp.headers["content-type"].split(";")[0]
    if media == "text/csv":
        rows = list(csv.reader(io.StringIO(resp.text)))
        assert rows and rows[0], "CSV without a header"
        return
    fmt = {"application/sparql-results+json": ox.QueryResultsFormat.JSON,
           "application/sparql-results+xml": ox.QueryResultsFormat.XML,
           "text/tab-separated-values": ox.QueryResultsFormat.TSV}[media]
    assert isinstance(ox.parse_query_results(resp.content, format=fmt), ox.QuerySolutions)


def _check_rdf(resp: httpx.Response) -> None:
    media = resp.headers["content-type"].split(";")[0]
    fmt = ox.RdfFormat.from_media_type(media)
    assert fmt is not None, f"not an RDF media type: {media}"
    list(ox.parse(resp.content, format=fmt))


@pytest.mark.parametrize("name,test", TESTS, ids=[n for n, _ in TESTS])
def test_w3c_protocol(endpoint, name, test):
    if name in INAPPLICABLE:
        pytest.skip(INAPPLICABLE[name])
    url, store = endpoint
    store.clear()
    for file, label in test["data"]:
        store.load(_protocol_dir() / Path(file).name, graph=label)
    with httpx.Client(base_url=url, timeout=30, follow_redirects=True) as client:
        for n, req in enumerate(test["requests"]):
            assert req["path"].startswith("/sparql/")
            path = "/sparql" + req["path"][len("/sparql/"):]
            content = None if req["body"] is None else req["body"][0].encode(req["body"][1].lower())
            headers = {**req["headers"], "authorization": f"Bearer {TOKEN}"}
            resp = client.request(req["method"], path, content=content, headers=headers)
            assert str(resp.status_code)[0] in {s[0] for s in req["status"]}, (
                f"{test['name']} request {n}: HTTP {resp.status_code} {resp.text[:300]}, expected {req['status']}")
            if req["format"] == "boolean":
                value = _boolean(resp)
                if req["boolean"] is not None:
                    assert value == req["boolean"], f"{test['name']}: ASK gave {value}"
            elif req["format"] == "tabular":
                _check_tabular(resp)
            elif req["format"] == "RDF":
                _check_rdf(resp)


def test_manifest_was_found_and_complete(fixtures_dir):
    assert len(TESTS) == 34, "the W3C protocol manifest lists 34 tests"
    assert json.dumps(INAPPLICABLE) == "{}"
