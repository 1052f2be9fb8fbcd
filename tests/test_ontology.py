"""The OWL ontology: loads in rdflib and owlready2, is consistent under HermiT, and the run-time
SPARQL rules derive what HermiT derives (class membership and causal reachability)."""

from __future__ import annotations

import shutil

import pytest
import rdflib

from debugtune import cases, ontology
from debugtune.kg import open_store
from debugtune.kg.namespaces import DT, GRAPH_INFERRED, KB
from debugtune.kg.rules import run_rules

owlready2 = pytest.importorskip("owlready2")
needs_java = pytest.mark.skipif(shutil.which("java") is None,
                                reason="HermiT (owlready2) needs a Java runtime; none on PATH")

SMALL_KB = f"""@prefix dt: <{DT}> . @prefix kb: <{KB}> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix dct: <http://purl.org/dc/terms/> .
kb:GateInitBias a dt:Cause . kb:RouterGradVanishing a dt:Symptom . kb:ExpertImbalance a dt:Symptom .
kb:LossOscillation a dt:Symptom .
kb:l1 a dt:CausalLink ; dt:from kb:GateInitBias ; dt:to kb:RouterGradVanishing ; dt:strength 0.8 .
kb:l2 a dt:CausalLink ; dt:from kb:RouterGradVanishing ; dt:to kb:ExpertImbalance ; dt:strength 0.7 .
kb:l3 a dt:CausalLink ; dt:from kb:ExpertImbalance ; dt:to kb:LossOscillation ; dt:strength 0.5 .
"""


def _ntriples(tmp_path, *turtle_texts: str, files=()) -> str:
    g = rdflib.Graph().parse(ontology.ONTOLOGY, format="turtle")
    for f in files:
        g.parse(f, format="turtle")
    for text in turtle_texts:
        g.parse(data=text, format="turtle")
    out = tmp_path / "onto.nt"
    g.serialize(out, format="nt", encoding="utf-8")
    return out.as_uri()


def test_loads_in_rdflib_and_owlready2(tmp_path):
    g = rdflib.Graph().parse(ontology.ONTOLOGY, format="turtle")
    classes = set(g.subjects(rdflib.RDF.type, rdflib.OWL.Class))
    for name in ("Symptom", "Cause", "Remedy", "CausalLink", "Case", "Finding", "Hypothesis",
                 "Experiment", "PreventionRule", "TuningParameter", "Metric", "Dimension"):
        assert rdflib.URIRef(DT + name) in classes
    world = owlready2.World()
    onto = world.get_ontology(_ntriples(tmp_path)).load()
    assert any(c.name == "Finding" for c in onto.classes())


def test_reuses_standard_vocabularies():
    g = rdflib.Graph().parse(ontology.ONTOLOGY, format="turtle")
    sub = rdflib.RDFS.subClassOf
    assert (rdflib.URIRef(DT + "Finding"), sub, rdflib.URIRef("http://www.w3.org/ns/sosa/Observation")) in g
    assert (rdflib.URIRef(DT + "Experiment"), sub, rdflib.URIRef("http://www.w3.org/ns/mls#Run")) in g
    assert (rdflib.URIRef(DT + "Case"), sub, rdflib.URIRef("http://www.w3.org/ns/prov#Entity")) in g
    assert (rdflib.URIRef(DT + "Metric"), sub, rdflib.URIRef("http://www.w3.org/ns/sosa/ObservableProperty")) in g


@needs_java
def test_hermit_consistent_with_knowledge_base(tmp_path):
    world = owlready2.World()
    world.get_ontology(_ntriples(tmp_path, files=cases.turtle_files())).load()
    owlready2.sync_reasoner_hermit(world, infer_property_values=False, debug=0)
    assert list(world.inconsistent_classes()) == []


@needs_java
def test_hermit_detects_an_inconsistency(tmp_path):
    bad = f"@prefix dt: <{DT}> . @prefix kb: <{KB}> . kb:X a dt:Cause, dt:Symptom ."
    world = owlready2.World()
    world.get_ontology(_ntriples(tmp_path, bad)).load()
    with pytest.raises(owlready2.OwlReadyInconsistentOntologyError):
        owlready2.sync_reasoner_hermit(world, debug=0)


@needs_java
def test_sparql_rules_agree_with_hermit(tmp_path):
    world = owlready2.World()
    onto = world.get_ontology(_ntriples(tmp_path, SMALL_KB)).load()
    with onto:
        owlready2.sync_reasoner_hermit(world, infer_property_values=True, debug=0)
    leads = world.get_ontology(DT).leadsTo
    hermit_leads = {(a.iri, b.iri) for a, b in leads.get_relations()}
    individuals = {str(s) for s in rdflib.Graph().parse(data=SMALL_KB, format="turtle").subjects()}
    hermit_types = {(i, c.iri) for i in individuals for c in world[i].INDIRECT_is_a
                    if hasattr(c, "iri") and c.iri.startswith(DT)}

    store = open_store(None)
    store.load_data(SMALL_KB, graph="urn:test:kb")
    store.load(ontology.ONTOLOGY, graph="urn:test:onto")
    run_rules(store)
    g = f"<{GRAPH_INFERRED}>"
    ours = store.query(f"SELECT ?a ?b WHERE {{ GRAPH {g} {{ ?a dt:leadsTo ?b }} }}")
    assert {(r["a"], r["b"]) for r in ours.dicts()} == hermit_leads
    types = store.query(f"""SELECT ?x ?c WHERE {{ ?x a ?c FILTER(STRSTARTS(STR(?x), "{KB}"))
                             FILTER(STRSTARTS(STR(?c), "{DT}")) }}""")
    assert {(r["x"], r["c"]) for r in types.dicts()} == hermit_types
