"""The Store interface: the same queries give the same results on all three backends."""

from __future__ import annotations

import pyoxigraph as ox
import pytest

from debugtune.kg import (
    AskResult,
    EndpointError,
    GraphResult,
    KgError,
    RdfSyntaxError,
    SelectResult,
    SparqlSyntaxError,
    StoreLockedError,
    open_store,
)
from tests.oxigraph_server import oxigraph_serve

DATA_A = """@prefix ex: <http://example.org/> .
ex:r1 a ex:Run ; ex:lr 0.1 ; ex:loss 2.5 ; ex:name "first" ; ex:next ex:r2 .
ex:r2 a ex:Run ; ex:lr 0.01 ; ex:loss 1.5 ; ex:name "second"@en ; ex:next ex:r3 .
ex:r3 a ex:Run ; ex:lr 0.001 ; ex:loss 1.0 ; ex:tag [ ex:k "v" ] .
"""
DATA_B = """@prefix ex: <http://example.org/> .
ex:r4 a ex:Run ; ex:lr 0.5 ; ex:loss 9.0 .
ex:r1 ex:note "in b" .
"""
G_A, G_B = "urn:test:a", "urn:test:b"

QUERIES = {
    "point": "SELECT ?lr WHERE { <http://example.org/r2> <http://example.org/lr> ?lr }",
    "join_filter_order": """PREFIX ex: <http://example.org/>
        SELECT ?r ?lr ?loss WHERE { ?r a ex:Run ; ex:lr ?lr ; ex:loss ?loss FILTER(?lr < 0.2) }
        ORDER BY DESC(?loss) LIMIT 2""",
    "aggregate": """PREFIX ex: <http://example.org/>
        SELECT (COUNT(?r) AS ?n) (AVG(?loss) AS ?avg) (MAX(?lr) AS ?max) WHERE { ?r ex:loss ?loss ; ex:lr ?lr }""",
    "path": """PREFIX ex: <http://example.org/> SELECT ?x WHERE { ex:r1 ex:next+ ?x } ORDER BY ?x""",
    "union_graphs": """PREFIX ex: <http://example.org/>
        SELECT ?g ?r WHERE { GRAPH ?g { ?r a ex:Run } } ORDER BY ?g ?r""",
    "default_union": """PREFIX ex: <http://example.org/> SELECT ?note WHERE { ex:r1 ex:note ?note }""",
    "optional_unbound": """PREFIX ex: <http://example.org/>
        SELECT ?r ?name WHERE { ?r a ex:Run OPTIONAL { ?r ex:name ?name } } ORDER BY ?r""",
    "prefixes_predeclared": "SELECT (COUNT(*) AS ?n) WHERE { ?s rdf:type ?o }",
}


@pytest.fixture(params=["memory", "disk", "remote"])
def store(request, tmp_path):
    """An empty store of each backend; the remote one is a real `oxigraph serve` on 127.0.0.1."""
    if request.param == "memory":
        st = open_store(None)
        yield st
    elif request.param == "disk":
        st = open_store(tmp_path / "store")
        yield st
    else:
        with oxigraph_serve(tmp_path / "server") as url:
            st = open_store(url + "/query")
            yield st
            st.close()
            return
    st.close()


def _load(st):
    import tempfile
    from pathlib import Path

    assert st.load_data(DATA_A, graph=G_A) == 15
    path = Path(tempfile.mkdtemp()) / "b.ttl"
    path.write_text(DATA_B)
    assert st.load(path, graph=G_B) == 4


def _normalise(result):
    """A backend-independent view: blank nodes renamed by first appearance."""
    if isinstance(result, SelectResult):
        names: dict[str, str] = {}
        rows = []
        for row in result.rows:
            out = []
            for cell in row:
                if isinstance(cell, ox.BlankNode):
                    out.append(names.setdefault(cell.value, f"_:b{len(names)}"))
                else:
                    out.append(None if cell is None else str(cell))
            rows.append(tuple(out))
        return result.variables, rows
    return result


def test_graphs_count_clear(store):
    _load(store)
    assert store.graphs() == [G_A, G_B]
    assert store.count(G_A) == 15
    assert store.count(G_B) == 4
    store.clear(G_B)
    assert store.graphs() == [G_A]


def test_result_kinds(store):
    _load(store)
    assert isinstance(store.query("ASK { ?s ?p ?o }"), AskResult)
    assert bool(store.query("ASK { ?s ?p ?o }"))
    graph = store.query("CONSTRUCT { ?s ?p ?o } WHERE { GRAPH <urn:test:b> { ?s ?p ?o } }")
    assert isinstance(graph, GraphResult) and len(graph) == 4
    rows = store.query(QUERIES["join_filter_order"])
    assert [r["loss"] for r in rows.dicts()] == [2.5, 1.5]


