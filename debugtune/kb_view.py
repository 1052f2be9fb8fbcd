"""One knowledge item in one place (`cann-debug kb show NAME`): a cause's knowledge is spread over up to eight
Turtle files (the cause, link files, calibrated links, remedies, cases) plus the detector registry; this gathers
it by SPARQL over the store (so imported packages and the local graph count too).

Sections: the item (kinds, label, definition, sources, every other statement, the shipped files that name it);
causal links out and in (strength, lags, sources); remedies that address it, with their tuning parameters;
cases that name it; calibration profiles; thresholds that apply (``dt:appliesTo`` it or a symptom judged by
one of its detectors, or declared by those detectors); the detectors that judge it (``DETECTORS``, and the
knowledge base's ``dt:detectedBy`` marks); prevention rules that mention it. It lives in the front door
because the detector registry belongs to the diagnosis stage and the rest to the knowledge graph.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from debugtune import cases
from debugtune.engine.diagnose.detectors import DETECTORS
from debugtune.engine.diagnose.registry import Detector
from debugtune.kg.errors import KgError
from debugtune.kg.namespaces import DCT, DT, GRAPH_INFERRED, KB, RDF, RDFS, SKOS, local_name
from debugtune.kg.results import to_python
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

KINDS = ("Cause", "Symptom", "Remedy", "PreventionRule", "Case", "CausalLink", "Threshold", "TuningParameter",
         "CalibrationProfile")
"""The classes `kb show` looks a name up in (a rule is also found by its ``dt:ruleId``)."""

SECTIONS = ("item", "links_out", "links_in", "remedies", "cases", "calibration", "thresholds", "detectors",
            "prevention_rules")
_DEFINITION = (SKOS + "prefLabel", SKOS + "definition", DCT + "source", RDF + "type")


class UnknownItemError(KgError):
    """No cause, symptom, remedy, rule or case of that name."""


@dataclass(frozen=True)
class Item:
    iri: str
    name: str
    kinds: tuple[str, ...]


def resolve(store: Store, name: str) -> Item:
    """The knowledge item called ``name``: a local name (``GateInitBias``, ``PaddleNLP-ColdStart``), a rule id
    (``MOE001``) or a full IRI; an unknown one is an error naming the closest known names."""
    from debugtune.engine.suggest.errors import unknown

    kinds = " ".join(iri(DT + k) for k in KINDS)
    if name.startswith(("http://", "https://", "urn:")):
        match = f"VALUES ?x {{ {iri(name)} }}"
    else:
        match = f"{{ ?x dt:ruleId {literal(name)} }} UNION {{ ?x ?p ?o FILTER(STRENDS(STR(?x), {literal('/' + name)})" \
                f" || STRENDS(STR(?x), {literal('#' + name)})) }}"
    rows = store.select(f"SELECT DISTINCT ?x ?k WHERE {{ {match} VALUES ?k {{ {kinds} }} ?x a ?k }}").rows
    found: dict[str, list[str]] = defaultdict(list)
    for x, k in rows:  # ?x and ?k are IRIs: ?k from VALUES, ?x matched by its IRI
        if isinstance(x, ox.NamedNode) and isinstance(k, ox.NamedNode):
            found[x.value].append(local_name(k.value))
    if not found:
        every = store.select(f"SELECT DISTINCT ?x WHERE {{ VALUES ?k {{ {kinds} }} ?x a ?k }}").column("x")
        raise UnknownItemError(unknown("knowledge item", name, {local_name(str(x)) for x in every}))
    if len(found) > 1:
        raise UnknownItemError(f"{name!r} names {len(found)} items ({', '.join(sorted(found))}); give the full IRI")
    (found_iri, ks), = found.items()
    return Item(found_iri, local_name(found_iri), tuple(sorted(set(ks), key=KINDS.index)))


def _rows(store: Store, sparql: str) -> list[dict[str, Any]]:
    return store.select(sparql).dicts()


def _sources(store: Store, subjects: list[str]) -> dict[str, list[str]]:
    if not subjects:
        return {}
    values = " ".join(iri(s) for s in subjects)
    out: dict[str, list[str]] = defaultdict(list)
    for r in _rows(store, f"SELECT ?s ?src WHERE {{ VALUES ?s {{ {values} }} ?s dct:source ?src }} ORDER BY ?src"):
        if str(r["src"]) not in out[r["s"]]:
            out[r["s"]].append(str(r["src"]))
    return out


def _files(item: Item) -> list[str]:
    """The shipped Turtle files that name the item (as a prefixed name or its IRI)."""
    word = re.compile(rf":{re.escape(item.name)}(?![\w-])|<{re.escape(item.iri)}>")
    return [str(p.relative_to(cases.HERE.parent)) for p in cases.turtle_files()
            if word.search(p.read_text(encoding="utf-8"))]


def _item(store: Store, item: Item) -> dict[str, Any]:
    s = iri(item.iri)
    label = store.select(f"SELECT ?l WHERE {{ {s} skos:prefLabel ?l }} LIMIT 1").scalar()
    definition = store.select(f"SELECT ?d WHERE {{ {s} skos:definition ?d }} LIMIT 1").scalar()
    statements = []
    asserted = f"SELECT DISTINCT ?p ?o WHERE {{ GRAPH ?g {{ {s} ?p ?o }} FILTER(?g != {iri(GRAPH_INFERRED)}) }} " \
               "ORDER BY ?p ?o"  # what the rules derive (dt:leadsTo) is in the links sections
    for r in _rows(store, asserted):
        if r["p"] not in _DEFINITION:
            statements.append({"property": _short(r["p"]), "value": _short(r["o"])})
    return {"iri": item.iri, "name": item.name, "kinds": list(item.kinds), "label": label, "definition": definition,
            "sources": _sources(store, [item.iri]).get(item.iri, []), "statements": statements,
            "files": _files(item)}


_PREFIXES = {DT: "dt:", SKOS: "skos:", DCT: "dct:", RDFS: "rdfs:", RDF: "rdf:"}


def _short(value: Any) -> Any:
    """An IRI of the knowledge base as its local name, a vocabulary's with its prefix; other values as they are."""
    if isinstance(value, str) and value.startswith(KB):
        return local_name(value)
    for ns, prefix in _PREFIXES.items():
        if isinstance(value, str) and value.startswith(ns):
            return prefix + value[len(ns):]
    return value


