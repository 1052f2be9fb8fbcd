"""The tuning DSL: every form of docs/query.md against a small knowledge base, errors, safety, and a fuzz."""

from __future__ import annotations

import pyoxigraph as ox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debugtune.engine.suggest import suggest
from debugtune.query import (
    DslError,
    DslNameError,
    DslResult,
    DslSyntaxError,
    DslValueError,
    compile_text,
    parse,
    run_query,
)
from debugtune.query import ast as A
from tests.query_kb import make_store

STORE = make_store()

ISSUE_EXAMPLES = [
    "symptoms of run moe-1 where dimension = gradient and severity >= 0.5 order by onset",
    "causes of run moe-1 limit 3",
    "explain cause GateInitBias for run moe-1",
    "suggest for run moe-1 where risk <= medium and cost <= 2 card_hours rank by effectiveness 0.5, cost 0.3, "
    "risk 0.2 limit 3",
    "remedies for cause AuxLossDisabled",
    "cases similar to run moe-1 threshold 0.85 limit 5",
    "experiments of remedy RouterInitRescale where outcome = success",
]


def q(text: str) -> DslResult:
    return run_query(text, STORE)


def col(result: DslResult, name: str) -> list:
    return [r[name] for r in result.rows]


@pytest.mark.parametrize("text", ISSUE_EXAMPLES)
def test_every_issue_example_runs_and_prints_its_sparql(text):
    result = q(text)
    assert result.sparql and all(s.strip() for s in result.sparql)
    for sparql in result.sparql:  # each printed query is valid SPARQL on its own (PREFIX lines included)
        assert sparql.startswith("PREFIX dt: <https://w3id.org/debugtune#>")
        ox.Store().query(sparql)
    assert result.as_dict()["sparql"] == list(result.sparql)


def test_symptoms():
    r = q("symptoms of run moe-1 where dimension = convergence and severity >= 0.6 order by severity desc")
    assert col(r, "id") == ["f1", "f2", "f3"] and col(r, "severity") == [0.8, 0.6, 0.6]
    assert set(col(r, "dimension")) == {"convergence"}
    assert col(q("symptoms of run moe-1"), "id") == ["f4", "f1", "f2", "f3"]  # default order: onset
    assert col(q("symptoms of run moe-1 where dimension = gradient and severity >= 0.5"), "id") == []
    assert col(q("symptoms of run moe-1 where location = expert and onset > 120"), "id") == ["f2"]
    assert col(q("symptoms of run moe-1 where symptom = LossOscillation"), "entity") == [""]
    assert col(q('symptoms of run moe-1 where entity = "layers.3.router"'), "id") == ["f4"]
    assert col(q("symptoms of run moe-1 where symptom != ExpertImbalance limit 1"), "id") == ["f4"]


def test_keywords_are_case_insensitive_and_runs_can_be_paths():
    assert col(q("SYMPTOMS Of RUN moe-1 WHERE Severity >= 0.8"), "id") == ["f1"]
    assert col(q('symptoms of run "/data/runs/moe-1" where severity >= 0.8'), "id") == ["f1"]
    assert col(q('causes of run "some/where/dense-1"'), "cause") == ["LearningRateTooHigh"]


def test_causes_and_explain():
    r = q("causes of run moe-1 where confidence > 0.5")
    assert col(r, "cause") == ["GateInitBias"] and col(r, "causeLabel") == ["gate initialisation bias"]
    assert col(q("causes of run moe-1 order by confidence"), "cause") == ["AuxLossDisabled", "GateInitBias"]
    e = q("explain cause GateInitBias for run moe-1")
    assert col(e, "node") == ["GateInitBias", "ExpertImbalance", "LossOscillation"]
    assert col(e, "strength") == [0.8, 0.6, None]
    assert e.details["confidence"] == 0.7 and [f["id"] for f in e.details["findings"]] == ["f1", "f3"]
    none = q("explain cause LearningRateTooHigh for run moe-1")
    assert none.rows == () and "not among the hypotheses" in none.notes[0]