def test_typed_methods(store):
    """select / ask / construct give one result type each; a query of another form fails before it runs."""
    _load(store)
    assert store.ask("ASK { ?s ?p ?o }") is True
    assert store.ask("PREFIX ex: <http://example.org/> ASK { ex:r1 ex:lr 7 }") is False
    graph = store.construct("CONSTRUCT { ?s ?p ?o } WHERE { GRAPH <urn:test:b> { ?s ?p ?o } }")
    assert isinstance(graph, GraphResult) and len(graph) == 4
    assert [r["loss"] for r in store.select(QUERIES["join_filter_order"]).dicts()] == [2.5, 1.5]
    for method, text in ((store.select, "ASK { ?s ?p ?o }"), (store.ask, "SELECT ?s WHERE { ?s ?p ?o }"),
                         (store.construct, "# a comment\nSELECT * WHERE { ?s ?p ?o }")):
        with pytest.raises(KgError, match="query was expected"):
            method(text)


def test_update_and_dataset(store):
    _load(store)
    store.update('INSERT DATA { GRAPH <urn:test:c> { <http://example.org/x> <http://example.org/p> "1" } }')
    assert G_A in store.graphs() and "urn:test:c" in store.graphs()
    only_b = store.query("SELECT ?s WHERE { ?s ?p ?o }", default_graph=[G_B])
    assert len(only_b) == 4


@pytest.fixture(scope="module")
def reference_results():
    st = open_store(None)
    _load(st)
    return {name: _normalise(st.query(q)) for name, q in QUERIES.items()}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_parity_with_memory(store, name, reference_results):
    _load(store)
    assert _normalise(store.query(QUERIES[name])) == reference_results[name]


def test_malformed_query_names_position(store):
    with pytest.raises(SparqlSyntaxError) as err:
        store.query("SELECT * WHERE { ?s ?p }")
    assert err.value.line == 1 and err.value.column is not None
    assert "line 1" in str(err.value)


def test_malformed_update_changes_nothing(store):
    _load(store)
    before = store.count(G_A)
    with pytest.raises(KgError):
        store.update("INSERT DATA { GRAPH <urn:test:a> { <http://e/x> <http://e/p> 1 } } ; DELETE WHERE { ?s }")
    assert store.count(G_A) == before


def test_load_error_names_file_and_line_and_writes_nothing(store, tmp_path):
    good = tmp_path / "good.ttl"
    good.write_text(DATA_A)
    bad = tmp_path / "bad.ttl"
    bad.write_text("@prefix ex: <http://example.org/> .\nex:a ex:b ex:c .\nex:a ex:b .\n")
    with pytest.raises(RdfSyntaxError) as err:
        store.load([good, bad], graph=G_A)
    assert err.value.source.endswith("bad.ttl") and err.value.line == 3
    assert store.graphs() == []


def test_unreachable_endpoint_fails_fast():
    import time

    t0 = time.monotonic()
    with pytest.raises(EndpointError) as err:
        open_store("http://127.0.0.1:9/sparql")
    assert "http://127.0.0.1:9/sparql" in str(err.value)
    assert time.monotonic() - t0 < 5


def test_disk_store_persists_and_locks(tmp_path):
    st = open_store(tmp_path / "s")
    st.load_data(DATA_A, graph=G_A)
    with pytest.raises(StoreLockedError):
        open_store(tmp_path / "s")
    st.close()
    del st
    import gc

    gc.collect()
    again = open_store(tmp_path / "s")
    assert again.count(G_A) == 15


def test_closing_a_disk_store_releases_its_lock(tmp_path):
    first = open_store(tmp_path / "s")
    first.load_data(DATA_A, graph=G_A)
    first.close()
    second = open_store(tmp_path / "s")
    assert second.count(G_A) == 15
    second.close()


def test_a_query_naming_its_dataset_keeps_it(store):
    if store.target.startswith("http"):
        pytest.skip("oxigraph serve --union-default-graph overrides FROM (a server setting; see docs/store.md)")
    _load(store)
    rows = store.query("SELECT ?s WHERE { ?s ?p ?o } ", default_graph=None)
    assert len(rows) == 19
    own = store.query("PREFIX ex: <http://example.org/> SELECT ?s FROM <urn:test:b> WHERE { ?s ?p ?o }")
    assert len(own) == 4


def test_on_disk_store_creates_missing_parent_folders(tmp_path):
    st = open_store(tmp_path / "a" / "b" / "store")
    st.load_data(DATA_A, graph=G_A)
    assert st.count(G_A) == 15
    st.close()