def _links(store: Store, item: Item, end: str) -> list[dict[str, Any]]:
    """Causal links with the item at ``end`` (``from`` or ``to``), strongest first."""
    other = "to" if end == "from" else "from"
    rows = _rows(store, f"""SELECT ?l ?other ?s ?lag ?min ?note WHERE {{
        ?l a dt:CausalLink ; dt:{end} {iri(item.iri)} ; dt:{other} ?other .
        OPTIONAL {{ ?l dt:strength ?s }} OPTIONAL {{ ?l dt:typicalLagSteps ?lag }}
        OPTIONAL {{ ?l dt:minLagSteps ?min }} OPTIONAL {{ ?l rdfs:comment ?note }} }}""")
    sources = _sources(store, [r["l"] for r in rows])
    out = {r["l"]: {"link": local_name(r["l"]), other: _short(r["other"]), "strength": r["s"], "lag_steps": r["lag"],
                    "min_lag_steps": r["min"], "note": r["note"], "sources": sources.get(r["l"], [])} for r in rows}
    return sorted(out.values(), key=lambda d: (-(d["strength"] or 0.0), d["link"]))


def _remedies(store: Store, item: Item) -> list[dict[str, Any]]:
    """Remedies addressing the item (a cause), or the item itself (a remedy), with their tuning parameters."""
    if "Remedy" in item.kinds:
        match = f"VALUES ?r {{ {iri(item.iri)} }} ?r a dt:Remedy ."
    else:
        match = f"?r a dt:Remedy ; dt:addresses {iri(item.iri)} ."
    rows = _rows(store, f"""SELECT ?r ?label ?eff ?cost ?risk WHERE {{ {match}
        OPTIONAL {{ ?r skos:prefLabel ?label }} OPTIONAL {{ ?r dt:effectiveness ?eff }}
        OPTIONAL {{ ?r dt:cost ?cost }} OPTIONAL {{ ?r dt:hasRisk ?risk }} }}""")
    params = _rows(store, f"""SELECT ?r ?p ?name ?kind ?scale ?low ?high ?default WHERE {{ {match}
        ?r dt:tuningParameter ?p . OPTIONAL {{ ?p dt:paramName ?name }} OPTIONAL {{ ?p dt:parameterKind ?kind }}
        OPTIONAL {{ ?p dt:scale ?scale }} OPTIONAL {{ ?p dt:minValue ?low }} OPTIONAL {{ ?p dt:maxValue ?high }}
        OPTIONAL {{ ?p dt:defaultValue ?default }} }} ORDER BY ?name""")
    addresses = _rows(store, f"SELECT ?r ?c WHERE {{ {match} ?r dt:addresses ?c }} ORDER BY ?c")
    sources = _sources(store, [r["r"] for r in rows])
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(r["r"], {"remedy": local_name(r["r"]), "label": r["label"], "effectiveness": r["eff"],
                                "cost": r["cost"], "risk": _short(r["risk"]), "addresses": [],
                                "parameters": [], "sources": sources.get(r["r"], [])})
    seen: set[tuple[str, str]] = set()
    for p in params:
        if (p["r"], p["p"]) not in seen:
            seen.add((p["r"], p["p"]))
            out[p["r"]]["parameters"].append({k: _short(p[k]) for k in ("name", "kind", "scale", "low", "high",
                                                                         "default")})
    for a in addresses:
        if local_name(a["c"]) not in out[a["r"]]["addresses"]:
            out[a["r"]]["addresses"].append(local_name(a["c"]))
    return sorted(out.values(), key=lambda d: (-(d["effectiveness"] or 0.0), d["remedy"]))


