"""Lexing SPARQL text the way Oxigraph's parser reads it: strings, IRIs, comments, names, numbers, punctuation.

Two views of the same terminals (SPARQL 1.1 §19.8, with the PN_LOCAL escapes ``\\'`` and ``\\#``):

- `tokens` is the one reading a spec tokeniser gives (longest match: ``<…>`` is an IRI whenever it
  can be one). Enough to tell a query's form or find its top-level WHERE clauses.
- `code_spans` is for the guard. Oxigraph's parser is a PEG without a tokeniser: a keyword is matched
  case-insensitively wherever the grammar expects one, with no word boundary (``SERVICE:x``,
  ``1SERVICE``), and ``<`` is an IRI or the less-than operator depending on where the parse is, so
  ``?a<?b&&'>x'`` opens a string the longest-match reading never sees. `code_spans` follows every
  reading of each ambiguous ``<`` and returns the text that is code (outside strings, IRIs and
  comments) in at least one of them, with the deepest bracket nesting any reading reaches. A reading
  that meets ``//`` in code (never valid SPARQL: every ``http://`` IRI read as operators) is dropped.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_right
from dataclasses import dataclass

_BASE = ("A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d\u2070-\u218f"
         "\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff")
_CHARS_U = _BASE + "_"
_CHARS = _CHARS_U + r"\-0-9\u00b7\u0300-\u036f\u203f-\u2040"
_PLX = r"(?:%[0-9A-Fa-f]{2}|\\[_~.\-!$&'()*+,;=/?#@%])"
_PREFIX = f"[{_BASE}](?:[{_CHARS}.]*[{_CHARS}])?"
_LOCAL = f"(?:[{_CHARS_U}:0-9]|{_PLX})(?:(?:[{_CHARS}.:]|{_PLX})*(?:[{_CHARS}:]|{_PLX}))?"

_NAME = re.compile(f"(?:{_PREFIX})?(:(?:{_LOCAL})?)?")
_VAR = re.compile(f"[?$][{_CHARS_U}0-9][{_CHARS_U}0-9\u00b7\u0300-\u036f\u203f-\u2040]*")
_BNODE = re.compile(f"_:[{_CHARS_U}0-9](?:[{_CHARS}.]*[{_CHARS}])?")
_LANG = re.compile(r"@[a-zA-Z]+(?:-[a-zA-Z0-9]+)*(?:--[a-zA-Z]+)?")
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WS = re.compile(r"[ \t\r\n]+")
_STRINGS = {
    "'''": re.compile(r"'''(?:(?:''|')?(?:[^'\\]|\\[\s\S]))*'''"),
    '"""': re.compile(r'"""(?:(?:""|")?(?:[^"\\]|\\[\s\S]))*"""'),
    "'": re.compile(r"'(?:[^'\\\n\r]|\\[^\n\r])*'"),
    '"': re.compile(r'"(?:[^"\\\n\r]|\\[^\n\r])*"'),
}
_PUNCT = ("<<(", ")>>", "<<", ">>", "{|", "|}", "^^", "||", "&&", "!=", "<=", ">=")
_UCHAR = re.compile(r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})")
_NOT_IN_IRI = re.compile(r'[\x00-\x20<>"{}|^`\\]')
_CODE_STOP = re.compile(r"//|[#'\"<>{}()\[\]\\]")

OPENERS = {"{": 1, "(": 1, "[": 1, "<<": 1, "<<(": 1, "{|": 1}
CLOSERS = {"}": 1, ")": 1, "]": 1, ">>": 1, ")>>": 1, "|}": 1}


@dataclass(frozen=True)
class Token:
    """A terminal of the text: its kind, text, where it is, and the bracket depth it sits at."""

    kind: str
    """iri, string, var, pname, bnode, lang, number, word (a bare name: keyword or function) or punct."""
    text: str
    start: int
    end: int
    depth: int


def iri_content_ok(content: str) -> bool:
    """Whether ``<content>`` can be an IRI reference (after ``\\u`` escapes): what Oxigraph's parser accepts."""
    try:
        text = _UCHAR.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), content)
    except (ValueError, OverflowError):
        return False
    return not _NOT_IN_IRI.search(text)


