"""Calibration of the causal engine on labelled runs (the fault benchmark): accuracy, temperature, ECE.

    python -m debugtune.engine.infer.calibrate DIR [--fit] [--set key=value ...]

``DIR`` holds ``labels/<run_id>.json`` (at least ``name``, ``kind`` "fault"/"control", ``run_id``, and
``program``/``severity``/``seed``) and the run directories ``runs/<run_id>/`` — the layout ``bench/faults``
writes; a fault run whose fault did not manifest (``results.json`` of the benchmark, or ``manifested: false``
in its label) is left out. Each run is diagnosed once (detectors and SPARQL rules); the engine's
constants (``infer.*`` thresholds) can then be varied and re-scored in milliseconds. ``--fit`` fits the
temperature by minimising the negative log-likelihood of the true cause over the fault runs
(temperature scaling, Guo et al. 2017) and prints the reliability table and the expected calibration
error (ECE, 10 equal-width bins of the top confidence).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.optimize import minimize_scalar

from debugtune.engine.diagnose import Thresholds, diagnose_run
from debugtune.engine.infer.causal import UNKNOWN, activation
from debugtune.engine.infer.engine import candidate_causes, rank, rule_scope
from debugtune.engine.infer.model import CausalModel, load_model
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.errors import DebugtuneError
from debugtune.kg.records import CorrelationEdge, Finding
from debugtune.kg.rules import run_rules
from debugtune.kg.store import Store


@dataclass(frozen=True)
class Sample:
    """One labelled run, diagnosed: its findings, judged symptoms, edges and rule-derived candidates."""

    run_id: str
    truth: str | None           # the injected cause, or None for a healthy control
    label: str                  # program:name:severity:seed, for reading the output
    findings: tuple[Finding, ...]
    judged: frozenset[str]
    edges: tuple[CorrelationEdge, ...]
    candidates: tuple[str, ...]
    steps: int = 0


def manifested(out: Path) -> dict[str, bool]:
    """run id → whether its fault manifested, from the benchmark's ``results.json`` (empty when absent)."""
    path = out / "results.json"
    if not path.exists():
        return {}
    runs = json.loads(path.read_text()).get("runs", [])
    return {r["run_id"]: bool(r.get("manifested", True)) for r in runs if "run_id" in r}


def collect(out: Path, store: Store, th: Thresholds, *, name_filter: str = "") -> list[Sample]:
    """Diagnose every labelled run under ``out`` once (fault runs whose fault did not manifest are left out)."""
    samples = []
    verdicts = manifested(out)
    for path in sorted((out / "labels").glob("*.json")):
        lab = json.loads(path.read_text())
        key = ":".join(str(lab.get(k, "")) for k in ("program", "name", "severity", "seed"))
        if name_filter and name_filter not in key:
            continue
        if lab.get("kind") == "fault" and (lab.get("manifested") is False or verdicts.get(lab["run_id"]) is False):
            continue
        run_dir = out / "runs" / lab["run_id"]
        try:
            d = diagnose_run(run_dir, th, run_id=lab["run_id"])
        except DebugtuneError as err:
            print(f"skipped {key}: {err}", file=sys.stderr)
            continue
        replace_diagnosis(store, d.run, {}, d.findings, d.edges)
        run_rules(store, graphs=rule_scope(store, d.run))
        truth = lab["name"] if lab.get("kind") == "fault" else None
        samples.append(Sample(d.run, truth, key, tuple(d.findings), frozenset(d.judged), tuple(d.edges),
                              tuple(candidate_causes(store, d.run)), d.steps))
    return samples


@dataclass
class Scores:
    """Accuracy (macro over fault types), false-positive rate on controls, NLL and ECE."""

    top1: float
    top3: float
    fpr: float
    nll: float
    ece: float
    per_fault: dict[str, tuple[int, int, int]]
    bins: list[tuple[float, float, int]]


def reachable_causes(model: CausalModel, symptoms: Iterable[str]) -> set[str]:
    """Causes with a path of causal links to one of ``symptoms``: what the SPARQL rules (``dt:leadsTo`` closure,
    ``dt:candidateCause``) derive, computed on the model so that a model calibrated on other runs can be scored
    without asserting every run again."""
    todo, seen = list(symptoms), set(symptoms)
    while todo:
        for link in model.parents.get(todo.pop(), ()):
            if link.source not in seen:
                seen.add(link.source)
                todo.append(link.source)
    return {c for c in seen if c in model.causes}


