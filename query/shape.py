"""Result shaping: SPARQL rows and engine objects → a `DslResult` of plain, JSON-ready rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from debugtune.kg.namespaces import local_name
from debugtune.kg.records import Suggestion


@dataclass(frozen=True)
class DslResult:
    """What a DSL query returns: named columns, rows of plain values, and the SPARQL that ran.

    ``python_step`` says what Python computed after the SPARQL (ranking, similarity), empty when the
    SPARQL answer is the result. ``details`` holds a header for ``explain``; ``notes`` say why a
    result is empty when that is not obvious.
    """

    query: str
    kind: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    sparql: tuple[str, ...]
    python_step: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    def as_dict(self) -> dict[str, Any]:
        return {"query": self.query, "kind": self.kind, "columns": list(self.columns),
                "rows": [dict(r) for r in self.rows], "details": self.details, "notes": list(self.notes),
                "sparql": list(self.sparql), "python_step": self.python_step}


Converter = Callable[[Any], Any]


def short(value: Any) -> Any:
    """A knowledge-base IRI → its local name; other values unchanged."""
    return local_name(value) if isinstance(value, str) and value.startswith(("http://", "https://")) else value


def keyword_of(keywords: Mapping[str, str]) -> Converter:
    """IRI → its DSL keyword (``dt:GradientFlow`` → ``gradient``) using an IRI → keyword map."""
    return lambda v: keywords.get(v, short(v)) if v is not None else None


def json_object(value: Any) -> Any:
    """A JSON text → the object (left as text when it does not parse)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def pairs(value: Any) -> Any:
    """``"a=1, b=2"`` (a GROUP_CONCAT) → {"a": 1.0, "b": 2.0}."""
    if not isinstance(value, str) or not value:
        return {}
    out: dict[str, Any] = {}
    for item in value.split(", "):
        key, _, num = item.partition("=")
        try:
            out[key] = float(num)
        except ValueError:
            out[key] = num
    return out


def shape_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str],
               convert: Mapping[str, Converter] | None = None) -> tuple[dict[str, Any], ...]:
    """Keep ``columns`` of each row and convert values (default: IRIs to local names)."""
    convert = convert or {}
    return tuple({c: convert.get(c, short)(r.get(c)) for c in columns} for r in rows)


SUGGESTION_COLUMNS = ("rank", "remedy", "label", "score", "effectiveness", "cost", "risk", "success_rate",
                      "addresses", "parameters", "config_changes", "cases")


def suggestion_rows(suggestions: Sequence[Suggestion]) -> tuple[dict[str, Any], ...]:
    """One row per suggestion, parameters and config changes as plain dicts."""
    return tuple({"rank": n, "remedy": s.remedy, "label": s.label, "score": s.score,
                  "effectiveness": s.effectiveness, "cost": s.cost, "risk": s.risk, "success_rate": s.success_rate,
                  "addresses": list(s.addresses), "parameters": [asdict(p) for p in s.parameters],
                  "config_changes": [asdict(c) for c in s.config_changes], "cases": list(s.cases)}
                 for n, s in enumerate(suggestions, 1))
