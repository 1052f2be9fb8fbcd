"""Specific evidence decides; generic evidence cannot (docs/diagnose.md, "Specific evidence decides").

The knowledge base names, per cause, the symptoms that speak for it in particular (``dt:SpecificEvidence``:
stale gradients for a missing ``zero_grad``, the balancing term's negligible share for a disabled balancing
loss) and those that speak against it (``dt:CounterEvidence``: a tiny update ratio against a learning rate that
is too high). Spikes, plateaus and exploding norms follow from many causes: they score a cause, but a cause
that rests on them alone is shown at no more than ``infer.unspecific_ceiling``, and a cause whose specific
evidence was observed leads.

Specific evidence decides which cause, not whether there is one: the absence of a cause's generic effects is
discounted (its harm may be hidden by clipping or an adaptive optimizer) only where the evidence is a fault by
definition (``dt:sufficientAlone``) or an outcome symptom the cause reaches was observed (``dt:isOutcome``: the loss
stalls, experts starve). Dead ReLUs in a run that learns are sparsity, not a dying-ReLU fault.

A rival that cannot be ruled out: a specific symptom does not decide for a cause when another cause produces it
too (an authored link straight into it) and none of that rival's own specific evidence could be judged in the run;
evidence that is a fault by definition (``dt:sufficientAlone``) is exempt. Saturated
units say "saturating activations" only where the init scale was measured; a Trainer run that records no init
gain cannot tell the two apart, and its confidence stays under the ceiling with the deciding measurement named.

A sign of health (``dt:healthSign``: the loss fit the data closely) is counter-evidence only, against the causes
whose harm is a loss that cannot fall; where it stands and no outcome symptom was seen, a cause resting on set-up
facts alone is advice (engine.infer.engine.reportable).

A set-up fact yields to a fault the run shows happening: raw inputs do not decide for themselves in a run whose
gradients were never zeroed, nor take a slow loss from a learning rate whose own evidence is beside it
(``yield_to_faults``).

Upstream explains downstream: a specific symptom does not count for a cause when an observed symptom with a
path of causal links into it, which the cause itself does not reach, began no later (unnormalised inputs that bias a
router explain the biased router before a gate-initialisation cause of its own is named).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace

from debugtune.engine.diagnose.evidence import lower_bound
from debugtune.engine.diagnose.thresholds import Thresholds
from debugtune.engine.infer.causal import CauseScore, SymptomEvidence, evidence_weight, overlap
from debugtune.engine.infer.model import CausalModel
from debugtune.kg.records import Finding


@dataclass(frozen=True)
class Specificity:
    """What speaks for one cause in particular, what explains it upstream, and what speaks against it."""

    present: tuple[str, ...] = ()                    # observed specific evidence no other upstream symptom explains
    upstream: tuple[tuple[str, str], ...] = ()       # (specific symptom, the observed upstream symptom explaining it)
    against: tuple[str, ...] = ()                    # observed counter-evidence
    declared: tuple[str, ...] = ()                   # every specific symptom the knowledge base names for the cause
    harm: tuple[str, ...] = ()                       # observed outcome symptoms the cause reaches
    sufficient: bool = False                         # some present evidence is a fault by definition
    rivals: tuple[tuple[str, str], ...] = ()         # (specific symptom, a cause producing it that was not ruled out)
    measurable: bool = True                          # some declared specific evidence was judged in the run
    familiarity: float | None = None                 # best overlap of a calibration profile's judged symptoms
    familiar: bool = True                            # ... reaches infer.familiar_overlap (or the cause has none)
    quiet: bool = False                              # a sign of health (dt:healthSign) and no outcome symptom
    yields_to: tuple[str, ...] = ()                  # causes whose fault by definition outranks its set-up facts
    setup_only: bool = False                         # present evidence is set-up facts only (dt:precondition)
    thin: tuple[str, ...] = ()                       # present evidence whose every finding is only suspected

    @property
    def decides(self) -> bool:
        """Whether the cause's own evidence is in the run (observed, unexplained, and nothing against it): it leads
        the causes resting on generic symptoms."""
        return bool(self.present or self.rivals) and not self.against and not self.yields_to

    @property
    def certain(self) -> bool:
        """Whether it decides on evidence no unruled rival shares, that evidence is more than a set-up fact or came
        with harm to an outcome, and some of it is more than a suspicion (held on enough of the steps it was
        judged on): only then may it be shown above the ceiling."""
        return (bool(set(self.present) - set(self.thin)) and not self.against and not self.yields_to
                and not self.unharmed_setup)

    @property
    def unharmed_setup(self) -> bool:
        """Its evidence is set-up facts only and no outcome it reaches was seen (internal states at most): raw
        inputs whose early gradients are ten times the weights, in a run whose loss still falls to 2% of its
        start. The fact is real; whether it cost the run, one run cannot show (its twin with the fact fixed could),
        and the bench's calibration, whose healthy runs never have such a fact, would call it certain."""
        return self.setup_only and not self.harm

    @property
    def weak_decider(self) -> bool:
        """It decides on an unharmed set-up fact: it yields the lead to a cause whose evidence is more."""
        return self.decides and self.unharmed_setup

    @property
    def discounts(self) -> bool:
        """Whether the absence of the cause's generic effects is discounted: it decides, and its evidence is a
        fault by definition or harm to the outcome was seen."""
        return self.decides and (self.sufficient or bool(self.harm))

    def unfamiliar_note(self) -> str:
        """Where no calibration profile of the cause judged what this run judged, the confidence rests on the
        knowledge base's links, not on rates measured on runs like this one: the report says so."""
        if self.familiar:
            return ""
        return (f"; no calibrated run of this cause judged what this run judged (best overlap "
                f"{self.familiarity or 0.0:.2f}): the confidence is the knowledge base's estimate, not a measured rate")

    def basis(self, ceiling: float) -> str:
        """One sentence for the report: why the confidence is what it is."""
        if self.against:
            return (f"evidence against it: {', '.join(self.against)} (shown at most {ceiling:.2f})")
        if self.yields_to:
            return (f"its specific evidence ({', '.join(self.present)}) is a fact about the set-up, and this run "
                    f"shows {', '.join(self.yields_to)} happening (a fault by definition, or its own evidence beside "
                    f"the same harm); shown at most {ceiling:.2f}")
        if self.present and self.unharmed_setup:
            return (f"its specific evidence ({', '.join(self.present)}) is a fact about the set-up, and no outcome "
                    f"it reaches was seen (internal states at most): whether it cost the run, a replay "
                    f"with it fixed would tell; shown at most {ceiling:.2f}")
        if self.present and set(self.present) <= set(self.thin):
            return (f"its specific evidence ({', '.join(self.present)}) is thin: it held on too few of the steps it "
                    f"was judged on to be more than suspected (steps_shown of steps_judged); shown at most "
                    f"{ceiling:.2f}")
        if self.present:
            return f"specific evidence: {', '.join(self.present)}" + self.unfamiliar_note()
        if self.rivals:
            why = ", ".join(f"{s} also by {', '.join(c for t, c in self.rivals if t == s)}"
                            for s in dict.fromkeys(s for s, _c in self.rivals))
            many = len({c for _s, c in self.rivals}) > 1
            whom, whose = ("causes", "their") if many else ("a cause", "that cause's")
            return (f"its specific evidence is shared with {whom} this run cannot rule out ({why}: none of "
                    f"{whose} own evidence was measured); shown at most {ceiling:.2f}")
        if self.upstream:
            why = ", ".join(f"{s} by {u}" for s, u in self.upstream)
            return f"its specific evidence is explained upstream ({why}); shown at most {ceiling:.2f}"
        if self.declared and not self.measurable:
            return (f"none of its specific evidence could be measured in this run (would decide: "
                    f"{', '.join(self.declared)}); generic symptoms only, shown at most {ceiling:.2f}")
        if self.declared:
            return (f"no specific evidence (would decide: {', '.join(self.declared)}); generic symptoms only, "
                    f"shown at most {ceiling:.2f}")
        return ("the knowledge base names no specific evidence for it; generic symptoms only, "
                f"shown at most {ceiling:.2f}")


