"""Issue 36, the real `cann-debug serve` process over an on-disk store that the demo's code path wrote: read-only
(the default) and with --allow-update, with and without a token, it answers SPARQL, the DSL, the dashboard and
/runs; a query past its memory limit is stopped and logged while the server keeps answering; and cheap queries
from several clients all answer while updates land and other processes allocate memory."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app_server import cann_debug_serve
from tests.report_fixtures import seed_run

COUNT = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }"
DSL = "causes of run seed-moe limit 1"
TOKEN = "0123456789abcdef0123"
ALLOCATE = "import time\nwhile True:\n    b = b'x' * (160 * 2**20)\n    time.sleep(0.05)\n    del b\n"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory, _snapshot_cache) -> tuple[Path, int]:
    """An on-disk store written as `cann-debug demo --store DIR` writes it (its session store with the knowledge
    base, then step 1's diagnosis of the seed scenario's run), and its triple count."""
    from debugtune.api import diagnose
    from debugtune.cli.common import session_store

    path = tmp_path_factory.mktemp("demo") / "store"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEBUGTUNE_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("DEBUGTUNE_CACHE", str(_snapshot_cache))
        with session_store(str(path)) as st:
            assert diagnose(seed_run(), store=st).run == "seed-moe"
            n = st.count()
    return path, n


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return path


def _count(url: str, headers: dict[str, str] | None = None) -> int:
    r = httpx.get(url + "/sparql", params={"query": COUNT}, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["results"]["bindings"][0]["n"]["value"])


@pytest.mark.parametrize("mode", ["read-only", "read-only with a token file", "updates with a token"])
def test_serve_answers_over_the_store_the_demo_wrote(demo_store, token_file, tmp_path, mode):
    """GET /sparql (COUNT), POST /dsl, / and /runs answer 200 with and without a bearer token; updates follow the
    mode (403 read-only; 401 without the token, 204 with it, and the next COUNT sees the new triple)."""
    store, n = demo_store
    if mode == "updates with a token":
        store = Path(shutil.copytree(store, tmp_path / "store"))
    args = {"read-only": [], "read-only with a token file": ["--token-file", str(token_file)],
            "updates with a token": ["--allow-update", "--token-file", str(token_file)]}[mode]
    log = tmp_path / "serve.log"
    with cann_debug_serve(store, *args, log=log) as url:
        for auth in ({}, {"Authorization": f"Bearer {TOKEN}"}):
            assert _count(url, auth) == n
            dsl = httpx.post(url + "/dsl", json={"query": DSL}, headers=auth, timeout=30)
            assert dsl.status_code == 200, dsl.text
            assert dsl.json()["rows"][0]["cause"] == "GateInitBias"
            home = httpx.get(url + "/", headers=auth, timeout=30)
            assert home.status_code == 200 and 'href="/runs/seed-moe/page"' in home.text, home.text[-500:]
            runs = httpx.get(url + "/runs", headers=auth, timeout=30)
            assert runs.status_code == 200 and [r["run"] for r in runs.json()] == ["seed-moe"]
        update = {"content-type": "application/sparql-update"}
        body = "INSERT DATA { GRAPH <urn:t> { <urn:a> <urn:b> <urn:c> } }"
        denied = httpx.post(url + "/sparql", content=body, headers=update, timeout=30)
        if mode == "updates with a token":
            assert denied.status_code == 401
            ok = httpx.post(url + "/sparql", content=body, headers={**update, "Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 204 and _count(url) == n + 1
        else:
            assert denied.status_code == 403
    assert "Traceback" not in log.read_text() and "died" not in log.read_text(), log.read_text()[-3000:]


@pytest.fixture
def loaded_server(demo_store, token_file, tmp_path) -> Iterator[tuple[str, Path]]:
    """A copy of the demo store served with updates and a 256 MiB per-worker memory limit."""
    store = Path(shutil.copytree(demo_store[0], tmp_path / "store"))
    log = tmp_path / "serve.log"
    with cann_debug_serve(store, "--allow-update", "--token-file", str(token_file), "--workers", "2",
                          "--query-memory-mb", "256", log=log) as url:
        yield url, log


def test_a_heavy_query_is_stopped_and_the_server_keeps_answering(loaded_server):
    """A cross product sorted in memory passes 256 MiB of resident memory: 503 naming the limit, a log line saying so,
    and the next queries answer."""
    url, log = loaded_server
    n = _count(url)
    heavy = httpx.get(url + "/sparql", params={"query": "SELECT ?s ?o2 WHERE { ?s ?p ?o . ?s2 ?p2 ?o2 } ORDER BY ?o2 "
                                                        "LIMIT 1"}, timeout=60)
    assert heavy.status_code == 503 and "memory limit hit: RSS" in heavy.text and "> 256 MiB" in heavy.text
    assert _count(url) == n
    assert httpx.post(url + "/dsl", json={"query": DSL}, timeout=30).status_code == 200
    lines = [line for line in log.read_text().splitlines() if "stopped: memory limit hit" in line]
    assert len(lines) == 1 and "> 256 MiB" in lines[0], log.read_text()[-3000:]


def test_cheap_queries_all_answer_under_load(loaded_server):
    """8 clients × 6 cheap queries (SPARQL and DSL) while an update lands every 0.2 s (each one replaces the workers,
    which open a fresh checkpoint as the server compacts) and two processes allocate and free 160 MiB in a loop."""
    url, log = loaded_server
    hogs = [subprocess.Popen([sys.executable, "-c", ALLOCATE]) for _ in range(2)]
    stop = threading.Event()
    failures: list[str] = []
    written = [0]

    def writer() -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {TOKEN}",
                                               "content-type": "application/sparql-update"}) as c:
            while not stop.is_set():
                i = written[0]
                r = c.post(url + "/sparql", content=f"INSERT DATA {{ GRAPH <urn:load> {{ <urn:s{i}> <urn:p> {i} }} }}")
                if r.status_code != 204:
                    failures.append(f"update {r.status_code}: {r.text[:300]}")
                written[0] += 1
                stop.wait(0.2)

    def client(k: int) -> None:
        with httpx.Client(timeout=60) as c:
            for i in range(6):
                r = (c.get(url + "/sparql", params={"query": COUNT}) if (i + k) % 2 else
                     c.post(url + "/dsl", json={"query": DSL}))
                if r.status_code != 200:
                    failures.append(f"{r.request.method} {r.request.url.path} {r.status_code}: {r.text[:300]}")

    try:
        threads = [threading.Thread(target=writer)] + [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads[1:]:
            t.join(timeout=120)
        stop.set()
        threads[0].join(timeout=30)
    finally:
        stop.set()
        for h in hogs:
            h.kill()
            h.wait()
    assert not failures, "\n".join(failures) + "\n" + log.read_text()[-3000:]
    assert written[0] >= 2 and "died" not in log.read_text(), log.read_text()[-3000:]
