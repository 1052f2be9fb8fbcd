"""Calibration of the causal engine on labelled runs, fitted in memory (no store round-trip), so that it can be
refitted for every leave-one-family-out fold in milliseconds.

What is fitted, all from the runs it is given and nothing else:
- **profiles**: per injected cause and presentation (program family and severity: ``presentation``), the smoothed
  rate of every symptom its runs could judge (``dt:CalibrationProfile``); the engine scores a cause as a mixture
  of its presentations;
- **links**: a causal link from a cause to a symptom its runs report often and the healthy runs rarely, where
  the knowledge base has none (so the rules find the cause from that symptom); capped below the cause's
  strongest link;
- **leaks**: ``infer.leak.<Symptom>``, the smoothed rate of each symptom on the healthy runs and look-alikes;
- **temperature**: ``infer.temperature``, minimising the negative log-likelihood of the true cause on
  out-of-family predictions (temperature scaling, Guo et al. 2017);
- **confidence map**: ``infer.confidence.slope`` / ``.offset``, a Platt map from a cause's posterior to the
  confidence shown, maximising the likelihood of "the best candidate is right" on out-of-family answers.

``to_turtle`` writes profiles and links (``cases/links-calibrated.ttl``), leaks (``cases/thresholds/leaks.ttl``)
and the temperature and confidence map (``cases/thresholds/calibration.ttl``) through the same Turtle writer as
the run graph.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from debugtune.engine.diagnose import Thresholds, diagnose_run
from debugtune.engine.infer.causal import UNKNOWN, activation, before_breakdown, calibrated, evidence
from debugtune.engine.infer.engine import candidate_causes, rank, reportable, rule_scope
from debugtune.engine.infer.model import CausalModel, Link
from debugtune.engine.infer.specific import ceiling_of, lead_first
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.namespaces import run_graph
from debugtune.kg.records import CorrelationEdge, Finding
from debugtune.kg.rules import run_rules
from debugtune.kg.store import Store

LINKS_FILE = "links-calibrated.ttl"
LEAKS_FILE = "thresholds/leaks.ttl"
TEMPERATURE_FILE = "thresholds/calibration.ttl"
GENERATED = (LINKS_FILE, LEAKS_FILE, TEMPERATURE_FILE)
LEAK_SOURCE = "https://doi.org/10.1016/C2009-0-27609-4"
TEMPERATURE_SOURCE = "https://proceedings.mlr.press/v70/guo17a.html"
PLATT_SOURCE = "https://scikit-learn.org/stable/modules/calibration.html"  # sigmoid (Platt 1999) calibration


@dataclass(frozen=True)
class Sample:
    """One labelled run, diagnosed once: its findings, judged symptoms, edges and rule-derived candidates."""

    run_id: str
    truth: str | None           # the injected cause, or None for a healthy control
    name: str                   # the fault or look-alike name
    program: str
    family: str
    severity: str
    seed: int
    findings: tuple[Finding, ...]
    judged: frozenset[str]
    edges: tuple[CorrelationEdge, ...]
    candidates: tuple[str, ...]
    steps: int = 0
    onset: int = 0

    @property
    def label(self) -> str:
        return f"{self.program}:{self.name}:{self.severity}:{self.seed}"


def _family_of(lab: Mapping) -> str:
    if lab.get("family"):
        return str(lab["family"])
    from debugtune.scenarios.programs import PROGRAMS

    program = PROGRAMS.get(str(lab.get("program")))
    return str(getattr(program, "family", "") or lab.get("program", ""))


def manifested(out: Path) -> dict[str, bool]:
    """run id → whether its fault (or look-alike) manifested, from the benchmark's results files."""
    verdicts: dict[str, bool] = {}
    for name in ("results-quick.json", "results-partial.json", "results.json"):
        path = out / name
        if path.exists():
            runs = json.loads(path.read_text()).get("runs", [])
            verdicts.update({r["run_id"]: bool(r.get("manifested", True)) for r in runs if "run_id" in r})
    return verdicts


