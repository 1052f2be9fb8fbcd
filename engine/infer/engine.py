"""Inference for one run: assert the findings, run the SPARQL rules to a fixpoint, score every
candidate cause they yield, and assert the ranked hypotheses back (``prov:wasDerivedFrom``)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from debugtune.engine.diagnose.run import Diagnosis
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.infer.blind import blind_spots, moe_only
from debugtune.engine.infer.causal import (
    UNKNOWN,
    CauseScore,
    before_breakdown,
    calibrated,
    evidence,
    posterior,
    priors,
    score_cause,
    unknown_score,
)
from debugtune.engine.infer.explain import explanation
from debugtune.engine.infer.model import CausalModel, load_model
from debugtune.engine.infer.report import Candidate, DiagnosisReport
from debugtune.engine.infer.specific import (
    Specificity,
    capped,
    ceiling_of,
    lead_first,
    specificity,
    weigh,
    yield_to_faults,
)
from debugtune.engine.infer.undetermined import Undetermined, undetermined
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.namespaces import GRAPH_INFERRED, KB, run_base, run_id_of_graph
from debugtune.kg.records import CorrelationEdge, Finding, Hypothesis
from debugtune.kg.rules import run_rules
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store


@dataclass
class Ranking:
    """Every candidate's score and confidence, the hypotheses that pass the reporting rules, and the advice:
    advisory causes and causes whose only observed effects are preconditions (facts about the set-up)."""

    scores: list[CauseScore]
    confidences: dict[str, float]      # the posterior (what decides); hypotheses and candidates show calibrated()
    hypotheses: list[Hypothesis]
    candidates: list[Candidate]
    advice: list[Hypothesis] = field(default_factory=list)
    undetermined: Undetermined | None = None
    specificity: dict[str, Specificity] = field(default_factory=dict)


def reportable(model: CausalModel, s: CauseScore, x: Specificity) -> bool:
    """A root cause needs an observed failure: not an advisory cause, not one whose chain holds only
    preconditions (a set-up fact such as unnormalised inputs in a run that trains well), and not one that rests
    on generic internal states alone, with neither its own specific evidence nor harm to an outcome it reaches
    (a recurrent net's growing gradient norm in a run that learns well names no missing clip). Nor, in a run
    with a sign of health and no failure at all (its loss fit the data closely), one whose own evidence is
    set-up facts only: raw input powers in a polynomial fit that converged are advice."""
    return (s.cause not in model.advisory and not (s.explained and set(s.explained) <= model.preconditions)
            and (x.decides or bool(x.harm))
            and not (x.quiet and not x.harm and set(x.present) <= model.preconditions))


def candidate_causes(store: Store, run_id: str) -> list[str]:
    """Causes the rules derived for the run (``dt:candidateCause`` in the inferred graph)."""
    rows = store.select(f"""SELECT DISTINCT ?c WHERE {{ GRAPH {iri(GRAPH_INFERRED)} {{
        {iri(run_base(run_id))} dt:candidateCause ?c }} }}""").column("c")
    return sorted(c[len(KB):] for c in rows if isinstance(c, str) and c.startswith(KB))


def rule_scope(store: Store, run_id: str) -> list[str]:
    """The graphs the rules read for one run: everything but the other runs' graphs (their findings are
    not this run's evidence, and skipping them keeps a shared store's inference time flat)."""
    return [g for g in store.graphs() if run_id_of_graph(g) in (None, run_id)]


def _forget_inferred(store: Store, run_id: str) -> None:
    """Drop what the rules inferred about an earlier diagnosis of this run (one update)."""
    base = literal(run_base(run_id))
    store.update(f"""DELETE {{ GRAPH {iri(GRAPH_INFERRED)} {{ ?s ?p ?o }} }}
        WHERE {{ GRAPH {iri(GRAPH_INFERRED)} {{ ?s ?p ?o FILTER(STRSTARTS(STR(?s), {base})) }} }}""")


def applicable(model: CausalModel, cause: str, judged: set[str], share: float,
               seen: frozenset[str] = frozenset()) -> bool:
    """Whether the run could show what ``cause`` produces: its judged direct effects carry at least ``share`` of
    its direct link strength. A mixture-of-experts cause cannot be told apart in a dense model whose telemetry
    has no experts, nor a straggler in a single-process run: nothing argues for it, and nothing could argue
    against it. ``dt:appliesWhenJudged`` says so where a cause's effects are all generic. Links that calibration
    measured on other kinds of model (``dt:measured``) do not count, nor effects the run could not judge because
    they need a quantity many set-ups do not log (``model.optional``, e.g. the balancing-loss term). A cause some of
    whose specific evidence (``dt:SpecificEvidence``) was observed (``seen``) applies: the run can tell it."""
    if not model.needs_judged.get(cause, frozenset()) <= judged:
        return False
    if any(sym in seen for sym in model.specific.get(cause, ())):
        return True  # what speaks for this cause in particular was observed: the run can tell it
    links = [link for link in model.children.get(cause, ()) if not link.measured
             and (link.target in judged or link.target not in model.optional)]
    total = sum(link.strength for link in links)
    return total > 0 and sum(link.strength for link in links if link.target in judged) >= share * total


def cannot_show(model: CausalModel, experts: bool | None) -> frozenset[str]:
    """The symptoms a model cannot show: an MoE's, where it is known to have no experts (``experts`` False)."""
    return frozenset(s for s in model.symptoms if moe_only(s)) if experts is False else frozenset()


