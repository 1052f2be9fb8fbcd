"""The SPARQL the suggestion stage runs (the DSL prints the same text with ``--sparql``).

Every value is bound through `kg.sparql.iri` / `literal` or a VALUES block, never concatenated raw.
"""

from __future__ import annotations

from collections.abc import Iterable

from debugtune.kg.namespaces import run_base, run_graph
from debugtune.kg.sparql import iri, literal

COUNTS = """OPTIONAL { SELECT ?remedy (SUM(?s) AS ?successes) WHERE { GRAPH ?gs { ?remedy dt:successCount ?s } }
             GROUP BY ?remedy }
  OPTIONAL { SELECT ?remedy (SUM(?n) AS ?failures) WHERE { GRAPH ?gf { ?remedy dt:failureCount ?n } }
             GROUP BY ?remedy }"""
"""Patterns binding ?successes and ?failures of ?remedy, summed over every graph that records them."""

MAX_RISK = "{ SELECT (MAX(?r) AS ?maxRiskRank) WHERE { ?level a dt:RiskLevel ; dt:rank ?r } }"
"""A pattern binding ?maxRiskRank, the rank of the highest risk level in the ontology."""


def label_of(var: str, cls: str) -> str:
    """An OPTIONAL binding ``?<var>Label`` to one skos:prefLabel of ``?<var>`` (a dt:<cls>)."""
    return (f"OPTIONAL {{ SELECT ?{var} (SAMPLE(?l_{var}) AS ?{var}Label) WHERE {{ ?{var} a dt:{cls} ; "
            f"skos:prefLabel ?l_{var} }} GROUP BY ?{var} }}")


def _values(var: str, iris: Iterable[str]) -> str:
    items = " ".join(iri(x) for x in sorted(set(iris)))
    return f"VALUES ?{var} {{ {items} }}"


def run_exists_sparql(run_id: str) -> str:
    """ASK whether a run with this id has a graph and a dt:TrainingRun node."""
    return f"ASK {{ GRAPH {iri(run_graph(run_id))} {{ {iri(run_base(run_id))} a dt:TrainingRun }} }}"


_BROADEST = """
  OPTIONAL { ?found skos:broader ?broader FILTER NOT EXISTS { ?broader skos:broader ?any } }
  BIND(COALESCE(?broader, ?found) AS ?symptom)"""
"""Signatures compare symptoms at their broadest concept, so a narrower finding (UpdateRatioTooHigh)
matches a case recorded with the broader symptom (UpdateRatioAbnormal)."""


def signature_sparql(run_id: str) -> str:
    """The symptom, location kind and severity of every finding of a run."""
    return f"""SELECT ?symptom ?location ?severity WHERE {{ GRAPH {iri(run_graph(run_id))} {{
  ?f a dt:Finding ; dt:symptom ?found ; dt:locationKind ?location ; dt:severity ?severity .
}} {_BROADEST} }}"""


def candidate_sparql(run_id: str, *, max_risk_rank: int | None = None, max_cost: float | None = None,
                     max_experiments: int | None = None, min_effectiveness: float | None = None) -> str:
    """Remedies addressing a cause hypothesised for the run, with the numbers the ranking needs.

    One row per (remedy, hypothesised cause); success/failure counts are summed over every graph
    that records them (the knowledge base, the local feedback graph, imported packages).
    """
    filters = []
    if max_risk_rank is not None:
        filters.append(f"?riskRank <= {literal(int(max_risk_rank))}")
    if max_cost is not None:
        filters.append(f"?cost <= {literal(float(max_cost))}")
    if max_experiments is not None:
        filters.append(f"COALESCE(?maxExperiments, 1) <= {literal(int(max_experiments))}")
    if min_effectiveness is not None:
        filters.append(f"?effectiveness >= {literal(float(min_effectiveness))}")
    where = f"\n  FILTER({' && '.join(filters)})" if filters else ""
    return f"""SELECT ?remedy ?cause ?confidence ?effectiveness ?cost ?risk ?riskRank ?maxRiskRank ?maxExperiments
       ?successes ?failures WHERE {{
  GRAPH {iri(run_graph(run_id))} {{ ?h a dt:Hypothesis ; dt:cause ?cause ; dt:confidence ?confidence }}
  ?remedy a dt:Remedy ; dt:addresses ?cause ; dt:effectiveness ?effectiveness ; dt:cost ?cost ;
          dt:hasRisk ?riskLevel .
  ?riskLevel dt:rank ?riskRank ; dt:keyword ?risk .
  OPTIONAL {{ ?remedy dt:maxExperiments ?maxExperiments }}
  {MAX_RISK}
  {COUNTS}{where}
}}"""


