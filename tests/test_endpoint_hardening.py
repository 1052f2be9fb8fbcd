"""Issue 18, the endpoint: no fetch through SERVICE, no crash by nesting, no lockout by timeouts, strict UTF-8,
and no plain-HTTP updates on a public bind. Over real HTTP (uvicorn on 127.0.0.1) with a real listener that
records whether the server ever fetched from it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import debug_app
from debugtune.cli.serve_cmd import check_exposure
from debugtune.kg.endpoint import EndpointSettings, Limits
from debugtune.kg.errors import SparqlRefused
from debugtune.kg.protocol import Operation, run_query
from debugtune.kg.sparql_guard import SparqlBounds, check_sparql
from debugtune.server import create_app
from tests.app_server import serving
from tests.query_kb import make_store

HEAVY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"


@pytest.fixture(scope="module")
def listener() -> Iterator[tuple[str, list[str]]]:
    """A SPARQL-results listener on loopback that records every request it gets."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            hits.append(self.path)
            body = b'{"head":{"vars":["a"]},"results":{"bindings":[{"a":{"type":"literal","value":"leak"}}]}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/sparql-results+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/", hits
    srv.shutdown()


@pytest.fixture(scope="module")
def server():
    with serving(create_app(make_store(), limits=Limits(query_timeout_s=1.0, workers=2))) as url:
        yield url


def bypasses(u: str) -> dict[str, str]:
    """SERVICE written so that a keyword scan misses it; each one fetched from ``u`` on main."""
    return {
        "escaped quote in a local name": f"SELECT * WHERE {{ VALUES ?z {{ kb:x\\'y }} SERVICE <{u}a> {{ ?a ?b ?c }} }}",
        "escaped hash in a local name": f"SELECT * WHERE {{ VALUES ?z {{ kb:x\\#y }} SERVICE <{u}b> {{ ?a ?b ?c }} }}",
        "keyword glued to a prefixed name": f"PREFIX : <{u}> SELECT * WHERE {{ SERVICE:c {{ ?a ?b ?c }} }}",
        "keywords glued together": f"SELECT * WHERE {{ SERVICESILENT<{u}d>{{ ?a ?b ?c }} }}",
        "less-than read as an IRI": f"SELECT * WHERE {{ BIND(1 AS ?a) BIND(2 AS ?b) FILTER(?a<?b&&'>x') "
                                    f"SERVICE <{u}e> {{ ?q ?r ?t }} FILTER('1'='1') }}",
        "comment after a less-than": f"SELECT * WHERE {{ BIND(1 AS ?a) BIND(2 AS ?b) FILTER(?a<?b)#>'''\n"
                                     f"SERVICE <{u}f> {{ ?q ?r ?t }}\n#'''\n }}",
        "lower case": f"select * where {{ service <{u}g> {{ ?a ?b ?c }} }}",
    }


def test_service_is_refused_however_it_is_written(server, listener):
    u, hits = listener
    for name, query in bypasses(u).items():
        r = httpx.get(server + "/sparql", params={"query": query})
        assert r.status_code == 403 and "SERVICE" in r.text, name
    r = httpx.post(server + "/sparql", data={"update": f"LOAD <{u}h>"})
    assert r.status_code == 403 and "LOAD" in r.text
    assert hits == []
    # names and strings that merely contain the word are not refused
    for ok in ("SELECT ?service WHERE { ?service ?p 'SERVICE' }",
               "SELECT * WHERE { ?s <https://schema.org/serviceType> ?o }",
               "SELECT * WHERE { kb:DataLoaderWait ?p ?o }"):
        assert httpx.get(server + "/sparql", params={"query": ok}).status_code == 200, ok


def test_a_named_endpoint_may_be_allowed(listener):
    u, hits = listener
    check_sparql(f"SELECT * WHERE {{ SERVICE <{u}ok> {{ ?a ?b ?c }} }}", bounds=SparqlBounds(services=(u + "ok",)))
    with pytest.raises(SparqlRefused):
        check_sparql(f"SELECT * WHERE {{ SERVICE <{u}other> {{ ?a ?b ?c }} }}",
                     bounds=SparqlBounds(services=(u + "ok",)))
    with pytest.raises(SparqlRefused):  # a variable endpoint is never allowed
        check_sparql("SELECT * WHERE { SERVICE ?e { ?a ?b ?c } }", bounds=SparqlBounds(services=(u + "ok",)))