def rank(model: CausalModel, candidates: Iterable[str], findings: Sequence[Finding], judged: Iterable[str],
         edges: Sequence[CorrelationEdge], th: Thresholds, steps: int | None = None,
         from_run_start: bool = True, recorded: frozenset[str] = frozenset(),
         experts: bool | None = None) -> Ranking:
    """Score the candidates against the findings; build the hypotheses the knowledge base lets us report.

    Whether a cause applies is decided on what the run could judge before a breakdown hid it: a NaN leaves later
    symptoms unjudged, but the run was one that could have shown them. ``experts``: whether the model is a
    mixture of experts (None: nothing says); a model known to have none is not asked for an MoE's metrics."""
    candidates = list(candidates)
    could_judge = set(judged)
    findings, judged = before_breakdown(findings, judged)
    # signs of health are counter-evidence only: they neither score a cause nor count as an unexplained finding
    findings, standing = model.split_signs(findings)
    signs = frozenset(f.symptom for f in standing)
    judged = {j for j in judged if j not in model.signs}
    ev = evidence(findings, judged, th["infer.evidence_floor"])
    pri = priors(model, th)
    steps = steps if steps is not None else max((f.end_step + 1 for f in findings), default=0)
    scores = [score_cause(model, c, ev, edges, th, pri.get(c, min(pri.values(), default=1e-6)), steps,
                          from_run_start)
              for c in candidates
              if c in model.causes and applicable(model, c, could_judge, th["infer.applicable_share"],
                                                  frozenset(f.symptom for f in findings))]
    # a rival is any candidate, applicable or not: one whose effects the run cannot show cannot be ruled out either
    rivals = set(candidates) & set(model.causes)
    spec = yield_to_faults(model, {s.cause: specificity(model, s, ev, th, rivals, signs) for s in scores}, ev)
    # a cause whose own evidence decides, and is a fault by definition or came with harm to the outcome, is
    # scored again with the absence of its generic effects discounted
    scores = [score_cause(model, s.cause, ev, edges, th, math.exp(s.log_prior), steps, from_run_start, True)
              if spec[s.cause].discounts else s for s in scores]
    can_report = {s.cause: reportable(model, s, spec[s.cause]) for s in scores}
    weigh(scores, spec, can_report, th)
    conf = posterior(scores, unknown_score(ev, th), th["infer.temperature"])
    by_cause = {s.cause: s for s in scores}
    order = [by_cause[c] for c in lead_first(list(by_cause), conf, {c for c, x in spec.items() if x.decides},
                                             {c for c, x in spec.items() if x.weak_decider})]
    # decisions on the posterior, numbers shown through the calibration map ("unknown" keeps its posterior) and
    # no higher than the ceiling for a cause without its specific evidence (engine.infer.specific)
    shown = {c: (p if c == UNKNOWN else capped(calibrated(p, th), spec[c], th)) for c, p in conf.items()}

    def hypothesis(s: CauseScore, rank: int) -> Hypothesis:
        c = shown[s.cause]
        return Hypothesis(s.cause, c, tuple(s.chain), tuple(s.findings), explanation(model, s, c, ev), rank=rank,
                          basis=spec[s.cause].basis(ceiling_of(spec[s.cause], th)))
    cands = [Candidate(s.cause, shown[s.cause], s.log_score) for s in order]
    cands.append(Candidate(UNKNOWN, conf[UNKNOWN], unknown_score(ev, th)))
    cands.sort(key=lambda c: -c.confidence)
    hyps: list[Hypothesis] = []
    advice: list[Hypothesis] = []
    causal = [s for s in order if can_report[s.cause]]
    for s in order:
        if not can_report[s.cause] and s.explained and conf[s.cause] >= th["infer.report_threshold"]:
            advice.append(hypothesis(s, len(advice) + 1))
    if causal and max(conf[s.cause] for s in causal) >= th["infer.report_threshold"]:
        # precedence orders what the report lists, it does not list: a deciding cause the posterior puts under
        # the listing threshold (specific evidence the rest of the run contradicts) is not shown first at 0.00
        listed = [s for s in causal if conf[s.cause] >= th["infer.list_threshold"]]
        for s in listed[: th.as_int("infer.max_hypotheses")]:
            hyps.append(hypothesis(s, len(hyps) + 1))
    close = len(hyps) >= 2 and conf[hyps[1].cause] >= th["infer.close_call"] * conf[hyps[0].cause]
    open_ = None
    if causal and (not hyps or close):
        moe = cannot_show(model, experts)
        open_ = undetermined(causal, shown, judged, floor=th["infer.list_threshold"],
                             spread_min=th["infer.decider_spread"], recorded=recorded, impossible=moe)
    return Ranking(order, conf, hyps, cands, advice, open_, spec)


