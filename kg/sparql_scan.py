"""What the endpoint reads off SPARQL text without parsing it: the query form, whether it names its own
dataset (FROM), and where the WHERE clauses of an update are (to add protocol ``USING`` clauses).

Built on the terminals of `sparql_lexer.tokens`; the SERVICE/LOAD and size checks are `sparql_guard`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from debugtune.kg.sparql import iri
from debugtune.kg.sparql_lexer import tokens

QUERY_FORMS = ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")


@dataclass(frozen=True)
class Word:
    """A bare word of the text (upper-cased), where it starts and at which brace depth."""

    text: str
    start: int
    end: int
    depth: int


def words(text: str) -> list[Word]:
    """Keywords and names outside strings, IRIs and comments (not variables, not prefixed names)."""
    return list(_words(text)) if len(text) <= 8192 else list(_scan_words(text))


@lru_cache(maxsize=1024)
def _words(text: str) -> tuple[Word, ...]:
    return _scan_words(text)


def _scan_words(text: str) -> tuple[Word, ...]:
    return tuple(Word(t.text.upper(), t.start, t.end, t.depth) for t in tokens(text) if t.kind == "word")


def query_form(text: str) -> str | None:
    """SELECT, ASK, CONSTRUCT or DESCRIBE (the first at brace depth 0), or None."""
    return next((w.text for w in words(text) if w.depth == 0 and w.text in QUERY_FORMS), None)


def names_dataset(text: str) -> bool:
    """Whether a query has its own FROM / FROM NAMED clauses."""
    return any(w.depth == 0 and w.text == "FROM" for w in words(text))


def _block_end(text: str, start: int) -> int:
    """The offset just after the ``{…}`` block opening at or after ``start``."""
    toks = [t for t in tokens(text) if t.start >= start]
    first = next(k for k, t in enumerate(toks) if t.text == "{")
    for t in toks[first + 1:]:
        if t.text == "}" and t.depth == toks[first].depth:
            return t.end
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
