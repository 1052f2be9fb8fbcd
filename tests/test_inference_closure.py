"""One closure, written twice: the SPARQL rules (``ontology/rules/20-leads-to.rq``, ``25-narrower-symptoms.rq``,
``40-candidate-causes.rq``) and the Python of the causal model (``engine/infer/model.py: _inherit_broader`` building
the links, ``bench/faults/calibration.py: reachable_causes`` walking them) must give the same candidate causes for
every symptom a finding can name, on the shipped knowledge base."""

from __future__ import annotations

import pytest

from bench.faults.calibration import reachable_causes
from debugtune.engine.infer.model import load_model
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import DT, GRAPH_INFERRED, KB, local_name, run_base, run_graph
from debugtune.kg.rules import run_rules
from debugtune.kg.sparql import iri


@pytest.fixture(scope="module")
def closure():
    """(SPARQL candidates per symptom, Python candidates per symptom, the causal model)."""
    store = open_store(None)
    load_knowledge(store)
    model = load_model(store)
    symptoms = sorted(local_name(s) for s in store.select("""SELECT ?s WHERE { ?s a dt:Symptom
        FILTER NOT EXISTS { ?n skos:broader ?s } }""").column("s"))  # a broader one is reported through its narrower
    blocks = []
    for s in symptoms:  # one run per symptom, with one finding of it: its candidate causes are that symptom's
        run = f"closure-{s}"
        blocks.append(f"GRAPH {iri(run_graph(run))} {{ {iri(run_base(run))} a dt:TrainingRun . "
                      f"{iri(run_base(run) + '/f')} a dt:Finding ; dt:inRun {iri(run_base(run))} ; "
                      f"dt:symptom {iri(KB + s)} }}")
    store.update("INSERT DATA { " + "\n".join(blocks) + " }")
    run_rules(store)
    sparql: dict[str, set[str]] = {s: set() for s in symptoms}
    of_run = {run_base(f"closure-{s}"): s for s in symptoms}
    inferred = f"SELECT ?run ?c WHERE {{ GRAPH {iri(GRAPH_INFERRED)} {{ ?run dt:candidateCause ?c }} }}"
    for run, cause in store.select(inferred).rows:
        if run.value in of_run:
            sparql[of_run[run.value]].add(local_name(cause.value))
    python = {s: reachable_causes(model, {s}) for s in symptoms}
    store.close()
    return sparql, python, model


def test_rules_and_python_give_the_same_candidates(closure):
    sparql, python, _ = closure
    differ = {s: {"rules only": sorted(sparql[s] - python[s]), "python only": sorted(python[s] - sparql[s])}
              for s in sparql if sparql[s] != python[s]}
    assert differ == {}


def test_the_comparison_sees_the_whole_graph(closure):
    """Not vacuous: most symptoms have candidates, some through a chain of links, some through skos:broader."""
    sparql, _, model = closure
    with_causes = [s for s in sparql if sparql[s]]
    assert len(with_causes) >= 0.8 * len(sparql) and len(sparql) >= 40
    direct = {s: {link.source for link in model.parents.get(s, ()) if link.source in model.causes} for s in sparql}
    assert sum(1 for s in sparql if sparql[s] - direct[s]) >= 5  # reached only through an intermediate symptom
    assert sparql["UpdateRatioTooHigh"] and sparql["UpdateRatioTooLow"]  # narrower ones of UpdateRatioAbnormal
    assert DT.startswith("https://")
