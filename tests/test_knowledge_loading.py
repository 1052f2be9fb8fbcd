"""Loading the ontology and knowledge base: errors name file and line, nothing half-loaded, reload skipped."""

from __future__ import annotations

import pytest
import rdflib

from debugtune import ontology
from debugtune.kg import RdfSyntaxError, open_store
from debugtune.kg.knowledge import KnowledgeSource, load_knowledge, thresholds
from debugtune.kg.namespaces import DT, GRAPH_KB, GRAPH_ONTOLOGY, KB, local_name
from debugtune.kg.validate import validate_graph

GOOD = f"""@prefix dt: <{DT}> . @prefix kb: <{KB}> . @prefix dct: <http://purl.org/dc/terms/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
kb:T1 a dt:Threshold ; dt:thresholdKey "slow_rank.spread" ; dt:value 0.05 ; dct:source <https://example.org/s> .
"""


def _sources(tmp_path, *texts):
    files = []
    for i, text in enumerate(texts):
        f = tmp_path / f"k{i}.ttl"
        f.write_text(text)
        files.append(f)
    return [KnowledgeSource(GRAPH_ONTOLOGY, (ontology.ONTOLOGY,)), KnowledgeSource(GRAPH_KB, tuple(files))]


def test_load_then_skip_unchanged(tmp_path):
    store = open_store(None)
    first = load_knowledge(store, sources=_sources(tmp_path, GOOD))
    assert first[GRAPH_KB] > 0 and first[GRAPH_ONTOLOGY] > 0
    again = load_knowledge(store, sources=_sources(tmp_path, GOOD))
    assert again == {GRAPH_ONTOLOGY: 0, GRAPH_KB: 0}
    assert thresholds(store) == {"slow_rank.spread": 0.05}


def test_syntax_error_names_file_and_line_and_keeps_store(tmp_path):
    store = open_store(None)
    load_knowledge(store, sources=_sources(tmp_path, GOOD))
    before = store.count(GRAPH_KB)
    broken = GOOD + "kb:T2 a dt:Threshold ;\n  dt:value .\n"
    with pytest.raises(RdfSyntaxError) as err:
        load_knowledge(store, sources=_sources(tmp_path, GOOD, broken))
    assert err.value.source.endswith("k1.ttl")
    assert err.value.line == 5
    assert "k1.ttl:5" in str(err.value)
    assert store.count(GRAPH_KB) == before


def test_shacl_reports_a_malformed_item():
    bad = f"""@prefix dt: <{DT}> . @prefix kb: <{KB}> . @prefix skos: <http://www.w3.org/2004/02/skos/core#> .
    kb:X a dt:Cause ; skos:prefLabel "x"@en .
    kb:L a dt:CausalLink ; dt:from kb:X ; dt:strength 1.5 ."""
    violations = validate_graph(rdflib.Graph().parse(data=bad, format="turtle"))
    found = {(local_name(v.focus), local_name(v.path or "")) for v in violations}
    assert ("X", "definition") in found and ("X", "source") in found
    assert ("L", "strength") in found and ("L", "to") in found


def test_shipped_knowledge_base_conforms():
    store = open_store(None)
    load_knowledge(store)
    from debugtune.kg.validate import validate_store

    assert [v.as_dict() for v in validate_store(store)] == []
