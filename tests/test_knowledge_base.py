"""The shipped knowledge base (cases/*.ttl): coverage of DESIGN §2, causal structure, remedies, cases, sources.

SHACL conformance and OWL consistency of the same files are checked in test_knowledge_loading.py and
test_ontology.py; this module checks what the shapes cannot say (coverage, reachability, discrimination).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from debugtune.engine.telemetry.schema import METRICS
from debugtune.kg import open_store
from debugtune.kg.knowledge import class_counts, load_knowledge
from debugtune.kg.namespaces import GRAPH_KB, KB

DESIGN_SYMPTOMS = """LossSpike LossOscillation LossDivergence LossPlateau NaNOrInf GradientExplosion
GradientVanishing GradNormDrift DeadUnits ActivationSaturation ZeroUpdate UpdateRatioAbnormal ExpertImbalance
DeadExperts TokenDropping RouterGradVanishing StepTimeRegression SlowRank SlowLink LowBandwidthUtilization
HighCommunicationShare LowAcceleratorUtilization MemoryPressure ThermalThrottling DataLoaderWait Overfitting""".split()

DESIGN_CAUSES = """LearningRateTooHigh LearningRateTooLow WarmupTooShort BadWeightInit SaturatingActivations DyingReLU
UnnormalizedInputs LossActivationMismatch LabelNoise MissingZeroGrad FrozenParameters BadBatch MixedPrecisionOverflow
TooFewSteps GateInitBias AuxLossDisabled CapacityFactorTooLow RouterZLossMissing TopKNormalizationVanishing
StragglerRank SlowInterconnect CrossNodeExpertTraffic SmallMessageCommunication NoCommComputeOverlap
DataPipelineStall HostDispatchBound MemoryFragmentation ThermalOrPowerLimit PipelineStageImbalance
SequenceLengthImbalance""".split()

# The faults the benchmark injects; each needs a symptom pattern of its own.
INJECTED = """LearningRateTooHigh LearningRateTooLow BadWeightInit SaturatingActivations DyingReLU UnnormalizedInputs
LossActivationMismatch LabelNoise MissingZeroGrad FrozenParameters BadBatch GateInitBias AuxLossDisabled
CapacityFactorTooLow StragglerRank DataPipelineStall""".split()

SEED_CHAIN = ["GateInitBias", "RouterGradVanishing", "ExpertImbalance", "HighCommunicationShare", "LossOscillation"]


@pytest.fixture(scope="module")
def store():
    st = open_store(None)
    load_knowledge(st)
    return st


def names(store, cls: str) -> set[str]:
    rows = store.query(f"SELECT ?x WHERE {{ GRAPH <{GRAPH_KB}> {{ ?x a dt:{cls} }} }}").column("x")
    return {x[len(KB):] for x in rows}


def links(store) -> dict[tuple[str, str], float]:
    rows = store.query(f"""SELECT ?f ?t ?w WHERE {{ GRAPH <{GRAPH_KB}> {{
        ?l a dt:CausalLink ; dt:from ?f ; dt:to ?t ; dt:strength ?w }} }}""").dicts()
    return {(r["f"][len(KB):], r["t"][len(KB):]): float(r["w"]) for r in rows}


def test_minimum_counts(store):
    counts = class_counts(store)
    for cls, minimum in {"Symptom": 26, "Cause": 30, "CausalLink": 60, "Remedy": 60, "Case": 40}.items():
        assert counts.get(cls, 0) >= minimum, (cls, counts.get(cls))


def test_every_design_name_exists(store):
    assert set(DESIGN_SYMPTOMS) - names(store, "Symptom") == set()
    assert set(DESIGN_CAUSES) - names(store, "Cause") == set()


def test_every_cause_has_a_link_and_a_remedy(store):
    causes = names(store, "Cause")
    linked = {f for f, _ in links(store)}
    addressed = {x[len(KB):] for x in store.query("SELECT ?c WHERE { ?r a dt:Remedy ; dt:addresses ?c }").column("c")}
    assert causes - linked == set()
    assert causes - addressed == set()


def test_every_symptom_is_reachable_from_a_cause(store):
    """Every symptom but a sign of health, which no cause produces: it only speaks against some."""
    reached = {x[len(KB):] for x in store.query(
        "SELECT DISTINCT ?s WHERE { ?c a dt:Cause ; (^dt:from/dt:to)+ ?s }").column("s")}
    signs = {x[len(KB):] for x in store.query("SELECT ?s WHERE { ?s dt:healthSign true }").column("s")}
    assert signs and names(store, "Symptom") - reached == signs
    countered = {x[len(KB):] for x in store.query(
        "SELECT ?s WHERE { ?x a dt:CounterEvidence ; dt:symptom ?s }").column("s")}
    assert signs <= countered, "a sign of health that speaks against no cause does nothing"


def test_link_strengths_are_decimals_in_unit_interval(store):
    rows = store.query(f"""SELECT ?l ?w (DATATYPE(?w) AS ?dt) WHERE {{ GRAPH <{GRAPH_KB}> {{
        ?l a dt:CausalLink ; dt:strength ?w }} }}""").dicts()
    assert rows
    for r in rows:
        assert r["dt"] == "http://www.w3.org/2001/XMLSchema#decimal", r["l"]
        assert 0.0 <= float(r["w"]) <= 1.0, r["l"]


def test_link_iris_name_their_ends(store):
    rows = store.query(f"""SELECT ?l ?f ?t WHERE {{ GRAPH <{GRAPH_KB}> {{
        ?l a dt:CausalLink ; dt:from ?f ; dt:to ?t }} }}""").dicts()
    for r in rows:
        assert r["l"] == f"{KB}link/{r['f'][len(KB):]}-{r['t'][len(KB):]}"


def test_every_source_is_an_http_iri(store):
    rows = store.query(f"""SELECT ?x ?s (isIRI(?s) AS ?iri) WHERE {{ GRAPH <{GRAPH_KB}> {{ ?x dct:source ?s }} }}""")
    rows = rows.dicts()
    assert len(rows) > 300
    for r in rows:
        assert r["iri"] is True and r["s"].startswith(("http://", "https://")), (r["x"], r["s"])
    unsourced = store.query(f"""SELECT ?x WHERE {{ GRAPH <{GRAPH_KB}> {{
        VALUES ?c {{ dt:Cause dt:Symptom dt:Remedy dt:CausalLink dt:Case }}
        ?x a ?c FILTER NOT EXISTS {{ ?x dct:source ?s }} }} }}""").column("x")
    assert unsourced == []


def test_seed_chain_is_a_path_of_links(store):
    edges = links(store)
    for a, b in zip(SEED_CHAIN, SEED_CHAIN[1:], strict=False):
        assert (a, b) in edges, (a, b)
    assert ("GateInitBias", "ExpertImbalance") in edges
    assert store.query("ASK { kb:GateInitBias (^dt:from/dt:to)+ kb:LossOscillation }").value is True


def test_injected_faults_have_distinct_direct_patterns(store):
    """No two injected faults produce the same set of directly linked symptoms, and each has a strongest link."""
    by_cause: dict[str, dict[str, float]] = defaultdict(dict)
    for (f, t), w in links(store).items():
        by_cause[f][t] = w
    patterns = {c: frozenset(by_cause[c]) for c in INJECTED}
    assert len(set(patterns.values())) == len(INJECTED), patterns
    assert by_cause["FrozenParameters"]["ZeroUpdate"] >= 0.9
    assert by_cause["CapacityFactorTooLow"]["TokenDropping"] >= 0.8
    assert by_cause["DataPipelineStall"]["DataLoaderWait"] >= 0.8
    assert "RouterGradVanishing" in by_cause["GateInitBias"]
    assert "RouterGradVanishing" not in by_cause["AuxLossDisabled"]
    assert {"LossPlateau", "Overfitting"} <= set(by_cause["LabelNoise"])
    assert max(by_cause["MissingZeroGrad"], key=by_cause["MissingZeroGrad"].get) == "StaleGradients"
    assert by_cause["MissingZeroGrad"]["GradNormDrift"] >= 0.5


def test_remedies_named_by_the_issue_make_their_config_changes(store):
    rows = store.query("""SELECT ?r ?k ?from ?to WHERE {
        ?r a dt:Remedy ; dt:configChange ?c . ?c dt:configKey ?k ; dt:toValue ?to
        OPTIONAL { ?c dt:fromValue ?from } }""")
    changes = {(r["r"][len(KB):], r["k"], r["from"], r["to"]) for r in rows.dicts()}
    for expected in [("RouterInitRescale", "moe_router_init_std", "0.01", "0.02"),
                     ("EnableAuxLoss", "moe_aux_loss_coeff", "0", "1e-2"),
                     ("RaiseCapacityFactor", "moe_expert_capacity_factor", "1.0", "1.25"),
                     ("TightenGradClip", "clip_grad", "1.0", "0.5"),
                     ("LowerLearningRate", "lr", "x1.0", "x0.9")]:
        assert expected in changes
    assert store.query("ASK { kb:RouterInitRescale dt:addresses kb:GateInitBias . "
                       "kb:EnableAuxLoss dt:addresses kb:AuxLossDisabled }").value is True


def test_remedy_outcome_counts_agree_with_the_cases(store):
    """successCount/failureCount = cases applying the remedy to a cause it addresses, by outcome."""
    rows = store.query(f"""SELECT ?r ?s ?f (COUNT(DISTINCT ?ok) AS ?ns) (COUNT(DISTINCT ?bad) AS ?nf)
        WHERE {{ GRAPH <{GRAPH_KB}> {{ ?r a dt:Remedy ; dt:successCount ?s ; dt:failureCount ?f .
          OPTIONAL {{ ?ok dt:appliedRemedy ?r ; dt:outcome dt:Success ; dt:confirmedCause ?c1 . ?r dt:addresses ?c1 }}
          OPTIONAL {{ ?bad dt:appliedRemedy ?r ; dt:outcome dt:Failure ; dt:confirmedCause ?c2 . ?r dt:addresses ?c2 }}
        }} }} GROUP BY ?r ?s ?f""").dicts()
    assert rows
    for r in rows:
        assert (r["s"], r["f"]) == (r["ns"], r["nf"]), r["r"]


def test_cases_spread_over_causes_and_include_moe_routing_cases(store):
    rows = store.query(f"""SELECT ?case ?cause WHERE {{ GRAPH <{GRAPH_KB}> {{
        ?case a dt:Case ; dt:confirmedCause ?cause }} }}""").dicts()
    per_cause: dict[str, int] = defaultdict(int)
    for r in rows:
        per_cause[r["cause"][len(KB):]] += 1
    assert len(per_cause) >= 25
    assert max(per_cause.values()) <= 0.2 * len(rows)
    for cause in ("GateInitBias", "AuxLossDisabled", "CapacityFactorTooLow"):
        assert per_cause[cause] >= 1, cause
    moe_signature = store.query("""ASK { ?case a dt:Case ; dt:confirmedCause kb:GateInitBias ;
        dt:signature [ dt:symptom kb:ExpertImbalance ] , [ dt:symptom kb:RouterGradVanishing ] }""").value
    assert moe_signature is True


def test_case_experiments_use_their_remedy_parameters(store):
    import json
    rows = store.query("""SELECT ?e ?params ?name WHERE {
        ?case dt:hasExperiment ?e . ?e dt:remedy ?r ; dt:parametersJson ?params .
        ?r dt:tuningParameter ?p . ?p dt:paramName ?name }""").dicts()
    allowed: dict[str, set[str]] = defaultdict(set)
    params: dict[str, dict] = {}
    for r in rows:
        allowed[r["e"]].add(r["name"])
        params[r["e"]] = json.loads(r["params"])
    assert params
    for e, p in params.items():
        assert set(p) <= allowed[e], e


def test_metrics_match_the_telemetry_schema(store):
    rows = store.query("SELECT ?n ?d WHERE { ?m a dt:Metric ; dt:metricName ?n ; dt:inDimension ?d }").dicts()
    known = {m: dim for dim, ms in METRICS.items() for m in ms}
    assert len(rows) >= 40
    for r in rows:
        assert r["n"] in known, r["n"]
        assert r["d"].endswith(known[r["n"]].capitalize() + "Flow"), r["n"]
