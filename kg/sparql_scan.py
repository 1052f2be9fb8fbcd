"""A light lexical scan of SPARQL text: keywords with their brace depth, skipping strings, IRIs and comments.

Enough to tell a query's form, whether it names its own dataset (FROM), where the WHERE clauses of
an update are (to add protocol ``USING`` clauses), and whether SERVICE is used — without a full parser.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from debugtune.kg.sparql import iri

_IRI = re.compile(r'<[^<>"{}|^`\\\x00-\x20]*>')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
QUERY_FORMS = ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")


@dataclass(frozen=True)
class Word:
    """A bare word of the text (upper-cased), where it starts and at which brace depth."""

    text: str
    start: int
    end: int
    depth: int


def _string_end(text: str, i: int) -> int:
    quote = text[i]
    long = text.startswith(quote * 3, i)
    j = i + (3 if long else 1)
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if long and text.startswith(quote * 3, j):
            return j + 3
        if not long and (c == quote or c == "\n"):
            return j + 1
        j += 1
    return len(text)


def words(text: str) -> list[Word]:
    """Keywords and names outside strings, IRIs and comments (not variables, not prefixed names)."""
    out: list[Word] = []
    depth, i, n = 0, 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif c in "\"'":
            i = _string_end(text, i)
        elif c == "<":
            m = _IRI.match(text, i)
            i = m.end() if m else i + 1
        elif c in "{(":
            depth += c == "{"
            i += 1
        elif c in "})":
            depth -= c == "}"
            i += 1
        elif c in "?$":
            m = _WORD.match(text, i + 1)
            i = m.end() if m else i + 1
        elif c.isalpha() or c == "_":
            m = _WORD.match(text, i)
            assert m is not None
            end = m.end()
            prefixed = end < n and text[end] == ":"
            while end < n and (text[end].isalnum() or text[end] in "_-.:%"):
                end += 1  # the rest of a prefixed name (ex:from) is not a keyword
            preceded = i > 0 and (text[i - 1] in ":@" or text[i - 1].isdigit())
            if not prefixed and not preceded:
                out.append(Word(m.group().upper(), i, m.end(), depth))
            i = end
        else:
            i += 1
    return out


def query_form(text: str) -> str | None:
    """SELECT, ASK, CONSTRUCT or DESCRIBE (the first at brace depth 0), or None."""
    return next((w.text for w in words(text) if w.depth == 0 and w.text in QUERY_FORMS), None)


def names_dataset(text: str) -> bool:
    """Whether a query has its own FROM / FROM NAMED clauses."""
    return any(w.depth == 0 and w.text == "FROM" for w in words(text))


def uses(text: str, keyword: str) -> bool:
    """Whether ``keyword`` occurs as a keyword anywhere (e.g. SERVICE)."""
    return any(w.text == keyword for w in words(text))


def _block_end(text: str, start: int) -> int:
    """The offset just after the ``{…}`` block opening at or after ``start``."""
    depth, i = 0, text.index("{", start)
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c == "<":
            m = _IRI.match(text, i)
            if m:
                i = m.end()
                continue
        if c == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl + 1
            continue
        depth += (c == "{") - (c == "}")
        i += 1
        if depth == 0:
            return i
    return len(text)


class DatasetConflict(ValueError):
    """An update with its own USING/WITH clauses got protocol using-graph-uri parameters too."""


def with_using(update: str, graphs: Sequence[str], named: Sequence[str]) -> str:
    """The update with ``USING <g>`` / ``USING NAMED <g>`` before every top-level WHERE.

    ``DELETE WHERE { P }`` (which takes no USING) is expanded to ``DELETE { P } USING … WHERE { P }``.
    Raises DatasetConflict when the update already has USING or WITH.
    """
    if not graphs and not named:
        return update
    ws = words(update)
    if any(w.depth == 0 and w.text in ("USING", "WITH") for w in ws):
        raise DatasetConflict("the update has USING/WITH clauses and using-graph-uri/using-named-graph-uri "
                              "parameters; give the dataset one way only")
    clause = "".join(f"USING {iri(g)} " for g in graphs) + "".join(f"USING NAMED {iri(g)} " for g in named)
    top = [w for w in ws if w.depth == 0]
    out, last = [], 0
    for k, w in enumerate(top):
        if w.text != "WHERE":
            continue
        if k > 0 and top[k - 1].text == "DELETE" and not update[top[k - 1].end:w.start].strip():
            end = _block_end(update, w.end)
            pattern = update[w.end:end]
            out.append(update[last:w.start] + pattern + " " + clause + "WHERE" + pattern)
            last = end
        else:
            out.append(update[last:w.start] + clause)
            last = w.start
    out.append(update[last:])
    return "".join(out)