def _cases(store: Store, item: Item) -> list[dict[str, Any]]:
    """Cases that name the item directly (confirmed cause, applied remedy) or in a signature item."""
    rows = _rows(store, f"""SELECT DISTINCT ?case ?label ?p ?outcome WHERE {{ ?case a dt:Case .
        {{ ?case ?p {iri(item.iri)} }} UNION {{ ?case ?p ?x . ?x ?q {iri(item.iri)} FILTER(isBlank(?x)) }}
        OPTIONAL {{ ?case skos:prefLabel ?label }} OPTIONAL {{ ?case dt:outcome ?outcome }} }}""")
    sources = _sources(store, [r["case"] for r in rows])
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(r["case"], {"case": local_name(r["case"]), "label": r["label"],
                                       "outcome": _short(r["outcome"]), "as": [],
                                       "sources": sources.get(r["case"], [])})
        if _short(r["p"]) not in d["as"]:
            d["as"].append(_short(r["p"]))
    return sorted(out.values(), key=lambda d: d["case"])


def _calibration(store: Store, item: Item) -> list[dict[str, Any]]:
    """Calibration profiles of the item (a cause: its symptom rates) or naming it (a symptom: its rate)."""
    rows = _rows(store, f"""SELECT ?prof ?label ?cause ?sym ?v WHERE {{
        ?prof a dt:CalibrationProfile ; dt:profileOf ?cause ; dt:symptomRate ?r . ?r dt:symptom ?sym ; dt:value ?v .
        FILTER(?cause = {iri(item.iri)} || ?sym = {iri(item.iri)}) OPTIONAL {{ ?prof skos:prefLabel ?label }} }}
        ORDER BY ?prof ?sym""")
    sources = _sources(store, sorted({r["prof"] for r in rows}))
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(r["prof"], {"profile": local_name(r["prof"]), "label": r["label"],
                                       "cause": local_name(r["cause"]), "rates": {},
                                       "sources": sources.get(r["prof"], [])})
        d["rates"][local_name(r["sym"])] = r["v"]
    return list(out.values())


