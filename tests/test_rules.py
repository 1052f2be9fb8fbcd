"""The SPARQL rule runner: USING injection, fixpoint, and the round cap."""

from __future__ import annotations

import pytest

from debugtune.kg import FixpointError, KgError, open_store
from debugtune.kg.namespaces import GRAPH_INFERRED
from debugtune.kg.rules import Rule, load_rules, run_rules, with_using

CHAIN = """@prefix ex: <http://example.org/> .
ex:a ex:next ex:b . ex:b ex:next ex:c . ex:c ex:next ex:d . ex:d ex:next ex:e ."""

TRANSITIVE = Rule("t", """PREFIX ex: <http://example.org/>
# a comment mentioning WHERE { should not confuse the scanner
INSERT { GRAPH <https://w3id.org/debugtune/graph/inferred> { ?a ex:reach ?c } }
WHERE { { ?a ex:next ?c } UNION { ?a ex:reach ?b . ?b ex:reach ?c } FILTER NOT EXISTS { ?a ex:reach ?c } }""", "t.rq")


def test_using_goes_before_the_top_level_where():
    text = 'INSERT { GRAPH <urn:g> { ?s <urn:p> "WHERE {" } } WHERE { ?s ?p ?o }'
    out = with_using(text, ["urn:a", "urn:b"])
    assert " ".join(out.split()).endswith('"WHERE {" } } USING <urn:a> USING <urn:b> WHERE { ?s ?p ?o }')


def test_fixpoint_across_named_graphs():
    store = open_store(None)
    store.load_data(CHAIN, graph="urn:data")
    report = run_rules(store, [TRANSITIVE])
    assert store.count(GRAPH_INFERRED) == 10  # 4 + 3 + 2 + 1 pairs
    assert report.added == 10 and report.rounds >= 2
    again = run_rules(store, [TRANSITIVE])
    assert again.added == 0 and again.rounds == 1


def test_round_cap_is_a_clear_error():
    growing = Rule("grow", """INSERT { GRAPH <https://w3id.org/debugtune/graph/inferred> { ?n <urn:p> ?m } }
        WHERE { { SELECT (COUNT(*) AS ?c) WHERE { ?s ?p ?o } } BIND(IRI(CONCAT("urn:n:", STR(?c))) AS ?n)
                BIND(?c AS ?m) }""", "grow.rq")
    store = open_store(None)
    store.load_data(CHAIN, graph="urn:data")
    with pytest.raises(FixpointError, match="after 3 rounds"):
        run_rules(store, [growing], max_rounds=3)


def test_shipped_rules_load_and_reject_non_rules(tmp_path):
    assert [r.name for r in load_rules()][:2] == ["10-subclass-types", "20-leads-to"]
    (tmp_path / "bad.rq").write_text("SELECT * { ?s ?p ?o }")
    with pytest.raises(KgError, match="bad.rq"):
        load_rules(tmp_path)
