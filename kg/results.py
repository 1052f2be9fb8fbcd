"""Query results shared by every store backend: rows of pyoxigraph terms, a boolean, or triples."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyoxigraph as ox

from debugtune.kg.namespaces import XSD

Term = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple

_INTEGERS = {XSD + t for t in (
    "integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
    "nonPositiveInteger", "negativeInteger", "unsignedInt", "unsignedLong", "unsignedShort", "unsignedByte")}
_FLOATS = {XSD + "decimal", XSD + "double", XSD + "float"}


def to_python(term: Term | None) -> Any:
    """A plain Python value for a term: IRI → str, typed number → int/float, boolean → bool."""
    if term is None:
        return None
    if isinstance(term, ox.NamedNode):
        return term.value
    if isinstance(term, ox.BlankNode):
        return "_:" + term.value
    if isinstance(term, ox.Literal):
        dtype = term.datatype.value
        try:
            if dtype in _INTEGERS:
                return int(term.value)
            if dtype in _FLOATS:
                return float({"INF": "inf", "-INF": "-inf"}.get(term.value, term.value))
            if dtype == XSD + "boolean":
                return term.value in ("true", "1")
        except ValueError:
            return term.value
        return term.value
    return str(term)


@dataclass(frozen=True)
class SelectResult:
    """Rows of a SELECT query, in order; each cell is a pyoxigraph term or None (unbound)."""

    variables: tuple[str, ...]
    rows: tuple[tuple[Term | None, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.dicts())

    def dicts(self) -> list[dict[str, Any]]:
        """Rows as dicts of plain Python values (see :func:`to_python`)."""
        return [{v: to_python(c) for v, c in zip(self.variables, row, strict=True)} for row in self.rows]

    def column(self, variable: str) -> list[Any]:
        """One column as plain Python values."""
        i = self.variables.index(variable)
        return [to_python(row[i]) for row in self.rows]

    def scalar(self) -> Any:
        """The single value of a one-row, one-column result (None when empty)."""
        return to_python(self.rows[0][0]) if self.rows else None

    @staticmethod
    def from_solutions(solutions: ox.QuerySolutions) -> SelectResult:
        names = tuple(v.value for v in solutions.variables)
        rows = tuple(tuple(sol[i] for i in range(len(names))) for sol in solutions)
        return SelectResult(names, rows)


@dataclass(frozen=True)
class AskResult:
    """The answer of an ASK query."""

    value: bool

    def __bool__(self) -> bool:
        return self.value


@dataclass(frozen=True)
class GraphResult:
    """Triples of a CONSTRUCT or DESCRIBE query."""

    triples: tuple[ox.Triple, ...]

    def __len__(self) -> int:
        return len(self.triples)

    def __iter__(self) -> Iterator[ox.Triple]:
        return iter(self.triples)

    def serialize(self, fmt: ox.RdfFormat = ox.RdfFormat.TURTLE) -> bytes:
        return ox.serialize(self.triples, format=fmt) or b""


QueryResult = SelectResult | AskResult | GraphResult


def from_oxigraph(result: Any) -> QueryResult:
    """Convert a pyoxigraph query answer (solutions, boolean or triples) to our result objects."""
    if isinstance(result, ox.QuerySolutions):
        return SelectResult.from_solutions(result)
    if isinstance(result, ox.QueryBoolean):
        return AskResult(bool(result))
    return GraphResult(tuple(result))
