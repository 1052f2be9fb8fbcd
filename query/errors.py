"""Errors of the tuning DSL: every problem with a query text is one of these (never another exception)."""

from __future__ import annotations

from collections.abc import Sequence

from debugtune.kg.errors import DebugtuneError


class DslError(DebugtuneError):
    """Base class of the DSL's errors; ``line``/``column`` point into the query text when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.line, self.column, self.detail = line, column, message
        where = "" if line is None else f"line {line}, column {column}: "
        super().__init__(where + message)

    def as_dict(self) -> dict[str, object]:
        return {"error": type(self).__name__, "message": str(self), "line": self.line, "column": self.column}


class DslSyntaxError(DslError):
    """A query that does not parse: names line, column, the offending token and what was expected."""

    def __init__(self, text: str, line: int, column: int, token: str, expected: Sequence[str]):
        self.text, self.token, self.expected = text, token, tuple(expected)
        shown = "end of query" if token == "" else repr(token)
        want = f"; expected {_one_of(self.expected)}" if self.expected else ""
        caret = _caret(text, line, column)
        super().__init__(f"unexpected {shown}{want}{caret}", line, column)

    def as_dict(self) -> dict[str, object]:
        return {**super().as_dict(), "token": self.token, "expected": list(self.expected)}


class DslNameError(DslError):
    """An identifier (cause, symptom, remedy, run, keyword value or field) that is not known."""

    def __init__(self, kind: str, name: str, suggestions: Sequence[str] = (), line: int | None = None,
                 column: int | None = None):
        self.kind, self.name, self.suggestions = kind, name, tuple(suggestions)
        hint = f"; did you mean {_one_of(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint}", line, column)

    def as_dict(self) -> dict[str, object]:
        return {**super().as_dict(), "kind": self.kind, "name": self.name, "suggestions": list(self.suggestions)}


class DslValueError(DslError):
    """A well-formed query with a value it cannot use (an operator a field does not take, a limit < 0, ...)."""


def _one_of(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]


def _caret(text: str, line: int, column: int) -> str:
    lines = text.splitlines() or [""]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"\n  {src}\n  {' ' * max(0, column - 1)}^"
