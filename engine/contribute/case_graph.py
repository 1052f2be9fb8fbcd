"""The case graph (``case.ttl``) and environment snapshot (``environment.json``) of a package, scrubbed.

The case is a ``dt:Case`` with its signature items (symptom, location kind, severity), confirmed
cause, applied remedy, outcome, experiments and PROV links: ``prov:wasDerivedFrom`` the run's
findings and the hypothesis of the confirmed cause (copied in, with their evidence), and
``prov:wasAttributedTo`` the contributor. The copied findings and hypothesis are typed
``prov:Entity`` only, not ``dt:Finding`` / ``dt:Hypothesis``, so that queries over live runs (which
read those classes across graphs) never mistake a package's history for a run of this installation.
Every free-text value passes through the `Scrubber`; the run directory and replay checkpoints are
never included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import pyoxigraph as ox

from debugtune.engine.contribute.case import Choice, RunFacts
from debugtune.engine.contribute.scrub import Scrubber
from debugtune.kg.namespaces import DCT, DT, KB, MLS, PREFIXES, PROV, RDF, SKOS, XSD, run_base

_A = ox.NamedNode(RDF + "type")
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}$")
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
CASE_PREFIXES = {k: v for k, v in PREFIXES.items() if k in ("dt", "kb", "prov", "mls", "skos", "dct", "rdf", "xsd")}


class _Graph:
    """A small triple builder."""

    def __init__(self) -> None:
        self.triples: list[ox.Triple] = []

    def add(self, s: ox.NamedNode | ox.BlankNode, p: str, o: Any) -> None:
        if o is None:
            return
        self.triples.append(ox.Triple(s, ox.NamedNode(p), _term(o)))


def _term(o: Any) -> ox.NamedNode | ox.BlankNode | ox.Literal:
    if isinstance(o, ox.NamedNode | ox.BlankNode | ox.Literal):
        return o
    if isinstance(o, bool):
        return ox.Literal(str(o).lower(), datatype=ox.NamedNode(XSD + "boolean"))
    if isinstance(o, int):
        return ox.Literal(str(o), datatype=ox.NamedNode(XSD + "integer"))
    if isinstance(o, float):
        return ox.Literal(repr(float(o)), datatype=ox.NamedNode(XSD + "double"))
    return ox.Literal(str(o))


def _n(value: str) -> ox.NamedNode:
    return ox.NamedNode(value)


def _add_findings(g: _Graph, facts: RunFacts, run: str, scrub: Scrubber) -> dict[str, ox.NamedNode]:
    nodes = {}
    for i, f in enumerate(facts.findings):
        node = _n(f"{run}finding/{i}")
        nodes[f.id] = node
        g.add(node, RDF + "type", _n(PROV + "Entity"))
        g.add(node, DT + "symptom", _n(KB + f.symptom))
        g.add(node, DT + "locationKind", _n(DT + f.location_kind.capitalize() + "Location"))
        g.add(node, DT + "entity", scrub.text(f.entity, "case.ttl: finding entity"))
        g.add(node, DT + "onsetStep", int(f.onset_step))
        g.add(node, DT + "endStep", int(f.end_step))
        g.add(node, DT + "severity", float(f.severity))
        g.add(node, DT + "detector", scrub.text(f.detector, "case.ttl: finding detector"))
        _add_values(g, node, DT + "evidence", DT + "Evidence", f.evidence, scrub, "case.ttl: evidence key")
    return nodes


def _add_values(g: _Graph, node: ox.NamedNode, prop: str, cls: str, values: Mapping[str, float | str | bool],
                scrub: Scrubber, where: str) -> None:
    """Named values (evidence, objectives) as nodes ``<node>/<kind>/<j>`` with a metric name and a value: a
    number, or a categorical string (scrubbed like any text) or flag, as ``kg.assertions`` writes them."""
    kind = "evidence" if cls.endswith("Evidence") else "objective"
    for j, (name, value) in enumerate(sorted(values.items())):
        item = _n(f"{node.value}/{kind}/{j}")
        g.add(node, prop, item)
        g.add(item, RDF + "type", _n(cls))
        g.add(item, DT + "metricName", scrub.text(name, where))
        g.add(item, DT + "value", scrub.text(value, where) if isinstance(value, str)
              else value if isinstance(value, bool) else float(value))


def _add_hypothesis(g: _Graph, choice: Choice, run: str, findings: dict[str, ox.NamedNode],
                    scrub: Scrubber) -> ox.NamedNode | None:
    h = choice.hypothesis
    if h is None:
        return None
    node = _n(f"{run}hypothesis/{h.rank}")
    g.add(node, RDF + "type", _n(PROV + "Entity"))
    g.add(node, DT + "cause", _n(KB + h.cause))
    g.add(node, DT + "confidence", float(h.confidence))
    g.add(node, DT + "hypothesisRank", int(h.rank))
    g.add(node, DT + "explanation", scrub.text(h.explanation, "case.ttl: hypothesis explanation"))
    for fid in h.findings:
        if fid in findings:
            g.add(node, PROV + "wasDerivedFrom", findings[fid])
    return node


def _add_experiments(g: _Graph, facts: RunFacts, run: str, scrub: Scrubber) -> list[ox.NamedNode]:
    out = []
    for i, e in enumerate(facts.experiments):
        node = _n(f"{run}experiment/{i}")
        out.append(node)
        params = scrub.walk(e.parameters, "case.ttl: experiment parameters")
        for t in (DT + "Experiment", MLS + "Run"):
            g.add(node, RDF + "type", _n(t))
        g.add(node, SKOS + "prefLabel", scrub.text(e.id, "case.ttl: experiment id"))
        g.add(node, DT + "remedy", _n(KB + e.remedy))
        g.add(node, DT + "parametersJson", json.dumps(params, sort_keys=True))
        g.add(node, DT + "cost", float(e.cost))
        g.add(node, DT + "seed", int(e.seed))
        g.add(node, DT + "status", _n(DT + "Status" + e.status.capitalize()))
        if e.replay_ref:
            scrub.drop("checkpoint", "case.ttl: experiment replay reference")
        for j, (name, value) in enumerate(sorted(params.items())):
            hp = _n(f"{run}experiment/{i}/setting/{j}")
            g.add(node, MLS + "hasInput", hp)
            g.add(hp, RDF + "type", _n(MLS + "HyperParameterSetting"))
            g.add(hp, DT + "paramName", name)
            g.add(hp, MLS + "hasValue", value if isinstance(value, int | float | bool | str) else json.dumps(value))
        _add_values(g, node, DT + "objective", DT + "ObjectiveValue", e.objectives, scrub, "case.ttl: objective name")
    return out


def contributor_node(case_iri: str, attribution: str) -> ox.NamedNode:
    """The contributor's agent: the attribution itself when it is a URL (ORCID), else a node of the case."""
    if attribution.startswith(("https://", "http://")) and " " not in attribution:
        return _n(attribution)
    return _n(case_iri + "/contributor")