def test_query_workers_cannot_open_network_sockets(listener):
    """Below the text guard: a SERVICE run directly on a worker (guard skipped) cannot reach the listener."""
    u, hits = listener
    store = make_store()
    settings = EndpointSettings(Limits(query_timeout_s=20, workers=1))
    settings.share(store)
    try:
        op = Operation("query", f"SELECT * WHERE {{ SERVICE <{u}direct> {{ ?a ?b ?c }} }}")
        with pytest.raises(Exception) as err:
            settings.run_limited(run_query, store.raw, op, "http://localhost/", None, settings)
        assert "ermission" in str(err.value) or "denied" in str(err.value), err.value
        assert hits == []
    finally:
        settings.close()


def test_deep_nesting_gets_400_and_the_server_lives(server):
    for query in ("SELECT * WHERE {" + "{" * 5000 + "}" * 5000 + "}",
                  "SELECT * WHERE { ?a ?b ?c FILTER(" + "(" * 20000 + "1" + ")" * 20000 + ") }",
                  "SELECT * WHERE {" + "OPTIONAL {" * 3000 + "}" * 3000 + "}",
                  "SELECT * WHERE { ?a ?b ?c " + " ".join("MINUS { ?a ?b ?c }" for _ in range(3000)) + " }"):
        r = httpx.post(server + "/sparql", content=query, headers={"content-type": "application/sparql-query"})
        assert r.status_code == 400 and "SPARQL refused" in r.text
    assert httpx.get(server + "/sparql", params={"query": "ASK { ?s ?p ?o }"}).json()["boolean"] is True


def test_timed_out_queries_free_their_workers(server):
    """Two cross products on two workers time out; right after, every cheap query answers within a second."""
    for _ in range(2):
        threads = [threading.Thread(target=lambda: httpx.get(server + "/sparql", params={"query": HEAVY},
                                                              timeout=30)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for _ in range(3):
            t0 = time.perf_counter()
            r = httpx.get(server + "/sparql", params={"query": "ASK { ?s ?p ?o }"}, timeout=30)
            assert r.status_code == 200 and time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("path", [
    "/sparql?query=%FF", "/sparql?query=ASK%20%7B%7D%ED%A0%80", "/rdf-graphs?graph=urn:%FF",
    "/rdf-graphs/%FF", "/query?q=runs%FF",
])
def test_invalid_utf8_in_the_url_gets_400(server, path):
    r = httpx.get(server + path)
    assert r.status_code == 400 and "UTF-8" in r.text


def test_invalid_text_in_bodies_gets_400(server):
    r = httpx.post(server + "/dsl", content=b'{"query": "runs \\ud800"}', headers={"content-type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.text
    r = httpx.post(server + "/dsl", content=b"runs \xff", headers={"content-type": "text/plain"})
    assert r.status_code == 400
    r = httpx.post(server + "/sparql", content=b"query=ASK%20%7B%7D%FF",
                   headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and "UTF-8" in r.text
    r = httpx.post(server + "/sparql", content=b"ASK {} # \xed\xa0\x80",
                   headers={"content-type": "application/sparql-query"})
    assert r.status_code == 400


def test_a_public_bind_warns_and_refuses_plain_http_updates(tmp_path):
    assert check_exposure("127.0.0.1", allow_update=True, tls=False, plain_http_ok=False) is None
    assert check_exposure("::1", allow_update=True, tls=False, plain_http_ok=False) is None
    assert "beyond loopback" in check_exposure("0.0.0.0", allow_update=False, tls=False, plain_http_ok=False)
    assert "beyond loopback" in check_exposure("0.0.0.0", allow_update=True, tls=False, plain_http_ok=True)
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    result = CliRunner().invoke(debug_app, ["serve", "--store", "memory", "--host", "0.0.0.0", "--allow-update",
                                            "--token-file", str(token)])
    assert result.exit_code == 2 and "--i-know-this-is-plain-http" in result.output


def test_raw_sparql_on_the_command_line_is_guarded(tmp_path, listener):
    """Exit 2 with the guard's message (main: a fetch and a traceback, or exit 139 on the deep query)."""
    u, hits = listener
    env = {**os.environ, "DEBUGTUNE_HOME": str(tmp_path)}
    for query in (next(iter(bypasses(u).values())), "SELECT * WHERE {" + "{" * 5000 + "}" * 5000 + "}"):
        proc = subprocess.run([sys.executable, "-c", "from debugtune.cli import debug_main; debug_main()", "query",
                               "--store", "memory", "--raw-sparql", query], capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == 2 and "SPARQL refused" in proc.stderr
    assert hits == []
