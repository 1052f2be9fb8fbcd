"""`cann-debug query` (DSL, --sparql, --json, --raw-sparql, the prompt), `debugtune.query`, and `cann-debug serve`."""

from __future__ import annotations

import gc
import json

import httpx
import pytest
from typer.testing import CliRunner

import debugtune
from debugtune.cli.apps import debug_app
from debugtune.kg import open_store
from tests.app_server import cann_debug_serve
from tests.query_kb import load_test_kb

runner = CliRunner()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dslcli") / "store"
    st = open_store(path)
    load_test_kb(st, shipped_kb=True)
    st.close()
    return str(path)


def _run(*args: str, input: str | None = None):
    result = runner.invoke(debug_app, list(args), input=input)
    return result


def test_query_prints_a_table_and_the_sparql(store_dir):
    r = _run("query", "causes of run moe-1", "--store", store_dir, "--sparql")
    assert r.exit_code == 0, r.output
    assert "# SPARQL 1/1" in r.output and "dt:Hypothesis" in r.output
    assert "GateInitBias" in r.output and "2 rows" in r.output


def test_query_json(store_dir):
    r = _run("query", "suggest for run moe-1 where risk <= low limit 5", "--store", store_dir, "--json")
    assert r.exit_code == 0, r.output
    body = json.loads(r.output)
    assert body["kind"] == "suggest" and body["sparql"] and body["python_step"]
    remedies = [row["remedy"] for row in body["rows"]]
    assert "EnableAuxLoss" in remedies and "RestartWithNewSeed" not in remedies
    assert all(row["risk"] == "low" for row in body["rows"])


def test_query_errors_exit_2_with_position(store_dir):
    r = _run("query", "causes of run moe-1 limt 3", "--store", store_dir)
    assert r.exit_code == 2 or "line 1, column 21" in str(r.exception)


def test_raw_sparql_mode(store_dir):
    r = _run("query", "--raw-sparql", "SELECT ?id WHERE { ?r dt:runId ?id } ORDER BY ?id", "--store", store_dir,
             "--json")
    assert r.exit_code == 0, r.output
    assert [row["id"] for row in json.loads(r.output)["rows"]] == ["clean-1", "dense-1", "moe-1"]


def test_prompt_runs_queries_and_keeps_history(store_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("DEBUGTUNE_HOME", str(tmp_path))
    r = _run("query", "--store", store_dir,
             input="causes of run moe-1\nsparql\nsymptoms of run moe-1 limit 1\ncauses of run moe-9\nquit\n")
    assert r.exit_code == 0, r.output
    assert "GateInitBias" in r.output and "# SPARQL 1/1" in r.output and "f4" in r.output
    assert "did you mean moe-1" in r.output
    assert "causes of run moe-1" in (tmp_path / "query_history").read_text()


def test_completion_words(store_dir):
    from debugtune.cli.query_cmd import completions

    st = open_store(store_dir)
    try:
        words = completions(st)
    finally:
        st.close()
    assert {"suggest", "GateInitBias", "RouterInitRescale", "gradient", "medium", "moe-1"} <= set(words)


def test_python_api(store_dir):
    st = open_store(store_dir)
    try:
        result = debugtune.query("remedies for cause AuxLossDisabled", store=st)
    finally:
        st.close()
    assert "EnableAuxLoss" in [r["remedy"] for r in result.rows]


def test_serve_command_over_http(tmp_path):
    """The real `cann-debug serve` process: read-only by default, updates with --allow-update and the token."""
    store_dir = str(tmp_path / "served")
    st = open_store(store_dir)
    load_test_kb(st, shipped_kb=True)
    st.close()
    del st
    gc.collect()
    token = tmp_path / "token"
    token.write_text("0123456789abcdef0123\n")
    token.chmod(0o600)
    log = tmp_path / "serve.log"
    with cann_debug_serve(store_dir, "--allow-update", "--token-file", str(token), log=log) as url:
        # the first query forks the first worker: up to two starts of START_S each under a loaded machine
        r = httpx.post(url + "/dsl", json={"query": "causes of run moe-1 limit 1"}, timeout=30)
        assert r.status_code == 200, f"{r.text}\nserver log:\n{log.read_text()[-3000:]}"
        assert r.json()["rows"][0]["cause"] == "GateInitBias"
        upd = {"content-type": "application/sparql-update"}
        body = "INSERT DATA { GRAPH <urn:t> { <urn:a> <urn:b> <urn:c> } }"
        assert httpx.post(url + "/sparql", content=body, headers=upd, timeout=30).status_code == 401
        ok = httpx.post(url + "/sparql", content=body, headers={**upd, "Authorization": "Bearer 0123456789abcdef0123"},
                        timeout=30)
        assert ok.status_code == 204


def test_serve_refuses_updates_without_a_token(store_dir):
    r = _run("serve", "--store", store_dir, "--allow-update")
    assert r.exit_code == 2 and "--token-file" in r.output