def support(f: Finding, th: Thresholds) -> float:
    """How much of what a finding was judged on showed it: the lower credible bound of ``steps_shown`` of
    ``steps_judged`` (``engine.diagnose.evidence``) where it counts them, else its ``evidence_weight`` (1: a
    finding that does not count its steps)."""
    shown, judged = f.evidence.get("steps_shown"), f.evidence.get("steps_judged")
    if isinstance(shown, int | float) and isinstance(judged, int | float) and judged > 0:
        return lower_bound(int(shown), int(judged), th["diagnose.evidence.quantile"])
    return evidence_weight(f)


def _observed(ev: Mapping[str, SymptomEvidence], symptom: str) -> bool:
    x = ev.get(symptom)
    return x is not None and bool(x.findings) and x.strength > 0


def _absent(ev: Mapping[str, SymptomEvidence]) -> frozenset[str]:
    """The symptoms judged and not seen: a chain of causal links runs through what happened, not through them."""
    return frozenset(sym for sym, x in ev.items() if not x.findings)


def _upstream(model: CausalModel, symptom: str) -> list[str]:
    """The symptoms with a path of authored links into ``symptom``, nearest first (a starved expert's zero update
    is its router's imbalance, through a dead expert the detectors confirm only later)."""
    out: list[str] = []
    seen, todo = {symptom}, [symptom]
    while todo:
        nxt = []
        for node in todo:
            for link in model.parents.get(node, ()):
                if not link.measured and link.source in model.symptoms and link.source not in seen:
                    seen.add(link.source)
                    out.append(link.source)
                    nxt.append(link.source)
        todo = nxt
    return out