def case_triples(facts: RunFacts, choice: Choice, scrub: Scrubber, *, case_iri: str, attribution: str,
                 title: str | None = None, description: str | None = None, source: str | None = None,
                 created: datetime | None = None) -> list[ox.Triple]:
    """The triples of the case graph (see the module docstring); ``attribution`` is already scrubbed."""
    g = _Graph()
    run_token = scrub.identifier(facts.run_id, "run-id", "case.ttl: run id")
    run = run_base(run_token)
    if facts.run_dir:
        scrub.drop("path", "case.ttl: run directory")
    case = _n(case_iri)
    for t in (DT + "Case", PROV + "Entity"):
        g.add(case, RDF + "type", _n(t))
    symptoms = ", ".join(sorted({s.symptom for s in facts.signature}))
    ranked = sorted(facts.signature, key=lambda s: (-s.severity, s.symptom))
    top = list(dict.fromkeys(s.symptom for s in ranked))[:3]
    label = (scrub.text(title, "case.ttl: title") if title
             else f"{choice.cause} fixed by {choice.remedy} ({', '.join(top)})")
    g.add(case, SKOS + "prefLabel", ox.Literal(label, language="en"))
    text = scrub.text(description, "case.ttl: description") if description else (
        f"A run showing {symptoms}; confirmed cause {choice.cause}, applied remedy {choice.remedy}, "
        f"outcome {choice.outcome}.")
    g.add(case, DCT + "description", ox.Literal(text, language="en"))
    for item in facts.signature:
        node = ox.BlankNode()
        g.add(case, DT + "signature", node)
        g.add(node, RDF + "type", _n(DT + "SignatureItem"))
        g.add(node, DT + "symptom", _n(KB + item.symptom))
        g.add(node, DT + "locationKind", _n(DT + item.location.capitalize() + "Location"))
        g.add(node, DT + "severity", float(item.severity))
    g.add(case, DT + "confirmedCause", _n(KB + choice.cause))
    g.add(case, DT + "appliedRemedy", _n(KB + choice.remedy))
    g.add(case, DT + "outcome", _n(DT + choice.outcome.capitalize()))
    g.add(case, DT + "aboutRun", _n(run))
    g.add(case, DCT + "source", _n(source) if source else _n(run))
    g.add(case, DCT + "created", ox.Literal((created or datetime.now(UTC)).isoformat(timespec="seconds"),
                                            datatype=ox.NamedNode(XSD + "dateTime")))
    run_node = _n(run)
    for t in (MLS + "Run", PROV + "Activity"):
        g.add(run_node, RDF + "type", _n(t))
    g.add(run_node, DT + "runId", run_token)
    if isinstance(facts.meta.get("world_size"), int):
        g.add(run_node, DT + "worldSize", int(facts.meta["world_size"]))
    findings = _add_findings(g, facts, run, scrub)
    hyp = _add_hypothesis(g, choice, run, findings, scrub)
    for derived in [*findings.values(), *([hyp] if hyp else [])]:
        g.add(case, PROV + "wasDerivedFrom", derived)
    for experiment in _add_experiments(g, facts, run, scrub):
        g.add(case, DT + "hasExperiment", experiment)
    agent = contributor_node(case_iri, attribution)
    g.add(case, PROV + "wasAttributedTo", agent)
    g.add(agent, RDF + "type", _n(PROV + "Agent"))
    g.add(agent, SKOS + "prefLabel", attribution)
    return g.triples


