"""Causal scoring of candidate causes: leaky noisy-OR over the causal links, priors from case counts,
temporal precedence along the chain, localisation, correlation support, and the penalty for
symptoms a cause predicts that were judged and not seen. Every constant is a knowledge-base
threshold (``infer.*``, ``cases/thresholds/engine.ttl``).

Scores are log-probabilities up to a shared constant; :func:`posterior` turns them into calibrated
confidences with the knowledge base's temperature, over the candidates plus "unknown" (the
findings explained by the leak alone).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.infer.model import CausalModel
from debugtune.kg.records import CorrelationEdge, Finding, location_kind

UNKNOWN = "unknown"


@dataclass(frozen=True)
class SymptomEvidence:
    """How strongly a symptom was seen (max severity of its findings; 0 = judged and absent)."""

    symptom: str
    strength: float
    findings: tuple[Finding, ...] = ()

    @property
    def onset(self) -> int | None:
        return min((f.onset_step for f in self.findings), default=None)


def evidence(findings: Sequence[Finding], judged: Iterable[str], floor: float = 1.0) -> dict[str, SymptomEvidence]:
    """Per symptom: observed ones with their findings, judged-but-absent ones with strength 0.

    A finding's severity s in [0.5, 1] (0.5 = at its detector's threshold) becomes the evidence strength
    ``floor + (1 - floor) * (2s - 1)``: a finding at its threshold still counts as mostly seen. A finding that
    rests on few steps carries an ``evidence_weight`` < 1 (engine.diagnose.evidence), which scales it."""
    by: dict[str, list[Finding]] = {}
    for f in findings:
        by.setdefault(f.symptom, []).append(f)
    out = {}
    for s, fs in by.items():
        strength = max(evidence_weight(f) * (floor + (1.0 - floor) * min(max(2 * f.severity - 1, 0.0), 1.0))
                       for f in fs)
        out[s] = SymptomEvidence(s, strength, tuple(sorted(fs, key=lambda f: f.onset_step)))
    for s in judged:
        out.setdefault(s, SymptomEvidence(s, 0.0))
    return out


BREAKDOWN = "NaNOrInf"


def before_breakdown(findings: Sequence[Finding], judged: Iterable[str]) -> tuple[list[Finding], set[str]]:
    """The findings that are evidence: once the loss or the gradients are non-finite, every later measurement
    (a dead output, a vanished gradient, a plateau of NaN losses) is what the NaN did, not what caused it; those
    symptoms are left unjudged (neither seen nor absent) unless a finding detected them before the NaN."""
    judged = set(judged)
    nan = [f.onset_step for f in findings if f.symptom == BREAKDOWN]
    if not nan:
        return list(findings), judged
    t = min(nan)
    keep = [f for f in findings if f.symptom == BREAKDOWN
            or (f.detection_step if f.detection_step is not None else f.onset_step) <= t]
    dropped = {f.symptom for f in findings} - {f.symptom for f in keep}
    return keep, judged - dropped


def evidence_weight(f: Finding) -> float:
    """How much the finding rests on (engine.diagnose.evidence): 1 for a detector that does not weigh its steps."""
    w = f.evidence.get("evidence_weight", 1.0)
    return min(max(float(w), 0.0), 1.0) if isinstance(w, int | float) and not isinstance(w, bool) else 1.0


@dataclass
class CauseScore:
    """The log score of one candidate and the parts it is made of."""

    cause: str
    log_prior: float
    log_likelihood: float
    activation: dict[str, float]
    chain: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)
    missing: list[tuple[str, float]] = field(default_factory=list)
    precedence_violations: int = 0
    timing_violations: int = 0
    localised_links: int = 0
    correlated_links: int = 0

    @property
    def log_score(self) -> float:
        return self.log_prior + self.log_likelihood


def activation(model: CausalModel, cause: str, depth: int, cut: frozenset[tuple[str, str]] = frozenset(),
               blocked: frozenset[str] = frozenset()) -> dict[str, float]:
    """P(symptom shows | cause) by noisy-OR propagation along the links, ``depth`` rounds.

    Links in ``cut`` (antecedent, effect) are left out; symptoms in ``blocked`` (judged and not seen)
    get their own probability but pass nothing on: a chain runs through what happened."""
    p = {cause: 1.0}
    for _ in range(max(1, depth)):
        nxt: dict[str, float] = {cause: 1.0}
        keep: dict[str, float] = {}
        for node, pn in p.items():
            if node in blocked:
                continue
            for link in model.children.get(node, ()):
                if link.target == cause or (node, link.target) in cut:
                    continue
                keep[link.target] = keep.get(link.target, 1.0) * (1.0 - pn * link.strength)
        nxt.update({k: 1.0 - v for k, v in keep.items()})
        if nxt == p:
            break
        p = nxt
    p.pop(cause, None)
    return p


def priors(model: CausalModel, th: Thresholds) -> dict[str, float]:
    """P(cause) from confirmed-case counts with additive smoothing, scaled to leave room for unknown."""
    alpha = th["infer.prior_smoothing"]
    k = max(len(model.causes), 1)
    total = sum(model.case_counts.get(c, 0) for c in model.causes) + alpha * k
    mass = 1.0 - th["infer.unknown_prior"]
    return {c: mass * (model.case_counts.get(c, 0) + alpha) / total for c in model.causes}


def _same_place(a: Finding, b: Finding) -> bool:
    """Whether two findings sit on the same layer, expert, rank or device (paths nest)."""
    if not a.entity or not b.entity:
        return False
    if a.entity == b.entity:
        return True
    kinds = {location_kind(a.entity), location_kind(b.entity)}
    if kinds <= {"layer", "expert"}:
        x, y = sorted((a.entity, b.entity), key=len)
        return y.startswith(x + "/") or y.startswith(x + ".")
    return False


def _term(e: float, q: float, absent_weight: float) -> float:
    q = min(max(q, 1e-9), 1 - 1e-9)
    return e * math.log(q) + (1.0 - e) * absent_weight * math.log(1.0 - q)


def leak(th: Thresholds, symptom: str) -> float:
    """P(symptom's finding | no modelled cause): its own ``infer.leak.<Symptom>`` or the default leak."""
    return th.get(f"infer.leak.{symptom}") or th["infer.leak"]


def unknown_score(ev: Mapping[str, SymptomEvidence], th: Thresholds) -> float:
    """Log score of "unknown": every symptom explained by the leak alone."""
    w = th["infer.absent_weight"]
    return math.log(th["infer.unknown_prior"]) + sum(_term(x.strength, leak(th, s), w) for s, x in ev.items())


def score_cause(model: CausalModel, cause: str, ev: Mapping[str, SymptomEvidence],
                edges: Sequence[CorrelationEdge], th: Thresholds, prior: float, steps: int = 0,
                from_run_start: bool = True, specific_seen: bool = False) -> CauseScore:
    """``specific_seen``: the cause's own specific evidence counts in this run (engine.infer.specific), so the
    absence of a generic effect weighs only ``infer.generic_absent_factor`` of the usual: a presentation that
    clipping or an adaptive optimiser softens (no drift, no oscillation) does not veto what decides. A cause's
    specific items are alternative signatures (a layer left out of the optimizer, or frozen with
    ``requires_grad=False``): once one counts, the absence of the others weighs as a generic effect's."""
    w = th["infer.absent_weight"]
    own = set() if specific_seen else set(model.specific.get(cause, ()))
    generic_w = w * th["infer.generic_absent_factor"] if specific_seen else w
    cut = _order_violations(model, ev, th)
    absent = frozenset(sym for sym, x in ev.items() if not x.findings)
    base = activation(model, cause, th.as_int("infer.max_depth"), cut, absent)
    direct = {link.target for link in model.children.get(cause, ())}
    # a cause with calibration profiles is a mixture of its presentations (e.g. mild and severe on a given kind
    # of model): measured rates replace the propagated estimate, and the likelihoods of the profiles whose runs
    # judged the same symptoms as this one (the same kind of model and telemetry) are averaged. The knowledge
    # base's own links are one more presentation beside them: a run may present as no measured kind of run did (a
    # stall profiled over a whole trace window must not veto the step-time regression of a stall that starts
    # mid-run; a residual network that absorbs unnormalised inputs shows the input scale and nothing downstream)
    judged = set(ev)
    every = list(model.profiles.get(cause, ()))
    profiles = [prof for prof in every if overlap(set(prof), judged) >= th["infer.profile_match"]] or every
    variants = [{**base, **{k: v for k, v in prof.items() if (cause, k) not in cut}} for prof in profiles] + [base]
    logs = [sum(_term(x.strength, 1.0 - (1.0 - leak(th, sym)) * (1.0 - act.get(sym, 0.0)),
                      w if sym in own else generic_w) for sym, x in ev.items()) for act in variants]
    best = max(range(len(variants)), key=logs.__getitem__)
    act = variants[best]
    s = CauseScore(cause, math.log(max(prior, 1e-12)), _logmeanexp(logs), act)
    min_p = th["infer.chain_min_p"]
    for sym, x in ev.items():
        p = act.get(sym, 0.0)
        if x.strength > 0 and p >= min_p and p > leak(th, sym):
            s.explained.append(sym)
        elif x.strength == 0 and sym in direct and p >= th["infer.report_threshold"]:
            s.missing.append((sym, p))
    if cause not in model.from_start:
        s.explained = _since_event(s.explained, ev, _start_slack(th, steps))
    s.explained = _chain_order(model, s.explained, ev)
    s.chain = [cause, *s.explained]
    s.findings = [f.id for sym in s.explained for f in ev[sym].findings]
    _structure(model, s, ev, edges, th)
    s.timing_violations = _timing(model, s, ev, th, steps, from_run_start)
    timing_penalty = th["infer.precedence_penalty"] if s.cause in model.from_start else th["infer.event_early_penalty"]
    s.log_likelihood += s.precedence_violations * math.log(th["infer.precedence_penalty"])
    s.log_likelihood += s.timing_violations * math.log(timing_penalty)
    s.log_likelihood += s.localised_links * math.log(th["infer.localisation_bonus"])
    s.log_likelihood += s.correlated_links * math.log(th["infer.correlation_bonus"])
    return s


def _start_slack(th: Thresholds, steps: int) -> float:
    """The first stretch of a run (steps): effects of a cause present from the start show within it."""
    return max(th["infer.precedence_slack"], th["infer.start_slack_frac"] * steps)


def _since_event(symptoms: list[str], ev: Mapping[str, SymptomEvidence], slack: float) -> list[str]:
    """An event's chain without what was there before it: when some of the symptoms it explains began after
    the first ``slack`` steps (normal training, then the event), those that began within them predate it."""
    late = [sym for sym in symptoms if (ev[sym].onset or 0) > slack]
    return late if late else symptoms


def overlap(a: set[str], b: set[str]) -> float:
    """Jaccard overlap of two symptom sets (which symptoms a profile's runs and this run could judge)."""
    return len(a & b) / max(len(a | b), 1)


def _logmeanexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values) / len(values))


