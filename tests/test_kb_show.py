"""`cann-debug kb show NAME`: every section of an item, each checked against a SPARQL count over the shipped
knowledge base (or the detector registry), for a cause, a symptom, a remedy, a rule and a case."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import debug_app
from debugtune.engine.diagnose.detectors import DETECTORS
from debugtune.kb_view import SECTIONS, UnknownItemError, show
from debugtune.kg import open_store
from debugtune.kg.knowledge import load_knowledge, thresholds
from debugtune.kg.namespaces import KB
from debugtune.kg.rules import run_rules

runner = CliRunner()


@pytest.fixture(scope="module")
def store():
    st = open_store(None)
    load_knowledge(st)
    run_rules(st)  # as a store that has diagnosed runs: the inferred dt:leadsTo must not leak into the item
    yield st
    st.close()


def _count(st, where: str) -> int:
    return int(st.select(f"SELECT (COUNT(DISTINCT ?x) AS ?n) WHERE {{ {where} }}").scalar() or 0)


def test_gate_init_bias_every_section_matches_the_graph(store):
    d = show(store, "GateInitBias")
    assert tuple(d) == SECTIONS
    item = d["item"]
    assert item["kinds"] == ["Cause"] and item["label"] and item["definition"]
    assert len(item["sources"]) == _count(store, "kb:GateInitBias dct:source ?x")
    assert {"cases/causes.ttl", "cases/links-moe.ttl", "cases/links-calibrated.ttl", "cases/remedies-tuning.ttl",
            "cases/cases-moe.ttl"} <= set(item["files"])
    assert not any(s["property"] == "dt:leadsTo" for s in item["statements"])
    assert len(d["links_out"]) == _count(store, "?x a dt:CausalLink ; dt:from kb:GateInitBias") > 0
    assert len(d["links_in"]) == _count(store, "?x a dt:CausalLink ; dt:to kb:GateInitBias") == 0
    out = {r["to"]: r for r in d["links_out"]}
    assert out["ExpertImbalance"]["strength"] == 0.8 and out["ExpertImbalance"]["lag_steps"] == 0
    link = f"<{KB}link/GateInitBias-ExpertImbalance>"
    assert len(out["ExpertImbalance"]["sources"]) == _count(store, f"{link} dct:source ?x") == 2
    assert len(d["remedies"]) == _count(store, "?x a dt:Remedy ; dt:addresses kb:GateInitBias") == 4
    for r in d["remedies"]:
        assert len(r["parameters"]) == _count(store, f"kb:{r['remedy']} dt:tuningParameter ?x") >= 1
    assert len(d["cases"]) == _count(store, "?x a dt:Case ; dt:confirmedCause kb:GateInitBias") == 3
    # one profile per MoE family (top-1, top-2) and severity the fault bench measured it on
    assert len(d["calibration"]) == _count(store, "?x a dt:CalibrationProfile ; dt:profileOf kb:GateInitBias") == 4
    assert {p["profile"] for p in d["calibration"]} == {f"GateInitBias-moe_top{k}-{s}" for k in (1, 2)
                                                      for s in ("mild", "severe")}
    for p in d["calibration"]:
        assert len(p["rates"]) == _count(store, f"<{KB}profile/{p['profile']}> dt:symptomRate ?x")
    symptoms = {r["to"] for r in d["links_out"]}
    judges = [det.id for det in DETECTORS if det.symptom in symptoms]
    assert [r["detector"] for r in d["detectors"]] == judges and len(judges) >= 5
    assert all(r["marked_in_kb"] for r in d["detectors"])  # cases/detected-by.ttl agrees with the registry
    th = thresholds(store)
    declared = {k for k in th if any(det.declares(k) for det in DETECTORS if det.symptom in symptoms)}
    applies = {str(k) for k in store.select("""SELECT ?k WHERE { ?t dt:thresholdKey ?k ; dt:appliesTo ?s .
        ?l a dt:CausalLink ; dt:from kb:GateInitBias ; dt:to ?s . FILTER EXISTS { ?s dt:detectedBy ?d } }""")
        .column("k")}
    assert {r["key"] for r in d["thresholds"]} == declared | applies and applies
    assert len(d["prevention_rules"]) == _count(store, "?x a dt:PreventionRule ; ?p kb:GateInitBias")


def test_a_symptom_a_remedy_a_rule_and_a_case(store):
    sym = show(store, "ExpertImbalance")
    assert len(sym["links_in"]) == _count(store, "?x a dt:CausalLink ; dt:to kb:ExpertImbalance") > 0
    assert [r["detector"] for r in sym["detectors"]] == ["moe.imbalance"]
    assert {r["key"] for r in sym["thresholds"]} >= {k for k in store.select(
        "SELECT ?k WHERE { ?t dt:thresholdKey ?k ; dt:appliesTo kb:ExpertImbalance }").column("k")}
    assert len(sym["calibration"]) == _count(store, "?x a dt:CalibrationProfile ; dt:symptomRate/dt:symptom "
                                                    "kb:ExpertImbalance")
    assert len(sym["cases"]) == _count(store, "?x a dt:Case ; dt:signature/dt:symptom kb:ExpertImbalance")
    remedy = show(store, "RouterRebalance")
    assert [r["remedy"] for r in remedy["remedies"]] == ["RouterRebalance"]
    assert {p["name"] for p in remedy["remedies"][0]["parameters"]} == {"init_std", "aux_loss_coeff"}
    rule = show(store, "MOE001")
    assert rule["item"]["kinds"] == ["PreventionRule"] and rule["item"]["name"] == "MOE001"
    prevented = show(store, "WarmupTooShort")
    assert len(prevented["prevention_rules"]) == _count(store, "?x dt:preventsCause kb:WarmupTooShort") > 0
    case = show(store, "PaddleNLP-ColdStart")
    assert case["item"]["kinds"] == ["Case"] and case["item"]["sources"]


def test_unknown_name_says_what_is_close(store):
    with pytest.raises(UnknownItemError, match="did you mean GateInitBias"):
        show(store, "GateInitBia")


def test_cli_text_and_json():
    r = runner.invoke(debug_app, ["kb", "show", "GateInitBias", "--store", "memory", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert tuple(data) == SECTIONS and data["links_out"]
    r = runner.invoke(debug_app, ["kb", "show", "GateInitBias", "--store", "memory"], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    counts = {k: len(data[k]) for k in ("links_out", "links_in", "remedies", "cases", "calibration")}
    for heading in (f"links out ({counts['links_out']})", f"links in ({counts['links_in']})",
                    f"remedies ({counts['remedies']})", f"cases ({counts['cases']})",
                    f"calibration profiles ({counts['calibration']})",
                    "thresholds that apply", "detectors that judge it", "prevention rules that mention it"):
        assert heading in r.output
    r = runner.invoke(debug_app, ["kb", "show", "NoSuchThing", "--store", "memory"])
    assert r.exit_code != 0
