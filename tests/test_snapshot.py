"""The compiled knowledge-base snapshot (kg/snapshot.py): compiled once and reused, rebuilt when a file changes,
safe when two processes compile it at once, a fallback when the cache cannot be written, and the same
triples as parsing the Turtle."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from debugtune.kg import RdfSyntaxError, open_store
from debugtune.kg.knowledge import KnowledgeSource, default_sources, load_knowledge
from debugtune.kg.snapshot import cache_dir, compile_snapshot, snapshot_path

GRAPH = "https://w3id.org/debugtune/graph/test-snapshot"
TTL = """@prefix dt: <https://w3id.org/debugtune#> .
@prefix kb: <https://w3id.org/debugtune/kb/> .
kb:A a dt:Cause ; dt:weight {w} .
kb:B a dt:Symptom .
"""


def _source(tmp_path, weight: int = 1) -> KnowledgeSource:
    f = tmp_path / "src" / "a.ttl"
    f.parent.mkdir(exist_ok=True)
    f.write_text(TTL.format(w=weight))
    return KnowledgeSource(GRAPH, (f,))


def _triples(store) -> set[tuple[str, str, str]]:
    rows = store.query(f"SELECT ?s ?p ?o WHERE {{ GRAPH <{GRAPH}> {{ ?s ?p ?o }} }}").dicts()
    return {(str(r["s"]), str(r["p"]), str(r["o"])) for r in rows}


def test_compiled_once_reused_and_rebuilt_when_a_file_changes(tmp_path):
    src = _source(tmp_path)
    first = open_store(None)
    assert load_knowledge(first, sources=[src]) == {GRAPH: 4}  # three triples and the content hash
    path = snapshot_path(GRAPH, src.digest())
    assert path.is_file() and path.parent == cache_dir()
    stamp = path.stat().st_mtime_ns
    second = open_store(None)
    load_knowledge(second, sources=[src])
    assert path.stat().st_mtime_ns == stamp and _triples(second) == _triples(first)
    assert load_knowledge(second, sources=[src]) == {GRAPH: 0}  # unchanged: nothing to load

    changed = _source(tmp_path, weight=2)
    assert load_knowledge(second, sources=[changed]) == {GRAPH: 4}
    assert not path.exists() and snapshot_path(GRAPH, changed.digest()).is_file()  # the stale one is gone
    weights = second.query(f"SELECT ?w WHERE {{ GRAPH <{GRAPH}> {{ ?a dt:weight ?w }} }}").column("w")
    assert weights == [2]


def test_the_snapshot_holds_what_parsing_the_turtle_gives(tmp_path, monkeypatch):
    from_snapshot = open_store(None)
    load_knowledge(from_snapshot)
    monkeypatch.setenv("DEBUGTUNE_CACHE", str(tmp_path / "is-a-file" / "cache"))
    (tmp_path / "is-a-file").write_text("a file where the cache folder would be: the cache cannot be written")
    parsed = open_store(None)
    assert load_knowledge(parsed) == load_knowledge(open_store(None))
    for src in default_sources():
        q = f"SELECT (COUNT(*) AS ?n) WHERE {{ GRAPH <{src.graph}> {{ ?s ?p ?o }} }}"
        assert from_snapshot.query(q).scalar() == parsed.query(q).scalar() > 500
    assert not (tmp_path / "is-a-file" / "cache").exists()
    ask = "ASK { kb:GateInitBias a dt:Cause ; skos:prefLabel ?l . ?link a dt:CausalLink ; dt:from kb:GateInitBias }"
    assert from_snapshot.query(ask) and parsed.query(ask)


def _compile(args: tuple[str, str, str]) -> str:
    graph, file, cache = args
    os.environ["DEBUGTUNE_CACHE"] = cache
    from pathlib import Path

    src = KnowledgeSource(graph, (Path(file),))
    return str(compile_snapshot(src, src.digest()))


def test_two_processes_compiling_at_once_leave_one_whole_snapshot(tmp_path, monkeypatch):
    src = _source(tmp_path)
    cache = tmp_path / "shared-cache"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        paths = pool.map(_compile, [(GRAPH, str(src.files[0]), str(cache))] * 8)
    assert len(set(paths)) == 1
    assert sorted(p.name for p in cache.iterdir()) == [os.path.basename(paths[0])]  # no temporary file left
    monkeypatch.setenv("DEBUGTUNE_CACHE", str(cache))
    store = open_store(None)
    load_knowledge(store, sources=[src])
    assert len(_triples(store)) == 4


def test_a_syntax_error_names_the_file_and_changes_nothing(tmp_path):
    src = _source(tmp_path)
    store = open_store(None)
    load_knowledge(store, sources=[src])
    before = _triples(store)
    src.files[0].write_text("@prefix dt: <https://w3id.org/debugtune#> .\ndt:A dt:b dt:c ;\n  dt:d .\n")
    with pytest.raises(RdfSyntaxError) as err:
        load_knowledge(store, sources=[src])
    assert "a.ttl" in str(err.value) and err.value.line == 3
    assert _triples(store) == before and not snapshot_path(GRAPH, src.digest()).exists()


def test_a_damaged_snapshot_is_compiled_again(tmp_path):
    src = _source(tmp_path)
    load_knowledge(open_store(None), sources=[src])
    path = snapshot_path(GRAPH, src.digest())
    path.write_text("<urn:a> <urn:b> broken")
    store = open_store(None)
    assert load_knowledge(store, sources=[src]) == {GRAPH: 4}
    assert len(_triples(store)) == 4 and "broken" not in path.read_text()