def test_suggest_is_the_engine_ranking_with_query_weights():
    r = q("suggest for run moe-1 rank by effectiveness 1 limit 2")
    engine = suggest(STORE, "moe-1", weights={"effectiveness": 1.0}, limit=2)
    assert col(r, "remedy") == [s.remedy for s in engine]
    assert col(r, "score") == [s.score for s in engine]
    assert r.python_step.startswith("engine.suggest") and r.details["weights"] == {"effectiveness": 1.0}
    default = q("suggest for run moe-1 rank by effectiveness, cost, risk")
    assert col(default, "score") == [s.score for s in suggest(STORE, "moe-1")]  # unweighted = KB defaults
    assert col(q("suggest for run moe-1 where risk < high and cost < 2300"), "remedy") == ["EnableAuxLoss"]
    assert col(q("suggest for run moe-1 where experiments < 5"), "remedy") == ["EnableAuxLoss"]
    top = q("suggest for run moe-1 limit 1").rows[0]
    assert top["parameters"][0]["name"] == "aux_coef" and top["cases"] == ["urn:debugtune:case:pkg2"]


def test_remedies_cases_experiments_runs():
    r = q("remedies for cause GateInitBias")
    assert col(r, "remedy") == ["RestartWithNewSeed", "EnableAuxLoss", "RouterInitRescale"]
    assert col(r, "success_rate") == pytest.approx([0.5, 6 / 7, 0.75])
    assert col(q("remedies for cause GateInitBias where risk <= low order by cost"), "remedy") == [
        "EnableAuxLoss", "RouterInitRescale"]
    assert col(q("remedies for cause GateInitBias where success > 0.8"), "remedy") == ["EnableAuxLoss"]
    assert col(q('remedies for cause "router init bias" where cost <= 2300 card_hours'), "remedy") == [
        "EnableAuxLoss", "RouterInitRescale"]
    c = q("cases similar to run moe-1 threshold 0.8")
    assert col(c, "case") == ["https://w3id.org/debugtune/kb/CaseKb1", "urn:debugtune:case:pkg1"]
    assert q("cases similar to run moe-1").rows == ()  # KB default 0.85
    e = q("experiments of remedy RouterInitRescale where status = ok order by cost")
    assert col(e, "experiment") == ["t1", "e1"] and e.rows[0]["objectives"] == {"cv": 0.12, "loss": 2.1}
    assert e.rows[0]["parameters"] == {"init_std": 0.004}
    assert col(q("experiments of remedy RouterInitRescale where outcome = success"), "experiment") == ["e1", "e2"]
    assert col(q("experiments of remedy RouterInitRescale where run = moe-1 and cost <= 0.25"), "experiment") == [
        "t1", "t2"]
    runs = q("runs order by findings desc limit 2")
    assert col(runs, "run") == ["moe-1", "dense-1"] and col(runs, "findings") == [4, 1]


def test_syntax_errors_name_line_column_token_and_expected():
    with pytest.raises(DslSyntaxError) as err:
        parse("causes of run moe-1\n  order confidence")
    e = err.value
    assert (e.line, e.column, e.token, e.expected) == (2, 9, "confidence", ("by",))
    assert "line 2, column 9" in str(e) and "expected by" in str(e)
    with pytest.raises(DslSyntaxError) as err:
        parse("suggest for run moe-1 rank by")
    assert err.value.token == "" and err.value.expected == ("a name",) and err.value.column == 30
    with pytest.raises(DslSyntaxError) as err:
        parse("symptoms of run moe-1 where severity => 0.5")
    assert err.value.token == ">" or err.value.token == "=>"
    with pytest.raises(DslSyntaxError, match="expected cases, causes"):
        parse("sugest for run moe-1")