def diagnose_sample(run_dir: Path, lab: Mapping, store: Store, th: Thresholds) -> Sample:
    """Diagnose one labelled run (detectors, then the rules over ``store`` for its candidate causes)."""
    d = diagnose_run(run_dir, th, run_id=lab["run_id"])
    replace_diagnosis(store, d.run, {}, d.findings, d.edges)
    run_rules(store, graphs=rule_scope(store, d.run))
    candidates = tuple(candidate_causes(store, d.run))
    store.update(f"DROP SILENT GRAPH <{run_graph(d.run)}>")
    truth = lab["name"] if lab.get("kind") == "fault" else None
    return Sample(d.run, truth, lab["name"], str(lab.get("program", "")), _family_of(lab),
                  str(lab.get("severity", "")), int(lab.get("seed", 0)), tuple(d.findings), frozenset(d.judged),
                  tuple(d.edges), candidates, d.steps, int(lab.get("onset_step", 0)))


def collect(out: Path, store: Store, th: Thresholds, *, run_ids: Iterable[str] | None = None) -> list[Sample]:
    """Diagnose every labelled run under ``out`` once (runs whose fault or look-alike did not manifest are left
    out); ``run_ids`` restricts to those runs."""
    wanted = set(run_ids) if run_ids is not None else None
    verdicts = manifested(out)
    samples = []
    for path in sorted((out / "labels").glob("*.json")):
        lab = json.loads(path.read_text())
        if (wanted is not None and lab["run_id"] not in wanted) or lab.get("manifested") is False \
                or verdicts.get(lab["run_id"]) is False:
            continue
        try:
            samples.append(diagnose_sample(out / "runs" / lab["run_id"], lab, store, th))
        except DebugtuneError as err:
            print(f"skipped {lab.get('program')}:{lab.get('name')}: {err}", file=sys.stderr)
    return samples


# -- fitting ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    """What a calibration fitted: profiles (cause → presentation → symptom → rate), new links, leaks, temperature."""

    profiles: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    profile_runs: dict[tuple[str, str], int] = field(default_factory=dict)
    links: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)
    leaks: dict[str, tuple[float, int, int]] = field(default_factory=dict)
    temperature: float | None = None
    confidence_map: tuple[float, float] | None = None   # (slope, offset) of the Platt map of shown confidences


def presentation(s: Sample) -> str:
    """The profile a faulty run is counted under: its program family and severity. A cause presents differently
    on different kinds of model (a bad initialisation is too small where plain SGD keeps it and too large where
    Adam or normalisation would undo a small one; only MoE runs can show expert imbalance), and a profile pooled
    over families loses which symptoms go together: it would let a symptom of one family's presentation stand in
    for another family's. The engine scores a cause as a mixture of the profiles that judged what the run judged."""
    return f"{s.family}-{s.severity}" if s.family else (s.severity or "all")


def rates(samples: Sequence[Sample], floor: float = 1.0, signs: Set[str] = frozenset()
          ) -> tuple[dict[tuple[str, str], dict[str, tuple[float, int]]], dict[str, tuple[float, int]]]:
    """How often each symptom was reported per (injected cause, presentation), and on the healthy controls:
    (hits weighted by evidence strength, runs that judged it). Signs of health are left out: the engine takes
    them as counter-evidence only, never as a symptom a cause produces."""
    per: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    healthy: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for s in samples:
        # what the engine would take as evidence: nothing after a breakdown, each symptom at its strength
        ev = evidence(*before_breakdown(s.findings, s.judged), floor)
        table = per[(s.truth, presentation(s))] if s.truth else healthy
        for sym, x in ev.items():
            if sym in signs:
                continue
            table[sym][1] += 1
            table[sym][0] += x.strength
    return ({k: {sym: (v[0], v[1]) for sym, v in t.items()} for k, t in per.items()},
            {k: (v[0], v[1]) for k, v in healthy.items()})


def smoothed(hits: float, judged: int, prior: float, weight: float) -> float:
    """The measured rate shrunk towards ``prior`` with ``weight`` pseudo-runs (a Beta prior), two decimals."""
    return round((hits + weight * prior) / (judged + weight), 2)