@dataclass(frozen=True)
class Judgement:
    """One labelled run scored: the reported causes, the confidence of the true cause and of the top candidate."""

    truth: str | None
    reported: tuple[str, ...]
    p_truth: float
    top: tuple[float, bool] | None


def judge(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> list[Judgement]:
    out = []
    for s in samples:
        candidates = set(s.candidates) | reachable_causes(model, {f.symptom for f in s.findings})
        r = rank(model, sorted(candidates), s.findings, s.judged, s.edges, th, s.steps)
        best = r.candidates[0] if r.candidates else None
        out.append(Judgement(s.truth, tuple(h.cause for h in r.hypotheses),
                             r.confidences.get(s.truth, 0.0) if s.truth else 0.0,
                             (best.confidence, best.cause == s.truth) if best and s.truth else None))
    return out


def summarise(judged: Sequence[Judgement]) -> Scores:
    """Macro top-1/top-3 over fault types, false-positive rate on the controls, NLL of the truth, ECE."""
    hits: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    fp = controls = 0
    nll = 0.0
    tops: list[tuple[float, bool]] = []
    for j in judged:
        if j.truth is None:
            controls += 1
            fp += bool(j.reported)
            continue
        hits[j.truth].append((j.reported[:1] == (j.truth,), j.truth in j.reported[:3]))
        nll -= math.log(max(j.p_truth, 1e-6))
        if j.top is not None:
            tops.append(j.top)
    faults = sorted(hits)
    top1 = sum(sum(a for a, _ in hits[f]) / len(hits[f]) for f in faults) / max(len(faults), 1)
    top3 = sum(sum(b for _, b in hits[f]) / len(hits[f]) for f in faults) / max(len(faults), 1)
    bins, ece = reliability(tops)
    per = {f: (sum(a for a, _ in hits[f]), sum(b for _, b in hits[f]), len(hits[f])) for f in faults}
    return Scores(top1, top3, fp / max(controls, 1), nll / max(sum(len(v) for v in hits.values()), 1), ece, per, bins)


def evaluate(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> Scores:
    return summarise(judge(samples, model, th))


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


def profile_of(sample: Sample) -> str:
    """The presentation a labelled run belongs to: its severity (label ``program:name:severity:seed``)."""
    parts = sample.label.split(":")
    return parts[2] if len(parts) > 2 and parts[2] else "all"


def rates(samples: Sequence[Sample]) -> tuple[dict[tuple[str, str], dict[str, tuple[int, int]]],
                                               dict[str, tuple[int, int]]]:
    """How often each symptom was reported per (injected cause, profile), and on the healthy controls:
    (hits, runs that judged it)."""
    per: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    healthy: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for s in samples:
        seen = {f.symptom for f in s.findings}
        table = per[(s.truth, profile_of(s))] if s.truth else healthy
        for sym in s.judged:
            table[sym][1] += 1
            table[sym][0] += sym in seen
    return ({k: {sym: (v[0], v[1]) for sym, v in t.items()} for k, t in per.items()},
            {k: (v[0], v[1]) for k, v in healthy.items()})


def calibrated_strength(hits: int, judged: int, prior: float = 0.5, weight: float = 2.0) -> float:
    """The measured rate shrunk towards ``prior`` with ``weight`` pseudo-runs (a Beta prior), two decimals."""
    return round((hits + weight * prior) / (judged + weight), 2)


LINKS_FILE = "links-calibrated.ttl"
LEAKS_FILE = "thresholds/leaks.ttl"
_PREFIXES = """@prefix dt:   <https://w3id.org/debugtune#> .
@prefix kb:   <https://w3id.org/debugtune/kb/> .
@prefix link: <https://w3id.org/debugtune/kb/link/> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix dct:  <http://purl.org/dc/terms/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
"""
LEAK_SOURCE = "https://doi.org/10.1016/C2009-0-27609-4"


def base_store() -> Store:
    """An in-memory store with the ontology and the knowledge base minus the calibration files themselves
    (so that a calibration never builds on an earlier one)."""
    from debugtune import cases, ontology
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import KnowledgeSource, load_knowledge
    from debugtune.kg.namespaces import GRAPH_KB, GRAPH_ONTOLOGY

    generated = {(cases.HERE / LINKS_FILE).resolve(), (cases.HERE / LEAKS_FILE).resolve()}
    files = tuple(f for f in cases.turtle_files() if f.resolve() not in generated)
    store = open_store(None)
    load_knowledge(store, sources=[KnowledgeSource(GRAPH_ONTOLOGY, (ontology.ONTOLOGY,)),
                                   KnowledgeSource(GRAPH_KB, files)])
    return store


def calibration_turtle(samples: Sequence[Sample], th: Thresholds) -> tuple[str, str]:
    """(profiles and links Turtle, leaks Turtle) measured on ``samples``.

    Profiles: per injected cause and severity, the smoothed rate of every symptom its runs could judge.
    Links: a new causal link from the cause to each symptom its profiles report in at least
    ``calibration.link_min_rate`` of the runs and ``calibration.link_margin`` more often than the healthy
    controls, where the knowledge base has none (so the rules find the cause from that symptom). Leaks:
    ``infer.leak.<Symptom>`` = the smoothed rate of the symptom on the healthy controls (not below
    ``infer.leak_floor``) where enough controls could show it."""
    store = base_store()
    model = load_model(store)
    th = Thresholds({**dict(Thresholds.from_store(store).items()), **dict(th.items())})
    per, healthy = rates(samples)
    direct = {(link.source, link.target) for link in model.links}
    h_rate = {k: v[0] / max(v[1], 1) for k, v in healthy.items()}
    weight = th["calibration.prior_weight"]
    min_judged, min_rate, margin = (th.int("calibration.profile_min_judged"), th["calibration.link_min_rate"],
                                    th["calibration.link_margin"])
    leaks_now = {sym: calibrated_strength(k, m, th["infer.leak"], weight) for sym, (k, m) in healthy.items()}
    sources = {r["c"].rsplit("/", 1)[-1]: r["src"] for r in store.query(
        "SELECT ?c (SAMPLE(?s) AS ?src) WHERE { ?c a dt:Cause ; dct:source ?s } GROUP BY ?c").dicts()}
    out = [f"# Calibration of the causal engine on the debugtune fault benchmark (bench/faults), {len(samples)} runs.\n"
           f"# Profiles: for each injected cause and severity, how often the detectors reported each symptom in the\n"
           f"# runs where the fault manifested (Laplace-smoothed). Links: symptoms a cause showed that the knowledge\n"
           f"# base links to it only weakly or not at all. Generated by\n"
           f"# `python -m debugtune.engine.infer.calibrate OUT --write`; the knowledge base's own estimates\n"
           f"# (dt:strength in links-*.ttl) are left as they are.\n",
           _PREFIXES + "@prefix profile: <https://w3id.org/debugtune/kb/profile/> .\n"]
    new_links: dict[tuple[str, str], tuple[float, str]] = {}
    for (cause, prof), table in sorted(per.items()):
        judged = {sym: kn for sym, kn in table.items() if kn[1] >= min_judged}
        if not judged:
            continue
        n = max(kn[1] for kn in judged.values())
        prior = activation(model, cause, th.int("infer.max_depth"))  # the knowledge base's estimate
        value = {sym: calibrated_strength(k, m, max(prior.get(sym, 0.0), leaks_now.get(sym, th["infer.leak"])),
                                          weight) for sym, (k, m) in judged.items()}
        items = " ,\n".join(f"        [ dt:symptom kb:{sym} ; dt:value {value[sym]:.2f} ]" for sym in sorted(judged))
        out.append(f"profile:{cause}-{prof} a dt:CalibrationProfile ;\n"
                   f"    dt:profileOf kb:{cause} ;\n"
                   f"    skos:prefLabel \"{cause}, {prof} (fault bench)\"@en ;\n"
                   f"    skos:note \"rates over {n} runs of the fault bench where the fault manifested\"@en ;\n"
                   f"    dct:source <{sources.get(cause, LEAK_SOURCE)}> ;\n"
                   f"    dt:symptomRate\n{items} .\n")
        for sym, (k, m) in judged.items():
            rate = k / m
            if (cause, sym) not in direct and rate >= min_rate and rate >= h_rate.get(sym, 0.0) + margin:
                if value[sym] > new_links.get((cause, sym), (0.0, ""))[0]:
                    new_links[(cause, sym)] = (value[sym], f"reported in {k} of {m} {prof} runs")
    main = defaultdict(float)
    for link in model.links:
        main[link.source] = max(main[link.source], link.strength)
    for (cause, sym), (value, note) in sorted(new_links.items()):
        # the profile carries the measured rate; the link stays below the cause's main effect (calibration.link_cap)
        value = min(value, round(th["calibration.link_cap"] * main[cause], 2)) if main[cause] else value
        out.append(f"link:{cause}-{sym} a dt:CausalLink ;\n"
                   f"    skos:prefLabel \"{cause} → {sym}\"@en ;\n"
                   f"    dt:from kb:{cause} ; dt:to kb:{sym} ; dt:strength {value:.2f} ;\n"
                   f"    rdfs:comment \"Added by the diagnosis engine, calibrated on the fault bench: {note}.\"@en ;\n"
                   f"    dct:source <{sources.get(cause, LEAK_SOURCE)}> .\n")
    leaks = ["# Per-symptom leaks of the causal engine (P(finding | no modelled cause)): the rate at which the\n"
             "# detectors report each symptom on the fault bench's healthy runs and benign look-alikes.\n"
             "# Generated by `python -m debugtune.engine.infer.calibrate OUT --write`.\n", _PREFIXES]
    for sym, (k, m) in sorted(healthy.items()):
        value = leaks_now[sym]
        value = max(value, th["infer.leak_floor"])
        if m < th.int("calibration.leak_min_controls") or value == th["infer.leak"]:
            continue
        leaks.append(f"kb:threshold-infer-leak-{sym} a dt:Threshold ;\n"
                     f"    dt:thresholdKey \"infer.leak.{sym}\" ; dt:value {value:.2f} ; dt:appliesTo kb:{sym} ;\n"
                     f"    skos:prefLabel \"leak of {sym}\"@en ;\n"
                     f"    skos:definition \"Probability that {sym} is reported without any modelled cause.\"@en ;\n"
                     f"    skos:note \"fault bench: reported in {k} of {m} healthy or look-alike runs\"@en ;\n"
                     f"    dct:source <{LEAK_SOURCE}> .\n")
    return "\n".join(out), "\n".join(leaks)


def seed_of(sample: Sample) -> str:
    """The training seed of a labelled run (label ``program:name:severity:seed``)."""
    return sample.label.rsplit(":", 1)[-1]


def calibrated_store(samples: Sequence[Sample], th: Thresholds) -> Store:
    """The knowledge base with a calibration (profiles, links, leaks) measured on ``samples`` only."""
    from debugtune.kg.namespaces import GRAPH_KB

    links, leaks = calibration_turtle(samples, th)
    store = base_store()
    store.load_data(links, graph=GRAPH_KB)
    store.load_data(leaks, graph=GRAPH_KB)
    return store


@dataclass
class Fold:
    """One held-out seed: what the calibration fitted on the other seeds scores on it."""

    seed: str
    temperature: float
    scores: Scores
    judged: list[Judgement]


def holdout(samples: Sequence[Sample], changes: Mapping[str, float], *, fit: bool = False) -> tuple[list[Fold], Scores]:
    """Leave one seed out: calibrate (and with ``fit`` fit the temperature) on the runs of the other seeds, score
    the runs of the held-out seed; returns the folds and the figures of all held-out predictions pooled."""
    folds = []
    for seed in sorted({seed_of(s) for s in samples}):
        train = [s for s in samples if seed_of(s) != seed]
        test = [s for s in samples if seed_of(s) == seed]
        store = calibrated_store(train, with_values(Thresholds.from_store(base_store()), changes))
        th = with_values(Thresholds.from_store(store), changes)
        model = load_model(store)
        if fit:
            th = with_values(th, {"infer.temperature": fit_temperature(train, model, th)})
        judged = judge(test, model, th)
        folds.append(Fold(seed, th["infer.temperature"], summarise(judged), judged))
    return folds, summarise([j for f in folds for j in f.judged])


def with_values(th: Thresholds, changes: Mapping[str, float]) -> Thresholds:
    return Thresholds({**dict(th.items()), **changes})


def fit_temperature(samples: Sequence[Sample], model: CausalModel, th: Thresholds) -> float:
    """The temperature minimising the negative log-likelihood of the true cause on the fault runs."""
    def nll(log_t: float) -> float:
        return evaluate(samples, model, with_values(th, {"infer.temperature": math.exp(log_t)})).nll

    best = minimize_scalar(nll, bounds=(math.log(0.2), math.log(10.0)), method="bounded", options={"xatol": 1e-3})
    return float(math.exp(best.x))


def report(scores: Scores, out=sys.stdout) -> None:
    print(f"macro top-1 {scores.top1:.3f}  top-3 {scores.top3:.3f}  healthy FP rate {scores.fpr:.3f}  "
          f"NLL {scores.nll:.3f}  ECE {scores.ece:.3f}", file=out)
    for f, (a, b, n) in sorted(scores.per_fault.items()):
        print(f"  {f:<26} top-1 {a}/{n}  top-3 {b}/{n}", file=out)
    print("  reliability (mean confidence → accuracy, runs):", file=out)
    for conf, acc, n in scores.bins:
        print(f"    {conf:.2f} → {acc:.2f}  ({n})", file=out)


def main(argv: list[str] | None = None) -> int:
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    ap = argparse.ArgumentParser(description="Calibrate the causal engine on labelled runs.")
    ap.add_argument("out", type=Path, help="folder with labels/ and runs/ (bench/faults/out)")
    ap.add_argument("--fit", action="store_true", help="fit the temperature and print the fitted value")
    ap.add_argument("--filter", default="", help="only runs whose program:name:severity:seed contains this")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override an infer.* constant")
    ap.add_argument("--holdout", action="store_true",
                    help="leave one seed out: calibrate on the other seeds, score the held-out one (with --fit, the "
                         "temperature is fitted on the other seeds too)")
    ap.add_argument("--write", action="store_true",
                    help=f"write the calibrated links ({LINKS_FILE}) and leaks ({LEAKS_FILE}) into cases/")
    args = ap.parse_args(argv)
    store = open_store(None)
    load_knowledge(store)
    th = Thresholds.from_store(store)
    changes = {k: float(v) for k, v in (item.split("=", 1) for item in args.set)}
    th = with_values(th, changes)
    samples = collect(args.out, store, th, name_filter=args.filter)
    model = load_model(store)
    print(f"{len(samples)} runs ({sum(s.truth is not None for s in samples)} faults); "
          f"temperature {th['infer.temperature']:.3f}")
    report(evaluate(samples, model, th))
    if args.write:
        from debugtune import cases
        from debugtune.engine.telemetry.atomic import atomic_write_bytes

        links, leaks = calibration_turtle(samples, th)
        atomic_write_bytes(cases.HERE / LINKS_FILE, links.encode())
        atomic_write_bytes(cases.HERE / LEAKS_FILE, leaks.encode())
        print(f"wrote {cases.HERE / LINKS_FILE} and {cases.HERE / LEAKS_FILE}; reload to score with them")
    if args.fit:
        t = fit_temperature(samples, model, th)
        print(f"fitted temperature {t:.3f}")
        report(evaluate(samples, model, with_values(th, {"infer.temperature": t})))
    if args.holdout:
        folds, pooled = holdout(samples, changes, fit=args.fit)
        for f in folds:
            print(f"held-out seed {f.seed} (temperature {f.temperature:.3f}): macro top-1 {f.scores.top1:.3f}  "
                  f"top-3 {f.scores.top3:.3f}  healthy FP rate {f.scores.fpr:.3f}")
        print("held-out predictions pooled over the seeds:")
        report(pooled)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["UNKNOWN", "Sample", "Scores", "collect", "evaluate", "fit_temperature", "holdout", "reliability", "main"]
