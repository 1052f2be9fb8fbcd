"""The checks every SPARQL text from outside passes before Oxigraph parses it (endpoint, ``--raw-sparql``).

- **No federated fetch** unless the operator named the endpoint: ``SERVICE`` (queries and updates) and
  ``LOAD`` (updates) make the process fetch a URL. They are looked for, case-insensitively and with no
  word boundary (as Oxigraph's parser matches keywords), in the code of every reading of the text
  (`sparql_lexer.code_spans`); one is allowed only when it names, as a full ``<IRI>``, an endpoint in
  ``services``.
- **Bounds the parser survives**: Oxigraph parses and optimises recursively, and deep nesting or long
  chains of operators overflow its stack and kill the process (about 2,200 nested braces, 900
  nested function calls, 2,500 BINDs or MINUSes in a row). The text may be at most ``max_chars``
  long, nest brackets at most ``max_depth`` deep and hold at most ``max_terms`` keywords and operators.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from debugtune.kg.errors import SparqlRefused
from debugtune.kg.sparql_lexer import _CHARS_U, _UCHAR, CodeView, code_spans, iri_content_ok, line_col, tokens

_SERVICE = re.compile("service", re.IGNORECASE)
_LOAD = re.compile("load", re.IGNORECASE)
_SILENT = re.compile(r"silent", re.IGNORECASE)
_GAP = re.compile(r"(?:[ \t\r\n]+|#[^\r\n]*)*")
_OPERATORS = frozenset(("||", "&&", "!", "+", "-", "*", "/", "=", "!=", "<", ">", "<=", ">=", "^", "|"))
_NOT_TERMS = frozenset(("A", "TRUE", "FALSE", "UNDEF"))
_VARNAME_CHAR = re.compile(f"[{_CHARS_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]")


@dataclass(frozen=True)
class SparqlBounds:
    """What a SPARQL text from outside may be: its size, nesting, operators and the SERVICE endpoints allowed."""

    max_chars: int = 4 * 2**20
    max_depth: int = 64
    max_terms: int = 1_000
    services: tuple[str, ...] = ()
    """Endpoints (absolute IRIs, compared exactly) that SERVICE (and LOAD) may name; none by default."""


def _gap_end(text: str, pos: int) -> int:
    """Where the whitespace and comments from ``pos`` end (``_GAP`` matches the empty string too)."""
    m = _GAP.match(text, pos)
    return m.end() if m else pos


def _target(text: str, pos: int) -> str | None:
    """The ``<IRI>`` a SERVICE/LOAD keyword ending at ``pos`` names (after an optional SILENT), if any."""
    pos = _gap_end(text, pos)
    m = _SILENT.match(text, pos)
    if m:
        pos = _gap_end(text, m.end())
    if not text.startswith("<", pos):
        return None
    close = text.find(">", pos + 1)
    if close < 0 or not iri_content_ok(text[pos + 1:close]):
        return None
    return _UCHAR.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text[pos + 1:close])


def _in_variable(text: str, pos: int) -> bool:
    """Whether ``pos`` is inside a variable's name (``?service``): a name after ``?`` never reads as a keyword."""
    start = pos
    while start > 0 and _VARNAME_CHAR.match(text[start - 1]):
        start -= 1
    return start > 0 and text[start - 1] in "?$" and (start < 2 or text[start - 2] != "\\")


def _fetches(text: str, view: CodeView, update: bool) -> list[tuple[str, int]]:
    """(keyword, offset) of every SERVICE (and, in an update, LOAD) in code."""
    found = [("SERVICE", m.start()) for m in _SERVICE.finditer(text)
             if view.is_code(m.start()) and not _in_variable(text, m.start())]
    if update:
        found += [("LOAD", m.start()) for m in _LOAD.finditer(text) if view.is_code(m.start())
                  and (m.start() == 0 or text[m.start() - 1] in " \t\r\n;>")]
    return sorted(found, key=lambda f: f[1])


def _refuse(text: str, pos: int, message: str, status: int = 400) -> SparqlRefused:
    line, col = line_col(text, pos)
    return SparqlRefused(message, status=status, line=line, column=col)


def check_sparql(text: str, *, update: bool = False, bounds: SparqlBounds = SparqlBounds()) -> None:
    """Raise `SparqlRefused` (status 400 or 403) unless ``text`` passes every check of the module docstring.

    The verdict on a short text is remembered (endpoints see the same queries again and again).
    """
    refused = _verdict(text, update, bounds) if len(text) <= _CACHED_CHARS else _check(text, update, bounds)
    if refused is not None:
        raise SparqlRefused(refused.detail, status=refused.status, line=refused.line, column=refused.column)


_CACHED_CHARS = 8192


@lru_cache(maxsize=2048)
def _verdict(text: str, update: bool, bounds: SparqlBounds) -> SparqlRefused | None:
    return _check(text, update, bounds)


def _check(text: str, update: bool, bounds: SparqlBounds) -> SparqlRefused | None:
    try:
        _checks(text, update, bounds)
    except SparqlRefused as err:
        err.__traceback__ = None
        return err
    return None


def _checks(text: str, update: bool, bounds: SparqlBounds) -> None:
    if len(text) > bounds.max_chars:
        raise SparqlRefused(f"the {'update' if update else 'query'} is {len(text)} characters long; the limit "
                            f"is {bounds.max_chars}")
    view = code_spans(text, bounds.max_depth)
    if view.over_at is not None:
        raise _refuse(text, view.over_at, f"brackets nest more than {bounds.max_depth} deep (the limit that "
                                             "keeps the SPARQL parser within its stack)")
    allowed: Sequence[str] = bounds.services
    for keyword, pos in _fetches(text, view, update):
        target = _target(text, pos + len(keyword))
        if target is None or target not in allowed:
            what = "federated query" if keyword == "SERVICE" else "loading a URL"
            hint = (f"allowed endpoints: {', '.join(allowed)}" if allowed else
                    "no endpoint is allowed (--allow-service IRI)")
            raise _refuse(text, pos, f"{keyword} ({what}) of {('<' + target + '>') if target else 'this target'} is "
                                     f"refused: it would make the server fetch a URL; {hint}. (A name containing "
                                     f"'{keyword.lower()}' outside a string or <IRI> reads as the keyword too.)",
                          status=403)
    terms = 0
    for tok in tokens(text):
        if (tok.kind == "word" and tok.text.upper() not in _NOT_TERMS) or (
                tok.kind == "punct" and tok.text in _OPERATORS):
            terms += 1
            if terms > bounds.max_terms:
                raise _refuse(text, tok.start, f"more than {bounds.max_terms} keywords and operators (the limit "
                                               "that keeps the SPARQL parser within its stack)")