def judging_detectors(store: Store, item: Item) -> list[Detector]:
    """The registered detectors that judge the item (a symptom) or the symptoms it directly leads to."""
    symptoms = {item.name} if "Symptom" in item.kinds else {
        local_name(str(s)) for s in store.select(f"""SELECT DISTINCT ?s WHERE {{ ?l a dt:CausalLink ;
            dt:from {iri(item.iri)} ; dt:to ?s . ?s a dt:Symptom }}""").column("s")}
    return [d for d in DETECTORS if d.symptom in symptoms]


def _detectors(store: Store, item: Item, detectors: list[Detector]) -> list[dict[str, Any]]:
    marks: dict[str, list[str]] = defaultdict(list)
    symptoms = " ".join(iri(KB + s) for s in sorted({d.symptom for d in detectors}))
    if symptoms:
        for r in _rows(store, f"SELECT ?s ?d WHERE {{ VALUES ?s {{ {symptoms} }} ?s dt:detectedBy ?d }}"):
            marks[local_name(r["s"])].append(str(r["d"]))
    return [{"detector": d.id, "symptom": d.symptom, "dimension": d.dimension,
             "requires": [list(g) for g in d.requires], "thresholds": list(d.thresholds),
             "marked_in_kb": d.id in marks.get(d.symptom, [])} for d in detectors]


def _thresholds(store: Store, item: Item, detectors: list[Detector]) -> list[dict[str, Any]]:
    targets = sorted({item.iri, *(KB + d.symptom for d in detectors)})
    rows = _rows(store, """SELECT ?t ?k ?v ?to WHERE { ?t a dt:Threshold ; dt:thresholdKey ?k ; dt:value ?v .
        OPTIONAL { ?t dt:appliesTo ?to } }""")
    sources = _sources(store, sorted({r["t"] for r in rows}))
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        via = [f"appliesTo {local_name(r['to'])}"] if r["to"] in targets else []
        via += [f"read by {d.id}" for d in detectors if d.declares(r["k"])]
        if via:
            d = out.setdefault(r["k"], {"key": r["k"], "value": r["v"], "via": [], "sources": sources.get(r["t"], [])})
            d["via"] += [v for v in via if v not in d["via"]]
    return [out[k] for k in sorted(out)]


def _prevention_rules(store: Store, item: Item) -> list[dict[str, Any]]:
    """Prevention rules with a statement about the item (``dt:preventsCause`` it, learned from it, ...)."""
    rows = _rows(store, f"""SELECT ?rule ?id ?label ?p WHERE {{ ?rule a dt:PreventionRule ; ?p {iri(item.iri)} .
        OPTIONAL {{ ?rule dt:ruleId ?id }} OPTIONAL {{ ?rule skos:prefLabel ?label }} }} ORDER BY ?id ?rule""")
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(r["rule"], {"rule": r["id"] or local_name(r["rule"]), "label": r["label"], "as": []})
        d["as"].append(_short(r["p"]))
    return list(out.values())


def show(store: Store, name: str) -> dict[str, Any]:
    """Every section of the item called ``name`` (see the module docstring), as plain data."""
    item = resolve(store, name)
    detectors = judging_detectors(store, item)
    out = {"item": _item(store, item), "links_out": _links(store, item, "from"), "links_in": _links(store, item, "to"),
           "remedies": _remedies(store, item), "cases": _cases(store, item), "calibration": _calibration(store, item),
           "thresholds": _thresholds(store, item, detectors), "detectors": _detectors(store, item, detectors),
           "prevention_rules": _prevention_rules(store, item)}
    assert tuple(out) == SECTIONS
    return {k: _plain(v) for k, v in out.items()}


def _plain(value: Any) -> Any:
    """JSON-ready: numbers and strings as they are, any other literal as its Python value."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(to_python(value)) if not isinstance(value, Path) else str(value)