def infer(store: Store, diagnosis: Diagnosis, th: Thresholds, *, run_dir: str | None = None,
          model: CausalModel | None = None) -> DiagnosisReport:
    """Assert the diagnosis, run the rules, rank the candidates and assert the hypotheses."""
    timing = dict(diagnosis.timing_s)
    t0 = time.perf_counter()
    meta = {"run_dir": run_dir, "world_size": diagnosis.meta.get("world_size"), "steps": diagnosis.steps,
            "label": diagnosis.meta.get("label") or diagnosis.meta.get("program")}
    run_id = diagnosis.run
    replace_diagnosis(store, run_id, meta, diagnosis.findings, diagnosis.edges)
    _forget_inferred(store, run_id)
    run_rules(store, graphs=rule_scope(store, run_id))
    candidates = candidate_causes(store, run_id)
    timing["infer.rules"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = model or load_model(store)
    ranking = rank(model, candidates, diagnosis.findings, diagnosis.judged, diagnosis.edges, th, diagnosis.steps,
                   diagnosis.meta.get("from_run_start") is not False, diagnosis.recorded, diagnosis.experts)
    timing["infer.score"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    replace_diagnosis(store, run_id, meta, diagnosis.findings, diagnosis.edges, ranking.hypotheses)
    timing["infer.assert"] = time.perf_counter() - t0
    findings, signs = model.split_signs(diagnosis.findings)
    return DiagnosisReport(
        run=run_id, findings=findings, hypotheses=ranking.hypotheses, edges=list(diagnosis.edges),
        candidates=ranking.candidates, coverage=dict(diagnosis.coverage), notes=list(diagnosis.notes),
        advice=ranking.advice, undetermined=ranking.undetermined,
        blind=None if ranking.hypotheses else blind_spots(
            diagnosis.judged, diagnosis.coverage, diagnosis.recorded, th,
            cannot_show(model, diagnosis.experts)),
        signs=signs,
        timing_s=timing, run_dir=run_dir, steps=diagnosis.steps,
        report_threshold=calibrated(th["infer.report_threshold"], th),
        stored_in=getattr(store, "target", None))
