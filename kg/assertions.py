"""Findings, correlation edges, hypotheses and experiments as RDF in a run's named graph, and back.

IRIs under the run base ``urn:debugtune:run:<id>/``: ``finding/<id>``, ``correlation/<n>``,
``hypothesis/<rank>``, ``experiment/<id>``. Each write is one SPARQL update, so it is atomic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from debugtune.kg.namespaces import DT, KB, run_base, run_graph
from debugtune.kg.records import (
    DIMENSION_IRIS,
    CorrelationEdge,
    Experiment,
    Finding,
    Hypothesis,
)
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

_DIMENSION_OF_IRI = {v: k for k, v in DIMENSION_IRIS.items()}
_DIAGNOSIS_PARTS = ("finding/", "correlation/", "hypothesis/")


def finding_iri(run_id: str, finding_id: str) -> str:
    return run_base(run_id) + "finding/" + quote(finding_id, safe="")


def triples(subject: str, pairs: Iterable[tuple[str, str]]) -> str:
    """One subject's triples in Turtle (also the body of a SPARQL ``INSERT DATA``): ``pairs`` are (predicate,
    object) terms already written (prefixed names, ``iri(...)``, ``literal(...)``)."""
    return f"{iri(subject)} " + " ;\n    ".join(f"{p} {o}" for p, o in pairs) + " .\n"


_triples = triples


def _now() -> str:
    return literal(datetime.now(UTC).isoformat()) + "^^<http://www.w3.org/2001/XMLSchema#dateTime>"


def run_triples(run_id: str, meta: Mapping[str, Any]) -> str:
    """Turtle-like triples (SPARQL INSERT DATA body) describing the run itself."""
    pairs = [("a", "dt:TrainingRun"), ("dt:runId", literal(run_id))]
    for key, prop in (("run_dir", "dt:runDir"), ("world_size", "dt:worldSize"), ("steps", "dt:stepCount")):
        if meta.get(key) is not None:
            pairs.append((prop, literal(meta[key])))
    if meta.get("label"):
        pairs.append(("skos:prefLabel", literal(meta["label"])))
    return _triples(run_base(run_id), pairs)


def finding_triples(run_id: str, f: Finding) -> str:
    subject = finding_iri(run_id, f.id)
    pairs = [
        ("a", "dt:Finding"), ("a", "sosa:Observation"), ("dt:findingId", literal(f.id)),
        ("dt:inRun", iri(run_base(run_id))), ("sosa:hasFeatureOfInterest", iri(run_base(run_id))),
        ("dt:symptom", iri(KB + f.symptom)), ("dt:inDimension", iri(DT + DIMENSION_IRIS[f.dimension])),
        ("dt:entity", literal(f.entity)), ("dt:locationKind", iri(DT + f.location_kind.capitalize() + "Location")),
        ("dt:onsetStep", literal(int(f.onset_step))), ("dt:endStep", literal(int(f.end_step))),
        ("dt:severity", literal(float(f.severity))), ("sosa:hasSimpleResult", literal(float(f.severity))),
        ("dt:detector", literal(f.detector)), ("sosa:resultTime", _now()),
    ]
    if f.detection_step is not None:
        pairs.append(("dt:detectionStep", literal(int(f.detection_step))))
    out = []
    for i, (name, value) in enumerate(sorted(f.evidence.items())):
        ev = f"{subject}/evidence/{i}"
        pairs.append(("dt:evidence", iri(ev)))
        out.append(_triples(ev, [("a", "dt:Evidence"), ("dt:metricName", literal(name)),
                                 ("dt:value", literal(value if isinstance(value, str | bool) else float(value)))]))
    return _triples(subject, pairs) + "".join(out)


def edge_triples(run_id: str, n: int, e: CorrelationEdge) -> str:
    return _triples(run_base(run_id) + f"correlation/{n}", [
        ("a", "dt:CorrelationEdge"), ("dt:findingA", iri(finding_iri(run_id, e.a))),
        ("dt:findingB", iri(finding_iri(run_id, e.b))), ("dt:lagSteps", literal(int(e.lag_steps))),
        ("dt:correlation", literal(float(e.correlation)))])


def hypothesis_triples(run_id: str, h: Hypothesis) -> str:
    subject = run_base(run_id) + f"hypothesis/{h.rank}"
    pairs = [
        ("a", "dt:Hypothesis"), ("dt:inRun", iri(run_base(run_id))), ("dt:cause", iri(KB + h.cause)),
        ("dt:confidence", literal(float(h.confidence))), ("dt:hypothesisRank", literal(int(h.rank))),
        ("dt:explanation", literal(h.explanation)), ("prov:generatedAtTime", _now()),
    ]
    pairs += [("dt:supportedBy", iri(finding_iri(run_id, fid))) for fid in h.findings]
    pairs += [("prov:wasDerivedFrom", iri(finding_iri(run_id, fid))) for fid in h.findings]
    steps = []
    for pos, node in enumerate(h.chain):
        step = f"{subject}/step/{pos}"
        pairs.append(("dt:chainStep", iri(step)))
        steps.append(_triples(step, [("a", "dt:ChainStep"), ("dt:position", literal(pos)),
                                     ("dt:node", iri(KB + node))]))
    return _triples(subject, pairs) + "".join(steps)


def replace_diagnosis(store: Store, run_id: str, meta: Mapping[str, Any], findings: Sequence[Finding],
                      edges: Sequence[CorrelationEdge] = (), hypotheses: Sequence[Hypothesis] = ()) -> None:
    """Write a run's diagnosis, replacing any earlier one (experiments are kept); one atomic update."""
    g, base = iri(run_graph(run_id)), run_base(run_id)
    starts = " || ".join(f"STRSTARTS(STR(?s), {literal(base + p)})" for p in _DIAGNOSIS_PARTS)
    body = run_triples(run_id, meta)
    body += "".join(finding_triples(run_id, f) for f in findings)
    body += "".join(edge_triples(run_id, n, e) for n, e in enumerate(edges))
    body += "".join(hypothesis_triples(run_id, h) for h in hypotheses)
    old = f"GRAPH {g} {{ ?s ?p ?o FILTER({starts} || ?s = {iri(base)}) }}"
    store.update(f"DELETE {{ GRAPH {g} {{ ?s ?p ?o }} }} WHERE {{ {old} }} ;\nINSERT DATA {{ GRAPH {g} {{\n{body}}} }}")


