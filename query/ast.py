"""The DSL's abstract syntax: frozen dataclasses, one per query form (built by `query.parser`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pos:
    """Where a piece of the query starts (1-based line and column)."""

    line: int
    column: int


@dataclass(frozen=True)
class RunRef:
    """A run by id (``moe-1``) or by quoted run directory (``"runs/moe-1"``)."""

    id: str | None
    path: str | None
    pos: Pos = field(compare=False)


@dataclass(frozen=True)
class Ident:
    """A cause, symptom or remedy: its local name, or a quoted label."""

    text: str
    quoted: bool
    pos: Pos = field(compare=False)


@dataclass(frozen=True)
class Number:
    value: float
    unit: str | None = None
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class Name:
    text: str


@dataclass(frozen=True)
class Text:
    text: str


Value = Number | Name | Text


@dataclass(frozen=True)
class Condition:
    """``field op value`` of a where clause."""

    field: str
    op: str
    value: Value
    pos: Pos = dataclasses.field(compare=False)


@dataclass(frozen=True)
class OrderKey:
    field: str
    descending: bool | None
    pos: Pos = dataclasses.field(compare=False)


@dataclass(frozen=True)
class Criterion:
    """One ``rank by`` criterion with its weight (None: the knowledge base's default)."""

    name: str
    weight: float | None
    pos: Pos = field(compare=False)


@dataclass(frozen=True)
class SymptomsQuery:
    run: RunRef
    where: tuple[Condition, ...] = ()
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class CausesQuery:
    run: RunRef
    where: tuple[Condition, ...] = ()
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class ExplainQuery:
    cause: Ident
    run: RunRef


@dataclass(frozen=True)
class SuggestQuery:
    run: RunRef
    where: tuple[Condition, ...] = ()
    rank: tuple[Criterion, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class RemediesQuery:
    cause: Ident
    where: tuple[Condition, ...] = ()
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class CasesQuery:
    run: RunRef
    threshold: float | None = None
    limit: int | None = None


@dataclass(frozen=True)
class ExperimentsQuery:
    remedy: Ident
    where: tuple[Condition, ...] = ()
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


@dataclass(frozen=True)
class RunsQuery:
    order: tuple[OrderKey, ...] = ()
    limit: int | None = None


Query = (SymptomsQuery | CausesQuery | ExplainQuery | SuggestQuery | RemediesQuery | CasesQuery
         | ExperimentsQuery | RunsQuery)
