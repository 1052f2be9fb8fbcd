"""Ranked suggestions and case similarity (engine/suggest) on a small hand-checkable knowledge base."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debugtune.engine.suggest import (
    SignatureItem,
    SuggestError,
    case_similarity,
    remedy_details,
    run_signature,
    similar_cases,
    suggest,
)
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.errors import MissingThresholdError
from debugtune.kg.namespaces import GRAPH_KB, GRAPH_LOCAL
from debugtune.kg.records import Finding, Hypothesis
from tests.query_kb import PACKAGE, load_test_kb, make_store


@pytest.fixture(scope="module")
def store():
    return make_store()


@pytest.fixture
def fresh():
    return make_store()


# --- case similarity -------------------------------------------------------------------------------

def test_similarity_of_equal_signatures_is_one_and_of_disjoint_ones_zero():
    a = [("ExpertImbalance", "expert", 0.8), ("LossOscillation", "run", 0.6)]
    assert case_similarity(a, list(reversed(a))) == 1.0
    assert case_similarity(a, [("GradientExplosion", "layer", 0.8)]) == 0.0
    assert case_similarity([], []) == 0.0


def test_similarity_matches_the_documented_formula():
    a = [SignatureItem("ExpertImbalance", "expert", 0.8), SignatureItem("LossOscillation", "run", 0.6)]
    b = [("ExpertImbalance", "layer", 0.4)]
    # one matched pair: m = (1 + 0 + (1 - 0.4)) / 3, weights w = (1 + sev) / 2
    w_a1, w_a2, w_b = 0.9, 0.8, 0.7
    expected = (1 + 0 + 0.6) / 3 * (w_a1 + w_b) / (w_a1 + w_a2 + w_b)
    assert case_similarity(a, b) == pytest.approx(expected, abs=1e-12)


def test_similarity_takes_the_best_matching_and_the_highest_severity_per_location():
    run = [("ExpertImbalance", "expert", 0.9), ("ExpertImbalance", "layer", 0.2), ("ExpertImbalance", "expert", 0.1)]
    case = [("ExpertImbalance", "layer", 0.2), ("ExpertImbalance", "expert", 0.9)]
    assert case_similarity(run, case) == 1.0


_items = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.sampled_from(["run", "layer", "expert"]),
                            st.floats(0, 1)), max_size=6)


@settings(max_examples=150, deadline=None)
@given(_items, _items)
def test_similarity_is_symmetric_and_bounded(a, b):
    s = case_similarity(a, b)
    assert 0.0 <= s <= 1.0
    assert s == pytest.approx(case_similarity(b, a), abs=1e-9)
    if a:
        assert case_similarity(a, a) == 1.0


def test_run_signature_comes_from_the_findings(store):
    assert run_signature(store, "moe-1") == (
        SignatureItem("ExpertImbalance", "expert", 0.8), SignatureItem("LossOscillation", "run", 0.6),
        SignatureItem("RouterGradVanishing", "layer", 0.3))


def test_similar_cases_sees_every_named_graph_best_first(store):
    found = similar_cases(store, "moe-1", threshold=0.5)
    assert [c.case for c in found] == ["https://w3id.org/debugtune/kb/CaseKb1", "urn:debugtune:case:pkg1",
                                       "urn:debugtune:case:pkg2"]
    assert [c.graph for c in found] == [GRAPH_KB, PACKAGE, PACKAGE]
    assert found[0].cause == "GateInitBias" and found[0].remedy == "RouterInitRescale"
    assert found[0].outcome == "success" and found[0].label == "MoE gate bias, 8 experts"
    assert found[0].score > found[1].score > found[2].score
    assert similar_cases(store, "moe-1", threshold=0.5, limit=1) == found[:1]


def test_default_threshold_is_read_from_the_knowledge_base(fresh):
    replace_diagnosis(fresh, "moe-2", {}, [
        Finding("a", "ExpertImbalance", "convergence", "expert:3", 10, 20, 0.7),
        Finding("b", "LossOscillation", "convergence", "", 10, 20, 0.5)])
    # moe-2 has exactly pkg1's signature; CaseKb1 differs a little in severity.
    assert [c.case for c in similar_cases(fresh, "moe-2")][:1] == ["urn:debugtune:case:pkg1"]
    assert similar_cases(fresh, "moe-2")[0].score == 1.0
    fresh.update(f'WITH <{GRAPH_KB}> DELETE {{ ?t dt:value ?v }} INSERT {{ ?t dt:value 1.0 }} WHERE {{ '
                 f'?t dt:thresholdKey "suggest.similarity.threshold" ; dt:value ?v }}')
    assert [c.score for c in similar_cases(fresh, "moe-2")] == [1.0]
    fresh.update(f'WITH <{GRAPH_KB}> DELETE {{ ?t dt:value ?v }} INSERT {{ ?t dt:value 0.0 }} WHERE {{ '
                 f'?t dt:thresholdKey "suggest.similarity.threshold" ; dt:value ?v }}')
    assert len(similar_cases(fresh, "moe-2")) == 4


# --- ranking ---------------------------------------------------------------------------------------

def _scores(found):
    return {s.remedy: s.score for s in found}


def test_suggest_ranks_by_the_documented_score(store):
    found = suggest(store, "moe-1")
    assert [s.remedy for s in found] == ["EnableAuxLoss", "RouterInitRescale", "RestartWithNewSeed"]
    # relevance × (0.5 eff + 0.3 · h/(h+cost) + 0.2 · risk score) × (1 + s) / (2 + s + f), h = 2300
    h = 2300
    expected = {
        "EnableAuxLoss": (0.7 + 0.2) * (0.5 * 0.9 + 0.3 * h / (h + 800) + 0.2 * 1.0) * 6 / 7,
        "RouterInitRescale": 0.7 * (0.5 * 0.8 + 0.3 * h / (h + 2300) + 0.2 * 1.0) * 9 / 12,
        "RestartWithNewSeed": 0.7 * (0.5 * 0.95 + 0.3 * h / (h + 12500) + 0.2 * 0.0) * 1 / 2,
    }
    assert _scores(found) == pytest.approx(expected, abs=1e-12)
    top = found[0]
    assert top.addresses == ("AuxLossDisabled", "GateInitBias")
    assert top.label == "enable the auxiliary load-balancing loss"
    assert top.risk == "low" and top.cost == 800 and top.success_rate == pytest.approx(6 / 7)
    assert [p.name for p in top.parameters] == ["aux_coef"] and top.config_changes[0].key == "moe_aux_loss_coeff"


def test_each_suggestion_names_its_cases_most_similar_first(store):
    by = {s.remedy: s for s in suggest(store, "moe-1")}
    assert by["RouterInitRescale"].cases == ("https://w3id.org/debugtune/kb/CaseKb1", "urn:debugtune:case:pkg1")
    assert by["EnableAuxLoss"].cases == ("urn:debugtune:case:pkg2",)
    assert by["RestartWithNewSeed"].cases == ()


def test_constraints_filter(store):
    assert [s.remedy for s in suggest(store, "moe-1", max_risk="medium")] == ["EnableAuxLoss", "RouterInitRescale"]
    assert [s.remedy for s in suggest(store, "moe-1", max_cost=1000)] == ["EnableAuxLoss"]
    assert [s.remedy for s in suggest(store, "moe-1", max_experiments=4)] == ["EnableAuxLoss"]
    assert [s.remedy for s in suggest(store, "moe-1", limit=1)] == ["EnableAuxLoss"]
    assert suggest(store, "moe-1", max_risk="low", max_cost=100) == []


def test_weights_from_the_query_change_the_ranking(store):
    eff_only = suggest(store, "moe-1", weights={"effectiveness": 1.0})
    assert _scores(eff_only)["RestartWithNewSeed"] == pytest.approx(0.7 * 0.95 * 0.5)
    risk_only = _scores(suggest(store, "moe-1", weights={"risk": 1}))
    assert risk_only["RestartWithNewSeed"] == 0.0
    with pytest.raises(SuggestError, match="unknown ranking criterion"):
        suggest(store, "moe-1", weights={"speed": 1})
    with pytest.raises(SuggestError, match="not all zero"):
        suggest(store, "moe-1", weights={"cost": 0})


def test_feedback_in_any_graph_updates_the_success_rate(fresh):
    before = {s.remedy: s for s in suggest(fresh, "moe-1")}["RouterInitRescale"]
    fresh.update(f"INSERT DATA {{ GRAPH <{GRAPH_LOCAL}> {{ kb:RouterInitRescale dt:successCount 20 }} }}")
    after = {s.remedy: s for s in suggest(fresh, "moe-1")}["RouterInitRescale"]
    assert after.success_rate == pytest.approx(29 / 32) and before.success_rate == pytest.approx(9 / 12)
    assert after.score > before.score


def test_prior_and_weights_are_knowledge_base_data(fresh):
    fresh.update(f'WITH <{GRAPH_KB}> DELETE {{ ?t dt:value ?v }} INSERT {{ ?t dt:value 9.0 }} WHERE {{ '
                 f'?t dt:thresholdKey "suggest.prior.beta" ; dt:value ?v }}')
    s = {x.remedy: x for x in suggest(fresh, "moe-1")}["EnableAuxLoss"]
    assert s.success_rate == pytest.approx(6 / 15)


def test_runs_without_hypotheses_get_no_suggestions(store):
    assert suggest(store, "clean-1") == []
    assert [s.remedy for s in suggest(store, "dense-1")] == ["LowerLearningRate"]


def test_unknown_run_and_remedy_name_the_closest(store):
    with pytest.raises(SuggestError, match="unknown run 'moe-l'; did you mean moe-1"):
        suggest(store, "moe-l")
    with pytest.raises(SuggestError, match="invalid run id"):
        similar_cases(store, "bad id")
    with pytest.raises(SuggestError, match="did you mean RouterInitRescale"):
        remedy_details(store, "RouterInitRescal")
    with pytest.raises(SuggestError, match="risk level"):
        suggest(store, "moe-1", max_risk="extreme")


def test_missing_thresholds_are_a_clear_error():
    st_ = open_store(None)
    replace_diagnosis(st_, "r", {}, [], hypotheses=[Hypothesis("GateInitBias", 0.5, ("GateInitBias",), (), "x", 1)])
    with pytest.raises(MissingThresholdError, match="suggest.weight.effectiveness"):
        suggest(st_, "r")


def test_remedy_details_give_the_search_space(store):
    d = remedy_details(store, "RouterInitRescale")
    assert d.label == "rescale router initialisation" and d.addresses == ("GateInitBias",)
    init_std, dtype = d.parameters
    assert (init_std.name, init_std.kind, init_std.scale, init_std.low, init_std.high, init_std.default) == (
        "init_std", "continuous", "log", 0.0001, 0.1, 0.02)
    assert (dtype.kind, dtype.choices, dtype.default) == ("categorical", ("bf16", "fp32"), "bf16")
    assert d.config_changes[0].to_value == "x0.1" and d.config_changes[0].from_value == "0.02"
    assert d.cases == ("https://w3id.org/debugtune/kb/CaseKb1", "urn:debugtune:case:pkg1")
    assert d.success_rate == pytest.approx(0.75)
    assert remedy_details(store, "https://w3id.org/debugtune/kb/RouterInitRescale") == d
    seed = remedy_details(store, "RestartWithNewSeed").parameters[0]
    assert (seed.kind, seed.low, seed.high, seed.scale) == ("integer", 0.0, 1000.0, "linear")


def test_shipped_knowledge_base_gives_suggestions_when_it_has_remedies():
    """With the real cases/*.ttl: every remedy addressing a hypothesised cause is considered."""
    from debugtune.kg.knowledge import load_knowledge

    st_ = open_store(None)
    load_knowledge(st_)
    rows = st_.query("SELECT ?c (COUNT(?r) AS ?n) WHERE { ?r a dt:Remedy ; dt:addresses ?c } GROUP BY ?c "
                     "ORDER BY DESC(?n) ?c LIMIT 1").dicts()
    if not rows:
        pytest.skip("the shipped knowledge base has no remedies yet")
    cause = rows[0]["c"].rsplit("/", 1)[-1]
    replace_diagnosis(st_, "kb-run", {}, [], hypotheses=[Hypothesis(cause, 0.9, (cause,), (), "x", 1)])
    found = suggest(st_, "kb-run")
    assert len(found) == rows[0]["n"]
    assert all(0 <= s.score <= 1 and cause in s.addresses for s in found)
    assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)


def test_load_is_repeatable():
    st_ = open_store(None)
    load_test_kb(st_)
    assert len(suggest(st_, "moe-1")) == 3


def test_narrower_symptoms_match_their_broader_concept():
    from debugtune.engine.suggest.similarity import run_signature
    from debugtune.kg import open_store
    from debugtune.kg.assertions import replace_diagnosis
    from debugtune.kg.knowledge import load_knowledge
    from debugtune.kg.records import Finding

    store = open_store(None)
    load_knowledge(store)
    f = Finding("u", "UpdateRatioTooHigh", "gradient", "layers.0", 3, 9, 0.7, {}, "t")
    replace_diagnosis(store, "narrow", {}, [f])
    assert [i.symptom for i in run_signature(store, "narrow")] == ["UpdateRatioAbnormal"]