def cases_sparql(causes: Iterable[str] | None = None) -> str:
    """Every case in any named graph with its signature items, confirmed cause, remedies and outcome.

    With ``causes`` (IRIs), only cases whose confirmed cause is one of them. A case is read from the
    graph that holds it (``GRAPH ?g``), not from the union of all graphs: over the union, each copy of
    a case in another graph multiplies the rows of every pattern, so the query grew as a power of the
    copies (issue 18); per graph it is linear in the cases. Only the symptom hierarchy is read from
    the union. (Pattern order matters to Oxigraph: the selective patterns come first.)
    """
    if causes is None:
        first, confirmed, optional_cause = "", "", "\n    OPTIONAL { ?case dt:confirmedCause ?cause }"
    else:
        first, confirmed, optional_cause = f"{_values('cause', causes)}\n  ", " ; dt:confirmedCause ?cause", ""
    return f"""SELECT ?g ?case ?label ?cause ?remedy ?outcome ?symptom ?location ?severity WHERE {{
  {first}GRAPH ?g {{
    ?case a dt:Case{confirmed} ; dt:signature ?item .
    ?item dt:symptom ?found ; dt:locationKind ?location ; dt:severity ?severity .{optional_cause}
    OPTIONAL {{ ?case skos:prefLabel ?label }}
    OPTIONAL {{ ?case dt:appliedRemedy ?remedy }}
    OPTIONAL {{ ?case dt:outcome ?outcome }}
  }} {_BROADEST}
}}"""


def remedy_sparql(remedies: Iterable[str]) -> str:
    """Label, numbers, risk, addressed causes and success counts of the given remedies (IRIs)."""
    return f"""SELECT ?remedy ?label ?cause ?effectiveness ?cost ?risk ?riskRank ?maxRiskRank ?maxExperiments
       ?successes ?failures WHERE {{
  {_values('remedy', remedies)}
  ?remedy a dt:Remedy ; dt:effectiveness ?effectiveness ; dt:cost ?cost ; dt:hasRisk ?riskLevel .
  ?riskLevel dt:rank ?riskRank ; dt:keyword ?risk .
  OPTIONAL {{ ?remedy dt:addresses ?cause }}
  OPTIONAL {{ ?remedy skos:prefLabel ?label }}
  OPTIONAL {{ ?remedy dt:maxExperiments ?maxExperiments }}
  {MAX_RISK}
  {COUNTS}
}}"""


def parameters_sparql(remedies: Iterable[str]) -> str:
    """The tuning parameters of the given remedies (IRIs), one row per choice of a categorical one."""
    return f"""SELECT ?remedy ?name ?kind ?scale ?default ?low ?high ?choice WHERE {{
  {_values('remedy', remedies)}
  ?remedy dt:tuningParameter ?p . ?p dt:paramName ?name ; dt:parameterKind ?kindNode ; dt:defaultValue ?default .
  ?kindNode dt:keyword ?kind .
  OPTIONAL {{ ?p dt:scale ?scaleNode . ?scaleNode dt:keyword ?scale }}
  OPTIONAL {{ ?p dt:minValue ?low }}
  OPTIONAL {{ ?p dt:maxValue ?high }}
  OPTIONAL {{ ?p dt:choice ?choice }}
}}"""


def config_sparql(remedies: Iterable[str]) -> str:
    """The configuration changes of the given remedies (IRIs)."""
    return f"""SELECT ?remedy ?key ?to ?from WHERE {{
  {_values('remedy', remedies)}
  ?remedy dt:configChange ?c . ?c dt:configKey ?key ; dt:toValue ?to .
  OPTIONAL {{ ?c dt:fromValue ?from }}
}}"""


def known_sparql(cls: str) -> str:
    """IRIs of every instance of a dt: class (for "did you mean" hints)."""
    return f"SELECT DISTINCT ?x WHERE {{ ?x a dt:{cls} }}"
