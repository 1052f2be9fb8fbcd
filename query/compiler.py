"""AST → SPARQL: each query form compiles to SPARQL text (printable) and a runner that executes it.

Values reach the SPARQL only through `kg.sparql.iri` / `literal` after resolution against the graph;
field names and orderings come from the tables of `query.clauses`, never from the query text. ``suggest`` and
``cases similar to`` compile to the candidate SPARQL of `engine.suggest` and finish in Python there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from debugtune.engine.suggest import (
    CRITERIA,
    SuggestError,
    load_settings,
    near_misses,
    similar_cases,
    suggest,
    suggestion_sparql,
)
from debugtune.engine.suggest.queries import COUNTS, cases_sparql, label_of, signature_sparql
from debugtune.kg.namespaces import PREFIXES, local_name, run_graph
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store
from debugtune.query import ast
from debugtune.query.clauses import (
    CAUSE_FIELDS,
    EXPERIMENT_FIELDS,
    MAX_LIMIT,
    REMEDY_FIELDS,
    RUN_FIELDS,
    SUGGEST_FIELDS,
    SYMPTOM_FIELDS,
    field_spec,
    limit_clause,
    number_value,
    order_clause,
    where_clause,
    word_value,
)
from debugtune.query.errors import DslNameError, DslValueError
from debugtune.query.resolve import Vocabulary, suggestions
from debugtune.query.shape import (
    SUGGESTION_COLUMNS,
    Converter,
    json_object,
    keyword_of,
    pairs,
    shape_rows,
    suggestion_rows,
)

Outcome = tuple[tuple[dict[str, Any], ...], dict[str, Any], tuple[str, ...]]
"""What a runner returns: rows, details, notes."""


@dataclass(frozen=True)
class Compiled:
    """A compiled query: the SPARQL it runs (in order), its columns, and how to run it."""

    kind: str
    sparql: tuple[str, ...]
    columns: tuple[str, ...]
    runner: Callable[[Store], Outcome] = field(repr=False, compare=False)
    python_step: str = ""


def _sparql_runner(sparql: str, columns: Sequence[str], convert: Mapping[str, Converter],
                   empty_note: str = "") -> Callable[[Store], Outcome]:
    def run(store: Store) -> Outcome:
        rows = shape_rows(store.select(sparql).dicts(), columns, convert)
        return rows, {}, (() if rows or not empty_note else (empty_note,))
    return run


def _symptoms(q: ast.SymptomsQuery, vocab: Vocabulary) -> Compiled:
    run = vocab.run_id(q.run)
    patterns, filters = where_clause(q.where, SYMPTOM_FIELDS, "symptoms", vocab)
    sparql = f"""SELECT ?id ?symptom ?dimension ?location ?entity ?onset ?end ?severity ?detector WHERE {{
  GRAPH {iri(run_graph(run))} {{
    ?f a dt:Finding ; dt:findingId ?id ; dt:symptom ?symptom ; dt:inDimension ?dimension ;
       dt:locationKind ?location ; dt:entity ?entity ; dt:onsetStep ?onset ; dt:endStep ?end ;
       dt:severity ?severity ; dt:detector ?detector .
  }}{patterns}{filters}
}}
{order_clause(q.order, SYMPTOM_FIELDS, "symptoms", "?onset", "?id")}{limit_clause(q.limit)}"""
    columns = ("id", "symptom", "dimension", "location", "entity", "onset", "end", "severity", "detector")
    kw = keyword_of(vocab.keyword_names())
    return Compiled("symptoms", (sparql,), columns, _sparql_runner(
        sparql, columns, {"dimension": kw, "location": kw}, f"run {run} has no findings matching the query"))


def _causes(q: ast.CausesQuery, vocab: Vocabulary) -> Compiled:
    run = vocab.run_id(q.run)
    patterns, filters = where_clause(q.where, CAUSE_FIELDS, "causes", vocab)
    sparql = f"""SELECT ?rank ?cause ?causeLabel ?confidence ?explanation WHERE {{
  GRAPH {iri(run_graph(run))} {{
    ?h a dt:Hypothesis ; dt:cause ?cause ; dt:confidence ?confidence ; dt:hypothesisRank ?rank ;
       dt:explanation ?explanation .
  }}
  {label_of("cause", "Cause")}{patterns}{filters}
}}
{order_clause(q.order, CAUSE_FIELDS, "causes", "?rank", "?cause")}{limit_clause(q.limit)}"""
    columns = ("rank", "cause", "causeLabel", "confidence", "explanation")
    return Compiled("causes", (sparql,), columns, _sparql_runner(
        sparql, columns, {}, f"run {run} has no hypotheses (run `cann-debug root-cause {run}` first)"))


def _explain(q: ast.ExplainQuery, vocab: Vocabulary) -> Compiled:
    run, cause = vocab.run_id(q.run), vocab.resolve("Cause", q.cause)
    g, c = iri(run_graph(run)), iri(cause)
    chain = f"""SELECT ?rank ?confidence ?explanation ?position ?node ?next ?strength WHERE {{
  GRAPH {g} {{
    ?h a dt:Hypothesis ; dt:cause {c} ; dt:hypothesisRank ?rank ; dt:confidence ?confidence ;
       dt:explanation ?explanation ; dt:chainStep ?step .
    ?step dt:position ?position ; dt:node ?node .
    OPTIONAL {{ ?h dt:chainStep ?after . ?after dt:position ?p2 ; dt:node ?next FILTER(?p2 = ?position + 1) }}
  }}
  OPTIONAL {{ ?link a dt:CausalLink ; dt:from ?node ; dt:to ?next ; dt:strength ?strength }}
}}
ORDER BY ?position DESC(?strength)"""
    findings = f"""SELECT ?id ?symptom ?entity ?onset ?end ?severity WHERE {{
  GRAPH {g} {{
    ?h a dt:Hypothesis ; dt:cause {c} ; dt:supportedBy ?f .
    ?f dt:findingId ?id ; dt:symptom ?symptom ; dt:entity ?entity ; dt:onsetStep ?onset ; dt:endStep ?end ;
       dt:severity ?severity .
  }}
}}
ORDER BY ?onset ?id"""
    columns = ("position", "node", "next", "strength")

    def runner(store: Store) -> Outcome:
        rows = store.select(chain).dicts()
        steps: dict[int, dict[str, Any]] = {}
        for r in rows:
            steps.setdefault(r["position"], r)
        if not steps:
            return (), {"cause": local_name(cause), "run": run}, (
                f"{local_name(cause)} is not among the hypotheses of run {run}",)
        head = rows[0]
        details = {"cause": local_name(cause), "run": run, "rank": head["rank"], "confidence": head["confidence"],
                   "explanation": head["explanation"],
                   "findings": list(shape_rows(store.select(findings).dicts(),
                                               ("id", "symptom", "entity", "onset", "end", "severity")))}
        return shape_rows([steps[k] for k in sorted(steps)], columns), details, ()

    return Compiled("explain", (chain, findings), columns, runner)


def _suggest(q: ast.SuggestQuery, vocab: Vocabulary) -> Compiled:
    run = vocab.run_id(q.run)
    limits: dict[str, Any] = {}
    for c in q.where:
        spec = field_spec(SUGGEST_FIELDS, c.field, "suggest", c.pos)
        if c.op not in spec.ops:
            raise DslValueError(f"{c.field} takes <= or <, not {c.op}", c.pos.line, c.pos.column)
        if spec.kind.startswith("keyword"):
            rank = vocab.risk_rank(vocab.keyword("RiskLevel", word_value(c).text, c.field, c.pos))
            limits["max_risk"] = rank - 1 if c.op == "<" else rank
        elif c.field.lower() == "cost":
            x = number_value(c, spec)
            limits["max_cost"] = x if c.op == "<=" else math.nextafter(x, -math.inf)
            if not limits["max_cost"] >= 0:
                raise DslValueError(f"cost compares with non-negative card-hours, got {c.op} {x}", c.pos.line,
                                    c.pos.column)
        else:
            x = number_value(c, spec)
            if not abs(x) <= MAX_LIMIT:
                raise DslValueError(f"experiments must be at most {MAX_LIMIT}", c.pos.line, c.pos.column)
            limits["max_experiments"] = math.floor(x) - (1 if c.op == "<" and x.is_integer() else 0)
    weights = _weights(q.rank, vocab)
    limit_clause(q.limit)
    sparql = (suggestion_sparql(None, run, max_risk=limits.get("max_risk"), max_cost=limits.get("max_cost"),
                                max_experiments=limits.get("max_experiments")), signature_sparql(run))

    def runner(store: Store) -> Outcome:
        found = suggest(store, run, weights=weights, limit=q.limit, **limits)
        note = () if found else (f"no remedy matches: run {run} has no hypotheses with remedies within the "
                                 "constraints",)
        return suggestion_rows(found), {"run": run, "weights": weights}, note

    step = ("engine.suggest.suggest: score = relevance × weighted(effectiveness, cost, risk) × success rate; "
            "cases ordered by signature similarity")
    return Compiled("suggest", sparql, SUGGESTION_COLUMNS, runner, step)


def _weights(criteria: Sequence[ast.Criterion], vocab: Vocabulary) -> dict[str, float] | None:
    if not criteria:
        return None
    defaults = load_settings(vocab.store).weights
    out: dict[str, float] = {}
    for c in criteria:
        name = c.name.lower()
        if name not in CRITERIA:
            raise DslNameError("ranking criterion", c.name, suggestions(c.name, CRITERIA) or list(CRITERIA),
                               c.pos.line, c.pos.column)
        if name in out:
            raise DslValueError(f"{name} is ranked twice", c.pos.line, c.pos.column)
        weight = defaults[name] if c.weight is None else c.weight
        if not 0 <= weight < float("inf"):
            raise DslValueError(f"a weight is a non-negative number, got {weight}", c.pos.line, c.pos.column)
        out[name] = weight
    if sum(out.values()) <= 0:
        raise DslValueError("the ranking weights are all zero")
    return out


def _remedies(q: ast.RemediesQuery, vocab: Vocabulary) -> Compiled:
    cause = vocab.resolve("Cause", q.cause)
    patterns, filters = where_clause(q.where, REMEDY_FIELDS, "remedies", vocab)
    sparql = f"""SELECT ?remedy ?remedyLabel ?effectiveness ?cost ?risk ?success_rate ?successes ?failures WHERE {{
  ?remedy a dt:Remedy ; dt:addresses {iri(cause)} ; dt:effectiveness ?effectiveness ; dt:cost ?cost ;
          dt:hasRisk ?riskLevel .
  ?riskLevel dt:keyword ?risk ; dt:rank ?riskRank .
  {label_of("remedy", "Remedy")}
  {COUNTS}
  OPTIONAL {{ ?alpha dt:thresholdKey "suggest.prior.alpha" ; dt:value ?a0 .
             ?beta dt:thresholdKey "suggest.prior.beta" ; dt:value ?b0 }}
  BIND((?a0 + COALESCE(?successes, 0)) / (?a0 + ?b0 + COALESCE(?successes, 0) + COALESCE(?failures, 0))
       AS ?success_rate){patterns}{filters}
}}
{order_clause(q.order, REMEDY_FIELDS, "remedies", "DESC(?effectiveness)", "?remedy")}{limit_clause(q.limit)}"""
    columns = ("remedy", "remedyLabel", "effectiveness", "cost", "risk", "success_rate", "successes", "failures")
    return Compiled("remedies", (sparql,), columns, _sparql_runner(
        sparql, columns, {}, f"no remedy for {local_name(cause)} matches the query"))


def _cases(q: ast.CasesQuery, vocab: Vocabulary) -> Compiled:
    run = vocab.run_id(q.run)
    if q.threshold is not None and not 0 <= q.threshold <= 1:
        raise DslValueError(f"a similarity threshold lies in [0, 1], got {q.threshold}")
    limit_clause(q.limit)
    columns = ("case", "label", "score", "cause", "remedy", "outcome", "graph")

    def runner(store: Store) -> Outcome:
        found = similar_cases(store, run, threshold=q.threshold, limit=q.limit)
        rows = tuple({"case": c.case, "label": c.label, "score": c.score, "cause": c.cause, "remedy": c.remedy,
                      "outcome": c.outcome, "graph": c.graph} for c in found)
        return rows, {"run": run}, (() if rows else (_near_misses_note(store, run, q.threshold),))

    step = "engine.suggest.similar_cases: signature similarity (docs/query.md) ≥ threshold, best first"
    return Compiled("cases", (signature_sparql(run), cases_sparql()), columns, runner, step)


def _near_misses_note(store: Store, run: str, threshold: float | None) -> str:
    """No case passed the threshold: name the nearest ones with their scores (``engine.suggest.near_misses``)."""
    threshold = load_settings(store).threshold if threshold is None else threshold
    near = near_misses(store, run, threshold=threshold)
    if not near:
        return f"no case is similar enough to run {run} (none shares a symptom with it)"
    best = ", ".join(f"{local_name(c.case)} {c.score:.3f} ({c.cause or 'no cause'})" for c in near)
    return (f"no case reaches the similarity threshold {threshold:g} for run {run}; nearest: {best} "
            f"(see them with `cases similar to run {run} threshold {max(0.0, near[-1].score - 0.005):.2f}`)")


def _experiments(q: ast.ExperimentsQuery, vocab: Vocabulary) -> Compiled:
    remedy = vocab.resolve("Remedy", q.remedy)
    patterns, filters = where_clause(q.where, EXPERIMENT_FIELDS, "experiments", vocab)
    sparql = f"""SELECT ?experiment ?run ?case ?status ?outcome ?cost ?seed ?parameters
       (GROUP_CONCAT(CONCAT(?objName, "=", STR(?objValue)); separator=", ") AS ?objectives) WHERE {{
  ?e a dt:Experiment ; dt:remedy {iri(remedy)} ; dt:status ?statusNode .
  ?statusNode dt:keyword ?status .
  OPTIONAL {{ ?e skos:prefLabel ?label }}
  BIND(COALESCE(?label, STR(?e)) AS ?experiment)
  OPTIONAL {{ ?e dt:cost ?cost }}
  OPTIONAL {{ ?e dt:seed ?seed }}
  OPTIONAL {{ ?e dt:parametersJson ?parameters }}
  OPTIONAL {{ ?e dt:inRun ?r . ?r dt:runId ?run }}
  OPTIONAL {{ ?case dt:hasExperiment ?e
             OPTIONAL {{ ?case dt:outcome ?outcomeNode . ?outcomeNode dt:keyword ?outcome }} }}
  OPTIONAL {{ ?e dt:objective ?o . ?o dt:metricName ?objName ; dt:value ?objValue }}{patterns}{filters}
}}
GROUP BY ?e ?experiment ?run ?case ?status ?outcome ?cost ?seed ?parameters
{order_clause(q.order, EXPERIMENT_FIELDS, "experiments", "?run ?case", "?experiment")}{limit_clause(q.limit)}"""
    columns = ("experiment", "run", "case", "status", "outcome", "cost", "seed", "parameters", "objectives")
    return Compiled("experiments", (sparql,), columns, _sparql_runner(
        sparql, columns, {"parameters": json_object, "objectives": pairs, "case": lambda v: v},
        f"no experiment of {local_name(remedy)} matches the query"))


def _runs(q: ast.RunsQuery, vocab: Vocabulary) -> Compiled:
    sparql = f"""SELECT ?run ?dir ?steps ?findings ?topCause ?confidence WHERE {{
  ?r a dt:TrainingRun ; dt:runId ?run .
  OPTIONAL {{ ?r dt:runDir ?dir }}
  OPTIONAL {{ ?r dt:stepCount ?steps }}
  OPTIONAL {{ SELECT ?r (COUNT(?f) AS ?found) WHERE {{ ?f a dt:Finding ; dt:inRun ?r }} GROUP BY ?r }}
  BIND(COALESCE(?found, 0) AS ?findings)
  OPTIONAL {{ ?h a dt:Hypothesis ; dt:inRun ?r ; dt:hypothesisRank 1 ; dt:cause ?topCause ;
             dt:confidence ?confidence }}
}}
{order_clause(q.order, RUN_FIELDS, "runs", "?run", "?r")}{limit_clause(q.limit)}"""
    columns = ("run", "dir", "steps", "findings", "topCause", "confidence")
    return Compiled("runs", (sparql,), columns, _sparql_runner(sparql, columns, {}, "the store holds no runs"))


_FORMS: dict[type, Callable[[Any, Vocabulary], Compiled]] = {
    ast.SymptomsQuery: _symptoms, ast.CausesQuery: _causes, ast.ExplainQuery: _explain,
    ast.SuggestQuery: _suggest, ast.RemediesQuery: _remedies, ast.CasesQuery: _cases,
    ast.ExperimentsQuery: _experiments, ast.RunsQuery: _runs,
}


def self_contained(sparql: str) -> str:
    """The query with PREFIX lines for the predeclared prefixes it uses, so it runs on any endpoint."""
    used = [p for p in PREFIXES if re.search(rf"(?<![\w.-]){p}:", sparql)]
    return "".join(f"PREFIX {p}: <{PREFIXES[p]}>\n" for p in used) + sparql


def compile_ast(query: ast.Query, store: Store) -> Compiled:
    """Resolve the names of a parsed query against ``store`` and compile it (``sparql`` is self-contained)."""
    try:
        compiled = _FORMS[type(query)](query, Vocabulary(store))
    except SuggestError as err:
        raise DslValueError(str(err)) from None
    return replace(compiled, sparql=tuple(self_contained(s) for s in compiled.sparql))