def fit(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> Calibration:
    """Profiles, links and leaks measured on ``samples`` over the base ``model`` (no temperature)."""
    per, healthy = rates(samples, th["infer.evidence_floor"], model.signs)
    direct = {(link.source, link.target) for link in model.links}
    weight = th["calibration.prior_weight"]
    min_judged, min_rate, margin = (th.as_int("calibration.profile_min_judged"), th["calibration.link_min_rate"],
                                    th["calibration.link_margin"])
    min_hits = th["calibration.link_min_runs"]
    h_rate = {k: v[0] / max(v[1], 1) for k, v in healthy.items()}
    leak_now = {sym: smoothed(k, m, th["infer.leak"], weight) for sym, (k, m) in healthy.items()}
    # the floor stands for causes outside the knowledge base; a symptom that observes its cause's mechanism has
    # its own, lower floor (infer.leak_floor.<Symptom>)
    leaks = {sym: (max(leak_now[sym], th.get(f"infer.leak_floor.{sym}") or th["infer.leak_floor"]), k, m)
             for sym, (k, m) in healthy.items() if m >= th.as_int("calibration.leak_min_controls")}
    profiles: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    runs: dict[tuple[str, str], int] = {}
    links: dict[tuple[str, str], tuple[float, str]] = {}
    for (cause, prof), table in sorted(per.items()):
        judged = {sym: kn for sym, kn in table.items() if kn[1] >= min_judged}
        if not judged:
            continue
        prior = activation(model, cause, th.as_int("infer.max_depth"))  # the knowledge base's estimate
        profiles[cause][prof] = {sym: smoothed(k, m, max(prior.get(sym, 0.0), leak_now.get(sym, th["infer.leak"])),
                                               weight) for sym, (k, m) in judged.items()}
        runs[(cause, prof)] = max(kn[1] for kn in judged.values())
        for sym, (k, m) in judged.items():
            rate = k / m
            value = profiles[cause][prof][sym]
            if (cause, sym) not in direct and rate >= min_rate and rate >= h_rate.get(sym, 0.0) + margin \
                    and k >= min_hits and value > links.get((cause, sym), (0.0, ""))[0]:
                links[(cause, sym)] = (value, f"reported in {k:.3g} of {m} {prof} runs (weighted by evidence)")
    main: dict[str, float] = defaultdict(float)
    for link in model.links:
        main[link.source] = max(main[link.source], link.strength)
    cap = th["calibration.link_cap"]
    links = {pair: ((min(v, round(cap * main[pair[0]], 2)) if main[pair[0]] else v), note)
             for pair, (v, note) in links.items()}
    return Calibration(dict(profiles), runs, links, leaks)


def apply(model: CausalModel, th: Thresholds, cal: Calibration) -> tuple[CausalModel, Thresholds]:
    """The base model and thresholds with a calibration in force."""
    have = {(link.source, link.target) for link in model.links}
    links = list(model.links) + [Link(a, b, v, measured=True) for (a, b), (v, _) in sorted(cal.links.items())
                                 if (a, b) not in have]
    # the knowledge base's own profiles (e.g. a stall present for a whole traced window) stay beside the measured
    # ones, as in the shipped store, where both are dt:CalibrationProfile
    profiles = {c: list(v) for c, v in model.profiles.items()}
    for c, ps in cal.profiles.items():
        profiles[c] = profiles.get(c, []) + [ps[k] for k in sorted(ps)]
    calibrated = replace(model, links=links, profiles=profiles)
    values = dict(th.items())
    values.update({f"infer.leak.{sym}": v for sym, (v, _, _) in cal.leaks.items()})
    if cal.temperature is not None:
        values["infer.temperature"] = cal.temperature
    if cal.confidence_map is not None:
        values["infer.confidence.slope"], values["infer.confidence.offset"] = cal.confidence_map
    return calibrated, Thresholds(values)


# -- scoring ---------------------------------------------------------------------------------------------
def reachable_causes(model: CausalModel, symptoms: Iterable[str]) -> set[str]:
    """Causes with a path of causal links to one of ``symptoms``: what the SPARQL rules (``dt:leadsTo`` closure,
    ``dt:candidateCause``) derive, computed on a calibrated model without asserting every run again."""
    todo, seen = list(symptoms), set(symptoms)
    while todo:
        for link in model.parents.get(todo.pop(), ()):
            if link.source not in seen:
                seen.add(link.source)
                todo.append(link.source)
    return {c for c in seen if c in model.causes}


@dataclass(frozen=True)
class Scored:
    """One run scored at temperature 1: every candidate's log score, which of them may be reported, and the
    detection step of each candidate's supporting findings."""

    sample: Sample
    logits: dict[str, float]          # cause → log score (UNKNOWN included)
    reportable: frozenset[str]
    detection: dict[str, int]
    support: dict[str, int]           # cause → number of observed symptoms in its chain
    decides: frozenset[str] = frozenset()  # causes whose specific evidence decides (engine.infer.specific)
    certain: frozenset[str] | None = None  # of those, the ones no unruled rival shares it with (None: all of them)
    ceilings: dict[str, float] = field(default_factory=dict)  # the ceiling of every other cause (engine.infer.specific)
    weak: frozenset[str] = frozenset()  # deciders on an unharmed set-up fact: they follow the other deciders


def score(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> list[Scored]:
    """Log scores of every candidate of every run (independent of the temperature)."""
    one = Thresholds({**dict(th.items()), "infer.temperature": 1.0})
    out = []
    for s in samples:
        cands = set(s.candidates) | reachable_causes(model, {f.symptom for f in s.findings})
        r = rank(model, sorted(cands), s.findings, s.judged, s.edges, one, s.steps)
        by_id = {f.id: f for f in s.findings}
        logits = {c.cause: c.log_score for c in r.candidates}
        detection = {}
        for sc in r.scores:
            steps = [f.detection_step if f.detection_step is not None else f.onset_step
                     for f in (by_id.get(i) for i in sc.findings) if f is not None]
            if steps:
                detection[sc.cause] = int(min(steps))
        out.append(Scored(s, logits, frozenset(sc.cause for sc in r.scores
                                               if reportable(model, sc, r.specificity[sc.cause])), detection,
                          {sc.cause: len(sc.explained) for sc in r.scores},
                          frozenset(c for c, x in r.specificity.items() if x.decides),
                          frozenset(c for c, x in r.specificity.items() if x.certain),
                          {c: ceiling_of(x, th) for c, x in r.specificity.items()},
                          frozenset(c for c, x in r.specificity.items() if x.weak_decider)))
    return out


@dataclass(frozen=True)
class Answer:
    """One run's reported causes (best first) and confidences at a temperature."""

    scored: Scored
    causes: tuple[str, ...]
    confidences: tuple[float, ...]
    p_truth: float
    top: tuple[float, bool] | None    # (confidence of the best candidate cause, whether it is the truth)


def answer(sc: Scored, temperature: float, th: Thresholds) -> Answer:
    """The hypotheses the engine reports for one scored run at ``temperature`` (the rules of ``engine.rank``)."""
    logits = {k: v / temperature for k, v in sc.logits.items()}
    top = max(logits.values())
    z = {k: math.exp(v - top) for k, v in logits.items()}
    total = sum(z.values())
    conf = {k: v / total for k, v in z.items()}
    order = lead_first([c for c in conf if c != UNKNOWN and c in sc.reportable], conf, sc.decides, sc.weak)
    causes: list[str] = []
    if order and max(conf[c] for c in order) >= th["infer.report_threshold"]:
        listed = [c for c in order if conf[c] >= th["infer.list_threshold"]]
        causes += listed[: th.as_int("infer.max_hypotheses")]
    truth = sc.sample.truth
    pool = [c for c in conf if c in sc.reportable]
    pool = [c for c in pool if conf[c] >= th["infer.list_threshold"]] or pool
    best = next(iter(lead_first(pool, conf, sc.decides, sc.weak)), None)
    return Answer(sc, tuple(causes), tuple(_shown(sc, c, conf[c], th) for c in causes),
                  conf.get(truth, 0.0) if truth else 0.0,
                  (_shown(sc, best, conf[best], th), best == truth) if truth and best is not None else None)


def _shown(sc: Scored, cause: str, p: float, th: Thresholds) -> float:
    """The confidence the engine shows: the map, then the ceiling for a cause its specific evidence does not decide."""
    c = calibrated(p, th)
    certain = sc.decides if sc.certain is None else sc.certain
    return c if cause in certain else min(c, sc.ceilings.get(cause, th["infer.unspecific_ceiling"]))


def fit_confidence_map(scored: Sequence[Scored], temperature: float, th: Thresholds) -> tuple[float, float]:
    """Platt scaling of the best candidate's confidence: the (slope, offset) of sigmoid(slope * logit(p) + offset)
    maximising the likelihood of "the best candidate is the injected cause" over the fault runs of ``scored``
    (out-of-family answers at ``temperature``). Temperature scaling alone leaves the middle under-confident,
    because the "unknown" a healthy run needs takes mass from the right answer on a faulty one."""
    from scipy.optimize import minimize

    identity = Thresholds({**dict(th.items()), "infer.confidence.slope": 1.0, "infer.confidence.offset": 0.0})
    # the map is applied before the ceiling of a cause without specific evidence, so it is fitted on the uncapped values
    uncapped = (replace(s, decides=frozenset(s.logits), certain=None, ceilings={}, weak=frozenset()) for s in scored
                if s.sample.truth)
    tops = [a.top for a in (answer(s, temperature, identity) for s in uncapped) if a.top]
    if len(tops) < 10:
        return 1.0, 0.0
    p = np.clip(np.array([c for c, _ in tops]), 1e-6, 1 - 1e-6)
    x, y = np.log(p / (1 - p)), np.array([ok for _, ok in tops], dtype=float)

    def nll(w: np.ndarray) -> float:
        z = w[0] * x + w[1]
        return float(np.sum(np.logaddexp(0.0, z) - y * z))

    w = minimize(nll, np.array([1.0, 0.0]), method="Nelder-Mead").x
    return float(w[0]), float(w[1])


def fit_temperature(scored: Sequence[Scored], th: Thresholds) -> float:
    """The temperature minimising the negative log-likelihood of the true cause on the fault runs."""
    from scipy.optimize import minimize_scalar

    faults = [s for s in scored if s.sample.truth]
    if not faults:
        return th["infer.temperature"]

    def nll(log_t: float) -> float:
        return -sum(math.log(max(answer(s, math.exp(log_t), th).p_truth, 1e-6)) for s in faults) / len(faults)

    best = minimize_scalar(nll, bounds=(math.log(0.2), math.log(20.0)), method="bounded", options={"xatol": 1e-3})
    return float(math.exp(best.x))


# -- figures ---------------------------------------------------------------------------------------------
@dataclass
class Figures:
    """Macro top-1/top-3 over fault types, healthy false-positive rate, NLL, ECE, per cause and per family."""

    top1: float
    top3: float
    fpr: float
    nll: float
    ece: float
    per_cause: dict[str, tuple[int, int, int]]
    per_family: dict[str, tuple[int, int]]
    bins: list[tuple[float, float, int]]
    delay: float | None
    no_hypothesis: int
    faults: int
    controls: int
    false_positives: list[str]


def reliability(tops: Iterable[tuple[float, bool]], n_bins: int = 10) -> tuple[list[tuple[float, float, int]], float]:
    """(mean confidence, accuracy, count) per equal-width confidence bin, and the expected calibration error."""
    groups: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    items = list(tops)
    for conf, ok in items:
        groups[min(int(conf * n_bins), n_bins - 1)].append((conf, ok))
    bins, ece = [], 0.0
    for b in sorted(groups):
        g = groups[b]
        conf = sum(c for c, _ in g) / len(g)
        acc = sum(ok for _, ok in g) / len(g)
        bins.append((conf, acc, len(g)))
        ece += len(g) / max(len(items), 1) * abs(conf - acc)
    return bins, ece


def figures(answers: Sequence[Answer]) -> Figures:
    hits: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    fam: dict[str, list[bool]] = defaultdict(list)
    fps: list[str] = []
    controls = 0
    nll = 0.0
    tops, delays = [], []
    empty = 0
    for a in answers:
        s = a.scored.sample
        if s.truth is None:
            controls += 1
            if a.causes:
                fps.append(f"{s.label} -> {a.causes[0]}")
            continue
        ok1 = a.causes[:1] == (s.truth,)
        hits[s.truth].append((ok1, s.truth in a.causes[:3]))
        fam[s.family].append(ok1)
        nll -= math.log(max(a.p_truth, 1e-6))
        empty += not a.causes
        if a.top is not None:
            tops.append(a.top)
        if ok1 and s.truth in a.scored.detection:
            delays.append(a.scored.detection[s.truth] - s.onset)
    causes = sorted(hits)
    top1 = sum(sum(x for x, _ in hits[c]) / len(hits[c]) for c in causes) / max(len(causes), 1)
    top3 = sum(sum(y for _, y in hits[c]) / len(hits[c]) for c in causes) / max(len(causes), 1)
    bins, ece = reliability(tops)
    n_faults = sum(len(v) for v in hits.values())
    delays.sort()
    return Figures(top1, top3, len(fps) / max(controls, 1), nll / max(n_faults, 1), ece,
                   {c: (sum(x for x, _ in hits[c]), sum(y for _, y in hits[c]), len(hits[c])) for c in causes},
                   {f: (sum(v), len(v)) for f, v in sorted(fam.items())}, bins,
                   float(delays[len(delays) // 2]) if delays else None, empty, n_faults, controls, fps)


# -- the knowledge base without and with a calibration ------------------------------------------------------
def base_store() -> Store:
    """An in-memory store with the ontology and the knowledge base minus the generated calibration files (so that
    a calibration never builds on an earlier one)."""
    from debugtune import cases, ontology
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import KnowledgeSource, load_knowledge
    from debugtune.kg.namespaces import GRAPH_KB, GRAPH_ONTOLOGY

    generated = {(cases.HERE / name).resolve() for name in GENERATED}
    files = tuple(f for f in cases.turtle_files() if f.resolve() not in generated)
    store = open_store(None)
    load_knowledge(store, sources=[KnowledgeSource(GRAPH_ONTOLOGY, (ontology.ONTOLOGY,)),
                                   KnowledgeSource(GRAPH_KB, files)])
    return store


def cause_sources(store: Store) -> dict[str, str]:
    """Cause local name → one of its sources (a generated item cites the cause's own source)."""
    return {r["c"].rsplit("/", 1)[-1]: r["src"] for r in store.select(
        "SELECT ?c (SAMPLE(?s) AS ?src) WHERE { ?c a dt:Cause ; dct:source ?s } GROUP BY ?c").dicts()}


_PREFIXES = """@prefix dt:   <https://w3id.org/debugtune#> .
@prefix kb:   <https://w3id.org/debugtune/kb/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix dct:  <http://purl.org/dc/terms/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
"""
_COMMAND = "python -m bench.faults --write-calibration"


def to_turtle(cal: Calibration, sources: Mapping[str, str], runs: int) -> dict[str, str]:
    """The generated knowledge-base files of a calibration: file name (under ``cases/``) → Turtle."""
    from debugtune.kg.assertions import triples
    from debugtune.kg.namespaces import KB
    from debugtune.kg.sparql import iri, literal

    def src(cause: str) -> str:
        return iri(sources.get(cause, LEAK_SOURCE))

    def en(text: str) -> str:
        return literal(text) + "@en"

    links = [f"# Calibration of the causal engine on the fault benchmark (bench/faults), {runs} runs of every\n"
             "# program family. Profiles: for each injected cause and presentation, how often the detectors reported\n"
             "# each symptom in the runs where the fault manifested (Beta-smoothed towards the knowledge base's\n"
             "# estimate). Links: symptoms a cause showed that the knowledge base does not link to it.\n"
             f"# Generated by `{_COMMAND}`; the knowledge base's own estimates (dt:strength in links-*.ttl) are left\n"
             "# as they are.\n\n", _PREFIXES]
    for cause, presentations in sorted(cal.profiles.items()):
        for prof, table in sorted(presentations.items()):
            rates_ = ", ".join(f"[ dt:symptom kb:{sym} ; dt:value {literal(float(v))} ]"
                               for sym, v in sorted(table.items()))
            n = cal.profile_runs.get((cause, prof), 0)
            links.append("\n" + triples(f"{KB}profile/{cause}-{prof}", [
                ("a", "dt:CalibrationProfile"), ("dt:profileOf", f"kb:{cause}"),
                ("skos:prefLabel", en(f"{cause}, {prof} (fault bench)")),
                ("skos:note", en(f"rates over {n} runs of the fault bench where the fault manifested")),
                ("dct:source", src(cause)), ("dt:symptomRate", rates_)]))
    for (cause, sym), (value, note) in sorted(cal.links.items()):
        links.append("\n" + triples(f"{KB}link/{cause}-{sym}", [
            ("a", "dt:CausalLink"), ("skos:prefLabel", en(f"{cause} → {sym}")), ("dt:from", f"kb:{cause}"),
            ("dt:to", f"kb:{sym}"), ("dt:strength", f"{float(value):.2f}"), ("dt:measured", "true"),
            ("rdfs:comment", en(f"Added by the diagnosis engine, calibrated on the fault bench: {note}.")),
            ("dct:source", src(cause))]))
    leaks = ["# Per-symptom leaks of the causal engine (P(finding | no modelled cause)): the rate at which the\n"
             "# detectors report each symptom on the fault bench's healthy runs and benign look-alikes of every\n"
             "# family.\n"
             f"# Generated by `{_COMMAND}`.\n\n", _PREFIXES]
    for sym, (value, k, m) in sorted(cal.leaks.items()):
        leaks.append("\n" + triples(f"{KB}threshold-infer-leak-{sym}", [
            ("a", "dt:Threshold"), ("dt:thresholdKey", literal(f"infer.leak.{sym}")),
            ("dt:value", literal(float(value))), ("dt:appliesTo", f"kb:{sym}"),
            ("skos:prefLabel", en(f"leak of {sym}")),
            ("skos:definition", en(f"Probability that {sym} is reported without any modelled cause.")),
            ("skos:note", en(f"fault bench: reported in {k:.3g} of {m} healthy or look-alike runs "
                             "(weighted by evidence)")),
            ("dct:source", iri(LEAK_SOURCE))]))
    out = {LINKS_FILE: "".join(links), LEAKS_FILE: "".join(leaks)}
    if cal.temperature is not None:
        slope, offset = cal.confidence_map or (1.0, 0.0)
        platt = [("infer.confidence.slope", slope, "confidence map slope",
                  "Slope of the Platt map sigmoid(slope * logit(p) + offset) from a cause's posterior to the "
                  "confidence shown (the posterior decides what is reported)."),
                 ("infer.confidence.offset", offset, "confidence map offset",
                  "Offset of the Platt map sigmoid(slope * logit(p) + offset) from a cause's posterior to the "
                  "confidence shown.")]
        maps = "".join("\n" + triples(f"{KB}threshold-{key.replace('.', '-')}", [
            ("a", "dt:Threshold"), ("dt:thresholdKey", literal(key)), ("dt:value", literal(round(float(v), 3))),
            ("skos:prefLabel", en(label)), ("skos:definition", en(text)),
            ("skos:note", en(f"Platt scaling of the best candidate's confidence on {runs} runs, out-of-family "
                             "answers (leave one family out)")),
            ("dct:source", iri(PLATT_SOURCE))]) for key, v, label, text in platt)
        out[TEMPERATURE_FILE] = (
            f"# The causal engine's temperature, fitted on out-of-family predictions of the fault benchmark (each\n"
            f"# family scored by a calibration that did not see it). Generated by `{_COMMAND}`.\n\n" + _PREFIXES + "\n"
            + triples(f"{KB}threshold-infer-temperature", [
                ("a", "dt:Threshold"), ("dt:thresholdKey", literal("infer.temperature")),
                ("dt:value", literal(round(float(cal.temperature), 3))),
                ("skos:prefLabel", en("posterior temperature")),
                ("skos:definition", en("Softmax temperature applied to the causes' log scores (with 'unknown') to "
                                       "turn them into calibrated confidences.")),
                ("skos:note", en(f"temperature scaling on {runs} runs, leave one family out")),
                ("dct:source", iri(TEMPERATURE_SOURCE))]) + maps)
    return out