def string_end(text: str, i: int) -> int | None:
    """Where the string literal opening at ``i`` ends, or None when it never closes (a syntax error)."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        m = _STRINGS[quote * 3].match(text, i)
        if m:
            return m.end()
    m = _STRINGS[quote].match(text, i)
    return m.end() if m else None


def _comment_end(text: str, i: int) -> int:
    ends = [e for e in (text.find("\n", i), text.find("\r", i)) if e >= 0]
    return min(ends) + 1 if ends else len(text)


def tokens(text: str) -> list[Token]:
    """The terminals of ``text`` (comments and white space dropped), longest match first."""
    out: list[Token] = []
    depth, i, n = 0, 0, len(text)
    while i < n:
        m = _WS.match(text, i)
        if m:
            i = m.end()
            continue
        c = text[i]
        kind, end = "punct", i + 1
        if c == "#":
            i = _comment_end(text, i)
            continue
        if c in "'\"":
            kind, end = "string", string_end(text, i) or n
        elif c == "<" and not text.startswith("<<", i):
            close = text.find(">", i + 1)
            if close >= 0 and iri_content_ok(text[i + 1:close]):
                kind, end = "iri", close + 1
        elif c in "?$" and (m := _VAR.match(text, i)):
            kind, end = "var", m.end()
        elif c == "_" and (m := _BNODE.match(text, i)):
            kind, end = "bnode", m.end()
        elif c == "@" and (m := _LANG.match(text, i)):
            kind, end = "lang", m.end()
        elif (c.isdigit() or c == ".") and (m := _NUMBER.match(text, i)) and m.end() > i + (c == "."):
            kind, end = "number", m.end()
        elif (m := _NAME.match(text, i)) and m.end() > i:
            kind, end = ("pname" if m.group(1) else "word"), m.end()
        if kind == "punct":
            end = i + len(next((p for p in _PUNCT if text.startswith(p, i)), c))
        word = text[i:end]
        if kind == "punct" and word in CLOSERS:
            depth -= 1
        out.append(Token(kind, word, i, end, depth))
        if kind == "punct" and word in OPENERS:
            depth += 1
        i = end
    return out


@dataclass(frozen=True)
class CodeView:
    """What `code_spans` found: the code spans of every reading, and the deepest nesting (where it is)."""

    spans: tuple[tuple[int, int], ...]
    max_depth: int
    over_at: int | None
    """Where the nesting first went deeper than the ``depth_limit`` asked for (None: it never did)."""

    def is_code(self, pos: int) -> bool:
        """Whether ``pos`` is code in at least one reading."""
        k = bisect_right(self.spans, (pos, 1 << 62)) - 1
        return k >= 0 and self.spans[k][0] <= pos < self.spans[k][1]


def code_spans(text: str, depth_limit: int | None = None) -> CodeView:
    """The code of ``text`` under every reading of an ambiguous ``<`` (see the module docstring).

    A reading is a walk over the text in the code state; strings and comments are jumped over, so
    readings meet again at the same offsets and the walk stays linear in the text (a heap of resume
    offsets, each with the deepest nesting that reaches it).
    """
    spans: list[tuple[int, int]] = []
    best: dict[int, int] = {0: 0}
    heap = [0]
    deepest, over_at = 0, None

    def resume(pos: int, depth: int) -> None:
        nonlocal deepest, over_at
        deepest = max(deepest, depth)
        if depth_limit is not None and depth > depth_limit and (over_at is None or pos - 1 < over_at):
            over_at = pos - 1
        if pos not in best:
            best[pos] = depth
            heapq.heappush(heap, pos)
        elif depth > best[pos]:
            best[pos] = depth

    n = len(text)
    while heap:
        pos = heapq.heappop(heap)
        depth = best[pos]
        m = _CODE_STOP.search(text, pos)
        q = m.start() if m else n
        if q > pos:
            spans.append((pos, q))
        if m is None:
            continue
        stop = m.group()
        if stop == "//":
            continue  # never code in valid SPARQL: this reading is not the parser's
        if stop == "#":
            resume(_comment_end(text, q), depth)
        elif stop in "'\"":
            end = string_end(text, q)
            if end is not None:
                resume(end, depth)
        elif stop == "\\":
            spans.append((q, min(n, q + 2)))
            resume(q + 2, depth)
        elif stop == "<":
            spans.append((q, q + 1))
            if text.startswith("<<", q):
                resume(q + 2, depth + 1)  # << of a reified or quoted triple
            close = text.find(">", q + 1)
            if close >= 0 and iri_content_ok(text[q + 1:close]):
                resume(close + 1, depth)  # an IRI
            resume(q + 1, depth)  # the less-than operator
        elif stop == ">":
            spans.append((q, q + 1))
            if text.startswith(">>", q):
                resume(q + 2, max(0, depth - 1))
            else:
                resume(q + 1, depth)
        else:
            spans.append((q, q + 1))
            resume(q + 1, depth + 1 if stop in "{([" else max(0, depth - 1))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return CodeView(tuple(merged), deepest, over_at)


def line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based line and column of an offset."""
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1