def read_findings(store: Store, run_id: str) -> list[Finding]:
    """The findings of a run, ordered by onset step then id."""
    g = iri(run_graph(run_id))
    rows = store.select(f"""
        SELECT ?f ?id ?sym ?dim ?entity ?onset ?end ?sev ?det ?dstep ?name ?value WHERE {{ GRAPH {g} {{
          ?f a dt:Finding ; dt:findingId ?id ; dt:symptom ?sym ; dt:inDimension ?dim ; dt:entity ?entity ;
             dt:onsetStep ?onset ; dt:endStep ?end ; dt:severity ?sev ; dt:detector ?det .
          OPTIONAL {{ ?f dt:detectionStep ?dstep }}
          OPTIONAL {{ ?f dt:evidence ?e . ?e dt:metricName ?name ; dt:value ?value }}
        }} }}""").dicts()
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        item = by_id.setdefault(r["id"], {**r, "evidence": {}})
        if r["name"] is not None:
            item["evidence"][r["name"]] = r["value"]
    out = [Finding(id=r["id"], symptom=r["sym"][len(KB):], dimension=_DIMENSION_OF_IRI[r["dim"][len(DT):]],
                   entity=r["entity"], onset_step=r["onset"], end_step=r["end"], severity=r["sev"],
                   evidence=r["evidence"], detector=r["det"], detection_step=r["dstep"])
           for r in by_id.values()]
    return sorted(out, key=lambda f: (f.onset_step, f.id))


def read_hypotheses(store: Store, run_id: str) -> list[Hypothesis]:
    """The hypotheses of a run, best first; each one's supporting findings in onset order."""
    g = iri(run_graph(run_id))
    rows = store.select(f"""
        SELECT ?h ?cause ?conf ?rank ?text ?pos ?node ?fid ?onset WHERE {{ GRAPH {g} {{
          ?h a dt:Hypothesis ; dt:cause ?cause ; dt:confidence ?conf ; dt:hypothesisRank ?rank ;
             dt:explanation ?text .
          {{ ?h dt:chainStep ?st . ?st dt:position ?pos ; dt:node ?node }}
          UNION {{ ?h dt:supportedBy ?f . ?f dt:findingId ?fid ; dt:onsetStep ?onset }}
        }} }}""").dicts()
    by_h: dict[str, dict[str, Any]] = {}
    for r in rows:
        item = by_h.setdefault(r["h"], {**r, "chain": {}, "findings": set()})
        if r["pos"] is not None:
            item["chain"][r["pos"]] = r["node"][len(KB):]
        if r["fid"] is not None:
            item["findings"].add((r["onset"], r["fid"]))
    out = [Hypothesis(cause=r["cause"][len(KB):], confidence=r["conf"],
                      chain=tuple(r["chain"][k] for k in sorted(r["chain"])),
                      findings=tuple(fid for _, fid in sorted(r["findings"])), explanation=r["text"], rank=r["rank"])
           for r in by_h.values()]
    return sorted(out, key=lambda h: h.rank)