def _unruled_rivals(model: CausalModel, cause: str, symptom: str, ev: Mapping[str, SymptomEvidence],
                    rivals: Set[str]) -> list[str]:
    """The other causes of ``rivals`` (the run's candidates) with an authored link straight into ``symptom``
    and specific evidence of which none was judged here (a judged symptom is in ``ev``, observed or absent), so
    the run cannot tell them from ``cause``."""
    return [link.source for link in sorted(model.parents.get(symptom, ()), key=lambda k: k.source)
            if link.source != cause and link.source in rivals and not link.measured
            and (decl := model.specific.get(link.source, ())) and not any(d in ev for d in decl)]


def specificity(model: CausalModel, s: CauseScore, ev: Mapping[str, SymptomEvidence], th: Thresholds,
                candidates: Set[str] = frozenset(), signs: Set[str] = frozenset()) -> Specificity:
    """The specific evidence of ``s.cause`` in this run; an upstream symptom explains one only when the cause
    does not reach that symptom itself (``CausalModel.reach``); ``candidates``: the run's candidate causes, its
    possible rivals; ``signs``: the signs of health observed (``dt:healthSign``), counter-evidence only."""
    declared = model.specific.get(s.cause, ())
    own = model.reach(s.cause, _absent(ev))
    slack = th["infer.precedence_slack"]
    present: list[str] = []
    upstream: list[tuple[str, str]] = []
    rivals: list[tuple[str, str]] = []
    for sym in declared:
        if not _observed(ev, sym):
            continue
        onset = ev[sym].onset or 0
        by = next((up for up in _upstream(model, sym) if up not in own and _observed(ev, up)
                   and (ev[up].onset or 0) <= onset + slack), None)
        # evidence that is a fault by definition (a weight scale beyond every standard init) is nobody else's
        unruled = (_unruled_rivals(model, s.cause, sym, ev, candidates)
                   if by is None and sym not in model.sufficient.get(s.cause, ()) else [])
        if by is not None:
            upstream.append((sym, by))
        elif unruled:
            rivals.extend((sym, rival) for rival in unruled)
        else:
            present.append(sym)
    against = tuple(sym for sym in model.counter.get(s.cause, ()) if _observed(ev, sym) or sym in signs)
    harm = tuple(sorted(sym for sym in own & model.outcomes if _observed(ev, sym)))
    sufficient = any(sym in model.sufficient.get(s.cause, ()) for sym in present)
    setup_only = bool(present) and not sufficient and set(present) <= model.preconditions
    profiles = model.profiles.get(s.cause, ())
    familiarity = max((overlap(set(p), set(ev)) for p in profiles), default=None)
    likely = th["diagnose.evidence.likely"]
    thin = tuple(sym for sym in present if all(support(f, th) < likely for f in ev[sym].findings))
    return Specificity(tuple(present), tuple(upstream), against, tuple(declared), harm, sufficient, tuple(rivals),
                       not declared or any(d in ev for d in declared), familiarity,
                       familiarity is None or familiarity >= th["infer.familiar_overlap"],
                       bool(signs) and not any(_observed(ev, sym) for sym in model.outcomes), setup_only=setup_only,
                       thin=thin)