def test_unknown_names_suggest_the_closest():
    cases = {
        "remedies for cause GateInitBais": ("cause", "GateInitBias"),
        "experiments of remedy RouterInitRescal": ("remedy", "RouterInitRescale"),
        "symptoms of run moe-1 where symptom = LossOscilation": ("symptom", "LossOscillation"),
        "symptoms of run moe-1 where dimension = gradients": ("dimension", "gradient"),
        "symptoms of run moe-1 where sevrity > 0.5": ("field of symptoms", "severity"),
        "causes of run moe-2": ("run", "moe-1"),
        "suggest for run moe-1 where risk <= meduim": ("risk", "medium"),
        "suggest for run moe-1 rank by efectiveness": ("ranking criterion", "effectiveness"),
    }
    for text, (kind, best) in cases.items():
        with pytest.raises(DslNameError) as err:
            q(text)
        assert err.value.kind == kind and err.value.suggestions[0] == best, text
        assert f"did you mean {best}" in str(err.value)


def test_bad_values():
    for text in ("symptoms of run moe-1 where severity = gradient", "symptoms of run moe-1 where dimension > 3",
                 "suggest for run moe-1 where cost >= 2", "cases similar to run moe-1 threshold 1.5",
                 "causes of run moe-1 limit 100000000000", "suggest for run moe-1 rank by cost 0, risk 0",
                 "suggest for run moe-1 rank by cost 1, cost 2", "symptoms of run moe-1 where severity > 1 card_hours",
                 "suggest for run moe-1 where experiments <= 1e999"):
        with pytest.raises(DslValueError):
            q(text)


def test_values_cannot_break_out_of_the_sparql():
    before = len(STORE.query("SELECT * { GRAPH ?g { ?s ?p ?o } }"))
    attack = 'symptoms of run moe-1 where entity = "x\\" } } ; INSERT DATA { <urn:a> <urn:b> <urn:c> } #"'
    assert q(attack).rows == ()
    assert 'INSERT' in compile_text(attack, STORE).sparql[0]  # inside an escaped literal
    with pytest.raises(DslError):
        q('symptoms of run "x> } INSERT DATA { <a> <b> <c> } #"')
    assert len(STORE.query("SELECT * { GRAPH ?g { ?s ?p ?o } }")) == before


def test_ast_is_frozen_and_compares_by_value():
    a, b = parse("causes of run moe-1 limit 3"), parse("CAUSES  OF RUN moe-1\nLIMIT 3")
    assert a == b and isinstance(a, A.CausesQuery) and a.limit == 3
    with pytest.raises(AttributeError):
        a.limit = 4  # type: ignore[misc]


TOKENS = ["symptoms", "causes", "explain", "suggest", "remedies", "cases", "experiments", "runs", "of", "for",
          "run", "cause", "remedy", "similar", "to", "where", "and", "order", "by", "rank", "limit", "threshold",
          "asc", "desc", "card_hours", "moe-1", "dense-1", "GateInitBias", "RouterInitRescale", "dimension",
          "severity", "risk", "cost", "experiments", "outcome", "status", "onset", "gradient", "medium", "success",
          "effectiveness", "=", "!=", "<", "<=", ">", ">=", ",", "0.5", "3", "-1", "1e999", "99999999999999999999",
          '"x"', '"/data/runs/moe-1"', "'\\''", '"\\"', "\n", "€", "{", "}", "#", "?x", "<urn:a>", ""]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join), st.text(max_size=60),
                 st.lists(st.sampled_from(TOKENS), max_size=14).map("".join)))
def test_fuzz_any_input_gives_a_result_or_a_dsl_error(text):
    try:
        result = run_query(text, STORE)
    except DslError as err:
        assert str(err)
        return
    assert isinstance(result, DslResult)
    assert isinstance(result.as_dict(), dict)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(ISSUE_EXAMPLES), st.integers(0, 120), st.sampled_from(["", " ", "x", "'", "1", ",", "<"]))
def test_fuzz_mutated_examples(text, at, insert):
    mutated = text[:at] + insert + text[at:]
    try:
        assert isinstance(run_query(mutated, STORE), DslResult)
    except DslError:
        pass