def turtle(triples: Iterable[ox.Triple]) -> bytes:
    """Turtle with the project's prefixes."""
    return ox.serialize(list(triples), format=ox.RdfFormat.TURTLE, prefixes=CASE_PREFIXES) or b""


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def environment(meta: dict[str, Any], scrub: Scrubber) -> dict[str, Any]:
    """Versions only, from run.json: Python, framework, packages, OS kind, device kind and count."""
    env = _mapping(meta.get("environment"))
    platform = _mapping(env.get("platform"))
    out: dict[str, Any] = {}
    candidates = {"python": env.get("python"), "implementation": env.get("implementation"),
                  "framework": meta.get("framework"), "framework_version": meta.get("framework_version"),
                  "system": platform.get("system"), "machine": platform.get("machine"),
                  "device_kind": env.get("device_kind")}
    for key, value in candidates.items():
        if isinstance(value, str) and _VERSION.match(value):
            out[key] = scrub.text(value, f"environment.json: {key}")
    for key in ("device_count", "world_size"):
        value = env.get(key, meta.get(key))
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    packages = _mapping(env.get("packages"))
    kept = {str(k): str(v) for k, v in packages.items()
            if isinstance(v, str) and _PACKAGE.match(str(k)) and _VERSION.match(v)}
    out["packages"] = {scrub.package(k, "environment.json: packages"): scrub.text(v, "environment.json: packages")
                       for k, v in sorted(kept.items())}
    left = len(packages) - len(kept) + sum(1 for k in env if k not in (
        "python", "implementation", "platform", "packages", "device_kind", "device_count"))
    if left:
        scrub.drop("field", "environment.json: fields that are not versions")
    return out