def yield_to_faults(model: CausalModel, spec: Mapping[str, Specificity],
                    ev: Mapping[str, SymptomEvidence]) -> dict[str, Specificity]:
    """A set-up fact yields to a fault the run shows happening: a candidate whose present evidence is set-up facts
    only (``dt:precondition``: raw inputs, bounded activations) no longer decides where another candidate's own
    evidence is a fault by definition (``dt:sufficientAlone``: gradients never zeroed), or is more than a set-up
    fact, reaches an outcome the fact's harm also counts, and explains everything else observed that the fact would
    (``ev``): a slow loss beside an update ratio far under the band is the learning rate's (the raw inputs made
    slowness possible, the rate is what the run shows), but raw inputs beside dead units and a plateau keep the
    plateau, which the rate does not explain with them."""
    live = {c: x for c, x in spec.items() if x.decides and x.present and c not in model.advisory}
    faults = {c for c, x in live.items() if x.sufficient}
    blocked = _absent(ev)
    seen = {sym for sym in ev if _observed(ev, sym)}

    def covers(rival: str, c: str, x: Specificity) -> bool:
        rest = (seen & model.reach(c, blocked)) - set(x.present)
        return rest <= model.reach(rival, blocked)

    def outranks(c: str, x: Specificity) -> tuple[str, ...]:
        if not x.setup_only:
            return ()
        shared = {r for r, y in live.items()
                  if not y.setup_only and set(y.harm) & set(x.harm) and covers(r, c, x)}
        return tuple(sorted((faults | shared) - {c}))

    return {c: replace(x, yields_to=who) if (who := outranks(c, x)) else x for c, x in spec.items()}


def weigh(scores: Sequence[CauseScore], spec: Mapping[str, Specificity], reportable: Mapping[str, bool],
          th: Thresholds) -> None:
    """Fold the rule into the log scores: counter-evidence costs ``infer.counter_penalty`` once; where some
    reportable candidate's specific evidence decides, every candidate without costs ``infer.unspecific_penalty``."""
    anyone = any(spec[s.cause].decides and reportable[s.cause] for s in scores)
    for s in scores:
        x = spec[s.cause]
        if x.against:
            s.log_likelihood += math.log(th["infer.counter_penalty"])
        if anyone and not x.decides:
            s.log_likelihood += math.log(th["infer.unspecific_penalty"])


def lead_first(causes: Sequence[str], confidence: Mapping[str, float], decides: Set[str],
               weak: Set[str] = frozenset()) -> list[str]:
    """``causes`` with those whose specific evidence decides first, each group by confidence: a cause resting on
    generic symptoms alone never leads one whose own evidence is in the run, and among those, a cause deciding
    on an unharmed set-up fact (``weak``) follows one whose evidence is an observed fault: raw inputs do not lead
    labels that contradict the model at random."""
    return sorted(causes, key=lambda c: (c not in decides, c in weak, -confidence[c]))


def capped(confidence: float, x: Specificity, th: Thresholds) -> float:
    """The confidence shown: no higher than the ceiling unless the cause's own evidence decides and no unruled
    rival shares it; no higher than the lower ceiling when none of its specific evidence was seen."""
    return confidence if x.certain else min(confidence, ceiling_of(x, th))


def ceiling_of(x: Specificity, th: Thresholds) -> float:
    """The ceiling of a cause its own evidence does not decide: ``infer.unspecific_ceiling`` where its specific
    evidence was seen but is shared with a rival the run cannot rule out or explained upstream; the lower
    ``infer.unmeasured_ceiling`` where none of it was seen (judged and absent, not measurable, or none named), so
    that generic symptoms alone never read as likely."""
    if x.decides or x.upstream or x.yields_to:
        return th["infer.unspecific_ceiling"]
    return min(th["infer.unspecific_ceiling"], th["infer.unmeasured_ceiling"])