def _chain_order(model: CausalModel, symptoms: list[str], ev: Mapping[str, SymptomEvidence]) -> list[str]:
    """Symptoms in onset order; on equal onsets an antecedent (by the causal links) comes first."""
    inside = set(symptoms)
    ancestors: dict[str, int] = {}
    for sym in symptoms:
        seen, todo = set(), [sym]
        while todo:
            for link in model.parents.get(todo.pop(), ()):
                if link.source in inside and link.source not in seen and link.source != sym:
                    seen.add(link.source)
                    todo.append(link.source)
        ancestors[sym] = len(seen)
    return sorted(symptoms, key=lambda sym: (ev[sym].onset or 0, ancestors[sym], sym))


def _timing(model: CausalModel, s: CauseScore, ev: Mapping[str, SymptomEvidence], th: Thresholds,
            steps: int, from_run_start: bool = True) -> int:
    """Timing violations of the cause as a whole.

    A cause present from the start should show each observed direct effect within the link's typical lag
    (times the lag factor) plus a slack of ``infer.start_slack_frac`` of the run: each effect beginning later
    counts once. An event (a cause not present from the start) needs a stretch of normal training before it
    to be seen as one: when all its observed direct effects begin within that slack, that counts once. Any
    effect that began before its link's ``min_lag`` (the earliest step it can appear) counts once more."""
    slack = _start_slack(th, steps)
    onsets = [(link, ev[link.target].onset or 0) for link in model.children.get(s.cause, ())
              if link.target in ev and ev[link.target].findings]
    if not onsets:
        return 0
    # an effect that began before it could have (an optimizer setting cannot change the first step's gradient)
    impossible = sum(onset < link.min_lag for link, onset in onsets)
    if s.cause in model.from_start:
        return impossible + sum(onset > th["infer.precedence_lag_factor"] * (link.lag or 0) + slack
                                for link, onset in onsets)
    # a window that does not begin with the run (a profiler trace) shows no stretch of normal training before an
    # event that was already there when it began
    return impossible + int(from_run_start and all(onset <= slack for _, onset in onsets))