def experiment_triples(run_id: str, e: Experiment) -> str:
    subject = run_base(run_id) + "experiment/" + quote(e.id, safe="")
    pairs = [
        ("a", "dt:Experiment"), ("a", "mls:Run"), ("dt:inRun", iri(run_base(run_id))),
        ("dt:remedy", iri(KB + e.remedy)), ("dt:parametersJson", literal(json.dumps(e.parameters, sort_keys=True))),
        ("dt:cost", literal(float(e.cost))), ("dt:seed", literal(int(e.seed))),
        ("dt:status", iri(DT + "Status" + e.status.capitalize())), ("skos:prefLabel", literal(e.id)),
    ]
    if e.replay_ref:
        pairs.append(("dt:replayRef", literal(e.replay_ref)))
    extra = []
    for i, (name, value) in enumerate(sorted(e.objectives.items())):
        obj = f"{subject}/objective/{i}"
        pairs.append(("dt:objective", iri(obj)))
        extra.append(_triples(obj, [("a", "dt:ObjectiveValue"), ("dt:metricName", literal(name)),
                                    ("dt:value", literal(value if isinstance(value, str | bool) else float(value)))]))
    for i, (name, value) in enumerate(sorted(e.parameters.items())):
        hp = f"{subject}/setting/{i}"
        pairs.append(("mls:hasInput", iri(hp)))
        extra.append(_triples(hp, [("a", "mls:HyperParameterSetting"), ("dt:paramName", literal(name)),
                                   ("mls:hasValue", literal(value))]))
    return _triples(subject, pairs) + "".join(extra)


def add_experiments(store: Store, run_id: str, experiments: Sequence[Experiment]) -> None:
    """Record experiments of a run (one atomic update)."""
    body = "".join(experiment_triples(run_id, e) for e in experiments)
    store.update(f"INSERT DATA {{ GRAPH {iri(run_graph(run_id))} {{\n{body}}} }}")


def read_experiments(store: Store, run_id: str | None = None) -> list[tuple[str, Experiment]]:
    """(run id, experiment) pairs of one run or of all runs, in id order."""
    graph = f"GRAPH {iri(run_graph(run_id))}" if run_id else "GRAPH ?g"
    rows = store.select(f"""
        SELECT ?run ?label ?remedy ?params ?cost ?seed ?status ?ref ?name ?value WHERE {{ {graph} {{
          ?e a dt:Experiment ; dt:inRun ?r ; skos:prefLabel ?label ; dt:remedy ?remedy ;
             dt:parametersJson ?params ; dt:cost ?cost ; dt:seed ?seed ; dt:status ?status .
          ?r dt:runId ?run .
          OPTIONAL {{ ?e dt:replayRef ?ref }}
          OPTIONAL {{ ?e dt:objective ?o . ?o dt:metricName ?name ; dt:value ?value }}
        }} }}""").dicts()
    by_e: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        item = by_e.setdefault((r["run"], r["label"]), {**r, "objectives": {}})
        if r["name"] is not None:
            item["objectives"][r["name"]] = r["value"]
    out = [(run, Experiment(id=label, remedy=r["remedy"][len(KB):], parameters=json.loads(r["params"]),
                            objectives=r["objectives"], cost=r["cost"], seed=r["seed"],
                            status=r["status"][len(DT) + len("Status"):].lower(), replay_ref=r["ref"]))
           for (run, label), r in by_e.items()]
    return sorted(out, key=lambda x: (x[0], x[1].id))


def runs(store: Store) -> list[dict[str, Any]]:
    """Every run in the store with its metadata and top hypothesis (if any)."""
    return store.select("""
        SELECT ?run ?dir ?steps ?world (SAMPLE(?c) AS ?top) (MAX(?conf) AS ?confidence) WHERE {
          ?r a dt:TrainingRun ; dt:runId ?run .
          OPTIONAL { ?r dt:runDir ?dir } OPTIONAL { ?r dt:stepCount ?steps } OPTIONAL { ?r dt:worldSize ?world }
          OPTIONAL { ?h a dt:Hypothesis ; dt:inRun ?r ; dt:hypothesisRank 1 ; dt:cause ?c ; dt:confidence ?conf }
        } GROUP BY ?run ?dir ?steps ?world ORDER BY ?run""").dicts()
