"""The lexical SPARQL scan behind the endpoint: query form, FROM, SERVICE, and USING rewriting of updates."""

from __future__ import annotations

import pyoxigraph as ox
import pytest

from debugtune.kg.negotiation import choose
from debugtune.kg.sparql_scan import DatasetConflict, names_dataset, query_form, with_using


def test_query_form_and_dataset_ignore_strings_iris_comments_and_prefixed_names():
    assert query_form('PREFIX select: <http://x#> # SELECT\nASK { ?select <urn:a> "SELECT" }') == "ASK"
    assert query_form("construct where { ?s ?p ?o }") == "CONSTRUCT"
    assert names_dataset("SELECT * FROM <urn:g> { ?s ?p ?o }")
    assert not names_dataset("PREFIX from: <urn:x:> SELECT ?from { ?s from:p ?o } # FROM <urn:g>")
    assert query_form("PREFIX kb: <urn:kb:> ASK { kb:x\\'y ?p 'SELECT' }") == "ASK"  # an escaped ' is no string


def _run(update: str, graphs=(), named=()) -> set[tuple[str, str]]:
    store = ox.Store()
    store.update("INSERT DATA { GRAPH <urn:g1> { <urn:a> <urn:p> '}' } GRAPH <urn:g2> { <urn:b> <urn:p> 2 } }")
    store.update(with_using(update, graphs, named))
    return {(q.subject.value, q.graph_name.value if isinstance(q.graph_name, ox.NamedNode) else "")
            for q in store}


def test_using_clauses_scope_every_where():
    update = "INSERT { GRAPH <urn:out> { ?s a <urn:C> } } WHERE { ?s <urn:p> ?o } ; " \
             "insert { graph <urn:out2> { ?s a <urn:C> } } where { ?s ?p ?o FILTER(?o < 3) }"
    got = _run(update, ["urn:g2"])
    assert ("urn:b", "urn:out") in got and ("urn:a", "urn:out") not in got and ("urn:b", "urn:out2") in got
    named = _run("INSERT { GRAPH <urn:out> { ?s a <urn:C> } } WHERE { GRAPH ?g { ?s ?p ?o } }", (), ["urn:g1"])
    assert ("urn:a", "urn:out") in named and ("urn:b", "urn:out") not in named


def test_delete_where_shorthand_is_expanded():
    text = with_using("DELETE WHERE { ?s <urn:p> '}' }", ["urn:g1"], [])
    assert text.startswith("DELETE  { ?s <urn:p> '}' } USING <urn:g1> WHERE")
    assert ("urn:a", "urn:g1") in _run("DELETE WHERE { ?s <urn:p> '}' }", ["urn:g1"])  # USING reads, not writes


def test_a_dataset_given_twice_is_refused():
    for update in ("WITH <urn:g1> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
                   "DELETE { ?s ?p ?o } USING <urn:g1> WHERE { ?s ?p ?o }"):
        with pytest.raises(DatasetConflict):
            with_using(update, ["urn:g2"], [])
        assert with_using(update, [], []) == update


@pytest.mark.parametrize("accept,expected", [
    (None, "application/sparql-results+json"), ("text/csv", "text/csv"),
    ("text/csv;q=0.5, application/sparql-results+xml", "application/sparql-results+xml"),
    ("application/sparql-results+json;q=0, */*;q=0.1", "application/sparql-results+xml"),
    ("image/png", None), ("text/*", "text/csv"),
])
def test_content_negotiation(accept, expected):
    offers = ["application/sparql-results+json", "application/sparql-results+xml", "text/csv",
              "text/tab-separated-values"]
    assert choose(accept, offers) == expected
