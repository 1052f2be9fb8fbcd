"""Where, order and limit clauses: the fields each query form accepts and their SPARQL.

Field names, variables and operators come from the tables here, never from the query text; values
become SPARQL only as IRIs resolved against the graph or through `kg.sparql.literal`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from debugtune.kg.sparql import iri, literal
from debugtune.query import ast
from debugtune.query.errors import DslNameError, DslValueError
from debugtune.query.resolve import Vocabulary, suggestions

MAX_LIMIT = 1_000_000
ALL_OPS = ("=", "!=", "<", "<=", ">", ">=")
EQ_OPS = ("=", "!=")
UPPER_OPS = ("<=", "<")


@dataclass(frozen=True)
class FieldSpec:
    """A field a where/order clause may name: its SPARQL variable, value kind and operators."""

    var: str
    kind: str
    ops: tuple[str, ...] = ALL_OPS
    unit: bool = False
    order_var: str = ""


SYMPTOM_FIELDS = {
    "dimension": FieldSpec("dimension", "keyword:Dimension", EQ_OPS),
    "symptom": FieldSpec("symptom", "item:Symptom", EQ_OPS),
    "location": FieldSpec("location", "keyword:LocationKind", EQ_OPS),
    "severity": FieldSpec("severity", "number"), "onset": FieldSpec("onset", "number"),
    "end": FieldSpec("end", "number"), "entity": FieldSpec("entity", "text", EQ_OPS),
    "detector": FieldSpec("detector", "text", EQ_OPS), "id": FieldSpec("id", "text", EQ_OPS),
}
CAUSE_FIELDS = {
    "confidence": FieldSpec("confidence", "number"), "rank": FieldSpec("rank", "number"),
    "cause": FieldSpec("cause", "item:Cause", EQ_OPS),
}
REMEDY_FIELDS = {
    "effectiveness": FieldSpec("effectiveness", "number"), "cost": FieldSpec("cost", "number", unit=True),
    "risk": FieldSpec("riskRank", "rank:RiskLevel"), "success": FieldSpec("success_rate", "number"),
    "remedy": FieldSpec("remedy", "item:Remedy", EQ_OPS),
}
EXPERIMENT_FIELDS = {
    "outcome": FieldSpec("outcomeNode", "keyword:Outcome", EQ_OPS, order_var="outcome"),
    "status": FieldSpec("statusNode", "keyword:ExperimentStatus", EQ_OPS, order_var="status"),
    "cost": FieldSpec("cost", "number", unit=True), "seed": FieldSpec("seed", "number"),
    "run": FieldSpec("run", "text", EQ_OPS), "experiment": FieldSpec("experiment", "text", EQ_OPS),
}
RUN_FIELDS = {"run": FieldSpec("run", "text"), "findings": FieldSpec("findings", "number"),
              "confidence": FieldSpec("confidence", "number"), "steps": FieldSpec("steps", "number")}
SUGGEST_FIELDS = {"risk": FieldSpec("", "keyword:RiskLevel", UPPER_OPS),
                  "cost": FieldSpec("", "number", UPPER_OPS, True), "experiments": FieldSpec("", "number", UPPER_OPS)}


def field_spec(specs: Mapping[str, FieldSpec], name: str, what: str, pos: ast.Pos) -> FieldSpec:
    spec = specs.get(name.lower())
    if spec is None:
        raise DslNameError(f"field of {what}", name, suggestions(name, specs) or sorted(specs), pos.line, pos.column)
    return spec


def number_value(c: ast.Condition, spec: FieldSpec) -> float:
    if not isinstance(c.value, ast.Number):
        raise DslValueError(f"{c.field} compares with a number", c.pos.line, c.pos.column)
    if c.value.unit and not spec.unit:
        raise DslValueError(f"{c.field} takes no unit ({c.value.unit})", c.pos.line, c.pos.column)
    return c.value.value


def word_value(c: ast.Condition) -> ast.Ident:
    if isinstance(c.value, ast.Number):
        raise DslValueError(f"{c.field} compares with a name, not a number", c.pos.line, c.pos.column)
    return ast.Ident(c.value.text, isinstance(c.value, ast.Text), c.pos)


def number_literal(x: float) -> str:
    return literal(int(x)) if x.is_integer() and abs(x) < 2**63 else literal(x)


def where_clause(conds: Sequence[ast.Condition], specs: Mapping[str, FieldSpec], what: str,
           vocab: Vocabulary) -> tuple[str, str]:
    """Extra patterns and the FILTER line for a where clause."""
    patterns, filters = [], []
    for n, c in enumerate(conds):
        spec = field_spec(specs, c.field, what, c.pos)
        if c.op not in spec.ops:
            raise DslValueError(f"{c.field} takes {', '.join(spec.ops)}, not {c.op}", c.pos.line, c.pos.column)
        kind, _, cls = spec.kind.partition(":")
        if kind == "number":
            filters.append(f"?{spec.var} {c.op} {number_literal(number_value(c, spec))}")
        elif kind == "text":
            word = c.value.text if isinstance(c.value, ast.Number) else word_value(c).text
            filters.append(f"STR(?{spec.var}) {c.op} {literal(word)}")
        elif kind == "item":
            filters.append(f"?{spec.var} {c.op} {iri(vocab.resolve(cls, word_value(c)))}")
        elif kind == "keyword":
            filters.append(f"?{spec.var} {c.op} {iri(vocab.keyword(cls, word_value(c).text, c.field, c.pos))}")
        else:  # rank: compare the ordinal rank of a keyword individual
            level = vocab.keyword(cls, word_value(c).text, c.field, c.pos)
            patterns.append(f"{iri(level)} dt:rank ?limit{n} .")
            filters.append(f"?{spec.var} {c.op} ?limit{n}")
    text = "\n  ".join(patterns)
    return (f"\n  {text}" if text else ""), (f"\n  FILTER({' && '.join(filters)})" if filters else "")


def order_clause(keys: Sequence[ast.OrderKey], specs: Mapping[str, FieldSpec], what: str, default: str,
           tiebreak: str) -> str:
    if not keys:
        return f"ORDER BY {default} {tiebreak}"
    parts = []
    for k in keys:
        spec = field_spec(specs, k.field, what, k.pos)
        var = "?" + (spec.order_var or spec.var)
        parts.append(f"DESC({var})" if k.descending else var)
    return "ORDER BY " + " ".join(parts) + " " + tiebreak


def limit_clause(limit: int | None) -> str:
    if limit is None:
        return ""
    if limit > MAX_LIMIT:
        raise DslValueError(f"limit {limit} is above the maximum {MAX_LIMIT}")
    return f"\nLIMIT {limit}"