def _order_violations(model: CausalModel, ev: Mapping[str, SymptomEvidence], th: Thresholds) -> frozenset:
    """Links (antecedent, effect) between two observed symptoms whose effect began before the antecedent by
    more than the slack (at least twice the link's typical lag): a chain must follow onset order, so the
    effect cannot have come through that link."""
    slack0, factor = th["infer.precedence_slack"], th["infer.precedence_lag_factor"]
    out = set()
    for sym, x in ev.items():
        if not x.findings:
            continue
        for link in model.parents.get(sym, ()):
            up = ev.get(link.source)
            slack = max(slack0, factor * (link.lag or 0))
            if up is not None and up.findings and (x.onset or 0) + slack < (up.onset or 0):
                out.add((link.source, sym))
    return frozenset(out)


def _structure(model: CausalModel, s: CauseScore, ev: Mapping[str, SymptomEvidence],
               edges: Sequence[CorrelationEdge], th: Thresholds) -> None:
    """Count precedence violations, localised links and correlated links inside the chain.

    A violation is a chain symptom that the cause explains only through observed antecedents which all
    began after it (its probability already lost those paths; the penalty marks the broken order)."""
    seen = set(s.explained)
    direct = {link.target for link in model.children.get(s.cause, ())}
    pairs = {(e.a, e.b) for e in edges} | {(e.b, e.a) for e in edges}
    cut = _order_violations(model, ev, th)
    for sym in s.explained:
        parents = [link for link in model.parents.get(sym, ()) if link.source in seen or link.source == s.cause]
        if sym not in direct and parents and all((link.source, sym) in cut for link in parents
                                                  if link.source != s.cause):
            s.precedence_violations += 1
        for link in parents:
            if link.source == s.cause or (link.source, sym) in cut:
                continue
            fa, fb = ev[link.source].findings, ev[sym].findings
            if any(_same_place(a, b) for a in fa for b in fb):
                s.localised_links += 1
            if any((a.id, b.id) in pairs for a in fa for b in fb):
                s.correlated_links += 1


def calibrated(p: float, th: Thresholds) -> float:
    """The confidence shown for a cause whose posterior is ``p``: a Platt map, sigmoid(slope * logit(p) + offset),
    fitted on out-of-family answers of the fault bench (``infer.confidence.*``). The posterior decides what is
    reported; the map only makes the number say how often such an answer is right on a family not seen."""
    a, b = th["infer.confidence.slope"], th["infer.confidence.offset"]
    q = min(max(p, 1e-6), 1.0 - 1e-6)
    z = a * math.log(q / (1.0 - q)) + b
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def posterior(scores: Sequence[CauseScore], unknown: float, temperature: float) -> dict[str, float]:
    """The posterior over the candidates and "unknown" (softmax of score / temperature): what decides what is
    reported; ``calibrated`` turns a cause's posterior into the confidence shown."""
    logits = {s.cause: s.log_score / temperature for s in scores}
    logits[UNKNOWN] = unknown / temperature
    top = max(logits.values())
    z = {k: math.exp(v - top) for k, v in logits.items()}
    total = sum(z.values())
    return {k: v / total for k, v in z.items()}
