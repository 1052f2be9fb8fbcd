"""Text → AST: the Lark LALR parser of `grammar.lark` and a transformer building `query.ast` nodes."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from debugtune.query import ast
from debugtune.query.clauses import MAX_LIMIT
from debugtune.query.errors import DslError, DslSyntaxError, DslValueError

GRAMMAR = Path(__file__).with_name("grammar.lark")
MAX_LENGTH = 10_000
"""Longest query text accepted (characters)."""

_TERMINAL_TEXT = {
    "RUN_ID": "a run id", "STRING": "a quoted string", "NAME": "a name", "NUMBER": "a number",
    "INT": "a whole number", "COMPARISON": "a comparison (=, !=, <, <=, >, >=)", "DIRECTION": "asc or desc",
    "UNIT": "card_hours", "COMMA": "','", "$END": "end of query",
}


@cache
def lark_parser() -> Lark:
    """The compiled LALR parser (built once per process)."""
    return Lark(GRAMMAR.read_text(encoding="utf-8"), parser="lalr", maybe_placeholders=False)


def keywords() -> list[str]:
    """Every keyword of the language, lower case (for completion and docs)."""
    out = []
    for t in lark_parser().terminals:
        if t.pattern.type == "str" and t.pattern.value.isalpha():
            out.append(t.pattern.value.lower())
    return sorted(out + ["asc", "desc", "card_hours"])


def _expected_text(names: set[str]) -> list[str]:
    keyword = {t.name: t.pattern.value.lower() for t in lark_parser().terminals if t.pattern.type == "str"}
    return sorted({_TERMINAL_TEXT.get(n) or keyword.get(n) or n.lower() for n in names})


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _syntax_error(text: str, err: UnexpectedInput) -> DslSyntaxError:
    if isinstance(err, UnexpectedCharacters):
        return DslSyntaxError(text, err.line, err.column, text[err.pos_in_stream] if err.pos_in_stream is not None
                              else "", _expected_text(set(err.allowed or ())))
    if isinstance(err, UnexpectedToken) and err.token.type != "$END":
        return DslSyntaxError(text, err.line, err.column, str(err.token), _expected_text(set(err.expected)))
    expected = set(getattr(err, "expected", ()) or ())
    line, column = _end_position(text)
    return DslSyntaxError(text, line, column, "", _expected_text(expected))


def _pos(tok: Token) -> ast.Pos:
    return ast.Pos(tok.line or 1, tok.column or 1)


def _at(tok: Token) -> tuple[int, int]:
    return tok.line or 1, tok.column or 1


def _finite(tok: Token) -> float:
    """The number a NUMBER token holds; DslValueError at the token when it is not finite (``1e999``)."""
    value = float(tok)
    if value != value or value in (float("inf"), float("-inf")):
        raise DslValueError(f"the number {str(tok)[:20]} is out of range", *_at(tok))
    return value


def _offset_position(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def unquote(tok: str) -> str:
    """The text of a quoted STRING token (backslash escapes removed)."""
    return re.sub(r"\\(.)", r"\1", tok[1:-1])


def _tokens(items: list[Any], kind: str) -> list[Token]:
    return [t for t in items if isinstance(t, Token) and t.type == kind]


def _clauses(items: list[Any]) -> dict[str, Any]:
    return {k: v for it in items if isinstance(it, tuple) and len(it) == 2 and isinstance(it[0], str)
            for k, v in [it]}


class _ToAst(Transformer[Token, ast.Query]):
    """Builds the frozen AST; clause rules return ``(name, value)`` pairs the query rules collect."""

    def start(self, items: list[Any]) -> ast.Query:
        query: ast.Query = items[0]
        return query

    def run_ref(self, items: list[Any]) -> ast.RunRef:
        tok = items[1]
        if tok.type == "STRING":
            return ast.RunRef(None, unquote(tok), _pos(tok))
        return ast.RunRef(str(tok), None, _pos(tok))

    def ident(self, items: list[Any]) -> ast.Ident:
        tok = items[0]
        quoted = tok.type == "STRING"
        return ast.Ident(unquote(tok) if quoted else str(tok), quoted, _pos(tok))

    def number(self, items: list[Any]) -> ast.Number:
        return ast.Number(_finite(items[0]), str(items[1]).lower() if len(items) > 1 else None, str(items[0]))

    def name(self, items: list[Any]) -> ast.Name:
        return ast.Name(str(items[0]))

    def text(self, items: list[Any]) -> ast.Text:
        return ast.Text(unquote(items[0]))

    def condition(self, items: list[Any]) -> ast.Condition:
        return ast.Condition(str(items[0]), str(items[1]), items[2], _pos(items[0]))

    def where_clause(self, items: list[Any]) -> tuple[str, Any]:
        return ("where", tuple(i for i in items if isinstance(i, ast.Condition)))

    def order_key(self, items: list[Any]) -> ast.OrderKey:
        direction = _tokens(items, "DIRECTION")
        return ast.OrderKey(str(items[0]), None if not direction else str(direction[0]).lower() == "desc",
                            _pos(items[0]))

    def order_clause(self, items: list[Any]) -> tuple[str, Any]:
        return ("order", tuple(i for i in items if isinstance(i, ast.OrderKey)))

    def criterion(self, items: list[Any]) -> ast.Criterion:
        weight = _tokens(items, "NUMBER")
        return ast.Criterion(str(items[0]), _finite(weight[0]) if weight else None, _pos(items[0]))

    def rank_clause(self, items: list[Any]) -> tuple[str, Any]:
        return ("rank", tuple(i for i in items if isinstance(i, ast.Criterion)))

    def limit_clause(self, items: list[Any]) -> tuple[str, Any]:
        tok = items[1]
        if len(str(tok).lstrip("0")) > len(str(MAX_LIMIT)) or int(tok) > MAX_LIMIT:
            raise DslValueError(f"limit {str(tok)[:20]} is above the maximum {MAX_LIMIT}", *_at(tok))
        return ("limit", int(tok))

    def threshold_clause(self, items: list[Any]) -> tuple[str, Any]:
        value = _finite(items[1])
        if not 0 <= value <= 1:
            raise DslValueError(f"a similarity threshold lies in [0, 1], got {items[1]}", *_at(items[1]))
        return ("threshold", value)

    def _run(self, items: list[Any]) -> ast.RunRef:
        return next(i for i in items if isinstance(i, ast.RunRef))

    def _ident(self, items: list[Any]) -> ast.Ident:
        return next(i for i in items if isinstance(i, ast.Ident))

    def symptoms_q(self, items: list[Any]) -> ast.SymptomsQuery:
        return ast.SymptomsQuery(self._run(items), **_clauses(items))

    def causes_q(self, items: list[Any]) -> ast.CausesQuery:
        return ast.CausesQuery(self._run(items), **_clauses(items))

    def explain_q(self, items: list[Any]) -> ast.ExplainQuery:
        return ast.ExplainQuery(self._ident(items), self._run(items))

    def suggest_q(self, items: list[Any]) -> ast.SuggestQuery:
        return ast.SuggestQuery(self._run(items), **_clauses(items))

    def remedies_q(self, items: list[Any]) -> ast.RemediesQuery:
        return ast.RemediesQuery(self._ident(items), **_clauses(items))

    def cases_q(self, items: list[Any]) -> ast.CasesQuery:
        return ast.CasesQuery(self._run(items), **_clauses(items))

    def experiments_q(self, items: list[Any]) -> ast.ExperimentsQuery:
        return ast.ExperimentsQuery(self._ident(items), **_clauses(items))

    def runs_q(self, items: list[Any]) -> ast.RunsQuery:
        return ast.RunsQuery(**_clauses(items))


def parse(text: str) -> ast.Query:
    """Parse one DSL query; raises DslSyntaxError (line, column, token, expected) on bad input."""
    if not isinstance(text, str):
        raise DslValueError(f"a query is text, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise DslValueError(f"the query is {len(text)} characters long; the limit is {MAX_LENGTH}",
                            *_offset_position(text, MAX_LENGTH))
    bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:  # a byte that is not UTF-8 (the command line hands it over as a lone surrogate)
        raise DslValueError("the query is not valid UTF-8 text here", *_offset_position(text, bad))
    try:
        tree = lark_parser().parse(text)
    except (UnexpectedToken, UnexpectedCharacters, UnexpectedEOF) as err:
        raise _syntax_error(text, err) from None
    try:
        return _ToAst().transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, DslError):
            raise err.orig_exc from None
        raise DslValueError(f"cannot read the query: {err.orig_exc}") from None
