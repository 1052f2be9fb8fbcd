"""Scanning a launch script into statements of raw words, the way bash tokenises them.

A raw word is a list of parts that keep what quoting did: unquoted literal text (subject to field splitting
when it came out of an expansion), quoted literal text (single quotes, a backslash, ``$'...'``), double-quoted
groups, and expansions kept as written (``$X``, ``${...}``, ``$(...)``, ``$((...))``, backquotes), expanded
later by ``shell_expand``. Statements end at a newline, ``;``, ``&``, ``|`` or ``&&``/``||``; ``NAME=(...)``
collects an array body; here-documents and here-strings become the statement's standard input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from debugtune.engine.prevent.errors import LintInputError

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "a": "\a", "b": "\b", "e": "\x1b",
           "f": "\f", "v": "\v"}


@dataclass
class Part:
    """``lit`` (unquoted text), ``q`` (quoted text), ``exp`` (an expansion as written), ``dq`` (double quotes)."""

    kind: str
    text: str = ""
    parts: list[Part] = field(default_factory=list)


@dataclass
class RawWord:
    line: int
    parts: list[Part] = field(default_factory=list)
    array: list[RawWord] | None = None
    """The body of ``NAME=( ... )``, when this word is an array assignment."""

    def add(self, kind: str, text: str) -> None:
        if kind in ("lit", "q") and self.parts and self.parts[-1].kind == kind:
            self.parts[-1].text += text
        else:
            self.parts.append(Part(kind, text))

    def plain(self) -> str:
        """The word's text when it holds no expansion and no quotes ('' otherwise)."""
        return self.parts[0].text if len(self.parts) == 1 and self.parts[0].kind == "lit" else ""

    def literal_prefix(self) -> str:
        return self.parts[0].text if self.parts and self.parts[0].kind == "lit" else ""


@dataclass
class Statement:
    line: int
    words: list[RawWord]
    stdin: list[tuple[str, RawWord | None]] = field(default_factory=list)
    """Here-strings (``("word", w)``) and here-documents (``("doc", None)`` with the body in ``docs``)."""
    docs: list[tuple[str, bool]] = field(default_factory=list)
    """Here-document bodies with whether they are expanded (unquoted delimiter)."""
    end: str = "\n"
    """What ended the statement: a newline, ``;``, ``&&``, ``||``, ``|`` or ``&``."""


class Scanner:
    """Cuts a script into statements; one method per kind of character that can start a token."""

    def __init__(self, text: str, path: str):
        self.t, self.path, self.i, self.line = text, path, 0, 1
        self._pending_docs: list[tuple[str, bool, bool, Statement]] = []

    def fail(self, message: str, line: int) -> LintInputError:
        return LintInputError(self.path, message, line)

    def statements(self) -> list[Statement]:
        out = []
        while self.i < len(self.t):
            st = self._statement()
            if st.words or st.stdin:
                out.append(st)
        return out

    # -- one statement ------------------------------------------------------------------------------
    def _statement(self, end: str | None = None) -> Statement:
        """Words up to the end of a statement (or, with ``end``, up to that character: an array body)."""
        st = Statement(self.line, [])
        self._cur: RawWord | None = None
        self._drop_next = False
        self._here_string = False
        while self.i < len(self.t):
            c = self.t[self.i]
            if c == "\\" and self._continuation():
                continue
            if c == "\n":
                self._finish(st)
                self.i += 1
                self.line += 1
                self._read_here_docs()
                if end is None:
                    return st
                continue
            if c in " \t\r":
                self._finish(st)
                self.i += 1
                continue
            if c == "#" and self._cur is None:
                self._comment()
                continue
            if end is not None and c == end:
                self._finish(st)
                self.i += 1
                return st
            if end is None and c in ";&|" and not self.t.startswith("&>", self.i):
                self._finish(st)
                st.end = self._operator()
                return st
            if c in "<>" or self.t.startswith("&>", self.i):
                self._redirection(st)
                continue
            if c in "()":
                if c == "(" and self._array_start(st):
                    continue
                self._finish(st)
                self.i += 1
                continue
            self._word_char(c)
        if end is not None:
            raise self.fail(f"unterminated array: missing '{end}'", st.line)
        self._finish(st)
        return st

    def _finish(self, st: Statement) -> None:
        """End the word being built: keep it, or drop it when it was a redirection's target."""
        cur, self._cur = self._cur, None
        if cur is None:
            return
        if self._here_string:
            st.stdin.append(("word", cur))
            self._here_string = False
        elif self._drop_next:
            self._drop_next = False
        else:
            st.words.append(cur)

    def _word(self) -> RawWord:
        if self._cur is None:
            self._cur = RawWord(self.line)
        return self._cur

    def _continuation(self) -> bool:
        if self.t.startswith("\\\n", self.i):
            self.i += 2
            self.line += 1
            return True
        if self.t.startswith("\\\r\n", self.i):
            self.i += 3
            self.line += 1
            return True
        return False

    def _comment(self) -> None:
        nl = self.t.find("\n", self.i)
        self.i = len(self.t) if nl < 0 else nl

    def _operator(self) -> str:
        start = self.i
        while self.i < len(self.t) and self.t[self.i] in ";&|":
            self.i += 1
        return self.t[start:self.i]

    def _placeholder(self) -> bool:
        """``<Specify path>`` where a value belongs (templates ship such placeholders): kept as an unresolved
        value rather than read as a redirection."""
        t, i = self.t, self.i
        j = t.find(">", i + 1)
        nl = t.find("\n", i)
        if j < 0 or (0 <= nl < j) or t.startswith("<<", i):
            return False
        inner = t[i + 1:j]
        after = t[j + 1:j + 2]
        if not inner or inner[0].isspace() or inner[-1].isspace() or "<" in inner or after not in ("", " ", "\t",
                                                                                                  "\n", ";", "\\", "/"):
            return False
        self._word().add("exp", t[i:j + 1])
        self.i = j + 1
        return True

    def _redirection(self, st: Statement) -> None:
        """``>``, ``>>``, ``2>&1``, ``&>``, ``<``: the target word is dropped; ``<<<`` and ``<<`` feed stdin."""
        if self.t[self.i] == "<" and self._placeholder():
            return
        cur = self._cur
        if cur is not None and cur.plain().isdigit():
            self._cur = None
        self._finish(st)
        t = self.t
        if t.startswith("<<<", self.i):
            self.i += 3
            self._here_string = True
            return
        if t.startswith("<<", self.i) and not t.startswith("<<<", self.i):
            self.i += 2
            strip = t.startswith("-", self.i)
            self.i += 1 if strip else 0
            self._here_doc_marker(st, strip)
            return
        self.i += 1
        while self.i < len(t) and t[self.i] in "<>&|":
            self.i += 1
        if self.i < len(t) and (t[self.i].isdigit() or t[self.i] == "-") and t[self.i - 1] == "&":
            while self.i < len(t) and (t[self.i].isdigit() or t[self.i] == "-"):
                self.i += 1
        else:
            self._drop_next = True

    def _here_doc_marker(self, st: Statement, strip: bool) -> None:
        t = self.t
        while self.i < len(t) and t[self.i] in " \t":
            self.i += 1
        m = re.compile(r"""(['"]?)([^\s'";|&<>()]+)\1""").match(t, self.i)
        if not m:
            raise self.fail("here-document without a delimiter", self.line)
        self.i = m.end()
        st.stdin.append(("doc", None))
        self._pending_docs.append((m.group(2), not m.group(1), strip, st))

    def _read_here_docs(self) -> None:
        """The bodies of the here-documents opened on the line just ended."""
        pending, self._pending_docs = self._pending_docs, []
        for delimiter, expand, strip, st in pending:
            body, start = [], self.line
            while True:
                if self.i >= len(self.t):
                    raise self.fail(f"unterminated here-document: missing {delimiter!r}", start)
                nl = self.t.find("\n", self.i)
                line = self.t[self.i:] if nl < 0 else self.t[self.i:nl]
                self.i = len(self.t) if nl < 0 else nl + 1
                self.line += 1
                if (line.lstrip("\t") if strip else line).rstrip("\r") == delimiter:
                    break
                body.append(line.lstrip("\t") if strip else line)
            st.docs.append(("".join(x + "\n" for x in body), expand))

    def _array_start(self, st: Statement) -> bool:
        cur = self._cur
        if cur is None or len(cur.parts) != 1 or cur.parts[0].kind != "lit":
            return False
        m = ASSIGN.match(cur.parts[0].text)
        if not m or m.end() != len(cur.parts[0].text):
            return False
        self.i += 1
        saved = (self._cur, self._drop_next, self._here_string)
        body = self._statement(end=")")
        self._cur, self._drop_next, self._here_string = saved
        cur.array = body.words
        return True

    def _word_char(self, c: str) -> None:
        if c == "\\":
            self._word().add("q", self.t[self.i + 1:self.i + 2])
            self.i += 2
        elif c == "'":
            self._word().add("q", self.single_quoted())
        elif c == '"':
            self._word().parts.append(Part("dq", parts=self.double_quoted()))
        elif c == "$" and self.t.startswith("$'", self.i):
            self.i += 1
            self._word().add("q", self._ansi_c())
        elif c in "$`":
            token = self.expansion()
            self._word().add("exp" if token != "$" else "lit", token)
        else:
            self._word().add("lit", c)
            self.i += 1

    # -- quotes and expansions (also used for the words inside ${...}) -----------------------------
    def single_quoted(self) -> str:
        j = self.t.find("'", self.i + 1)
        if j < 0:
            raise self.fail("unterminated single quote", self.line)
        text = self.t[self.i + 1:j]
        self.line += text.count("\n")
        self.i = j + 1
        return text

    def _ansi_c(self) -> str:
        t, out = self.t, []
        self.i += 1
        while self.i < len(t) and t[self.i] != "'":
            if t[self.i] == "\\" and self.i + 1 < len(t):
                out.append(_ANSI_C.get(t[self.i + 1], "\\" + t[self.i + 1]))
                self.i += 2
                continue
            out.append(t[self.i])
            self.i += 1
        if self.i >= len(t):
            raise self.fail("unterminated $'...' quote", self.line)
        self.i += 1
        return "".join(out)

    def double_quoted(self) -> list[Part]:
        t, start = self.t, self.line
        self.i += 1
        parts: list[Part] = []

        def lit(text: str) -> None:
            if parts and parts[-1].kind == "q":
                parts[-1].text += text
            else:
                parts.append(Part("q", text))

        while self.i < len(t):
            c = t[self.i]
            if c == "\\" and self.i + 1 < len(t) and t[self.i + 1] in '"\\$`\n':
                if t[self.i + 1] == "\n":
                    self.line += 1
                else:
                    lit(t[self.i + 1])
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return parts
            if c in "$`":
                token = self.expansion()
                if token == "$":
                    lit("$")
                else:
                    parts.append(Part("exp", token))
                continue
            if c == "\n":
                self.line += 1
            lit(c)
            self.i += 1
        raise self.fail("unterminated double quote", start)

    def expansion(self) -> str:
        """The text of one expansion starting at ``$`` or a backquote, kept as written."""
        t, i = self.t, self.i
        if t[i] == "`":
            j = i + 1
            while j < len(t) and t[j] != "`":
                j += 2 if t[j] == "\\" else 1
            if j >= len(t):
                raise self.fail("unterminated backquote", self.line)
            return self._take(j + 1)
        nxt = t[i + 1:i + 2]
        if nxt in ("(", "{", "["):
            return self._take(self._matching(i + 1))
        m = _NAME.match(t, i + 1)
        if m:
            return self._take(m.end())
        if nxt and nxt in "0123456789@*#?$!-":
            return self._take(i + 2)
        self.i = i + 1
        return "$"

    def _take(self, end: int) -> str:
        text = self.t[self.i:end]
        self.line += text.count("\n")
        self.i = end
        return text

    def _matching(self, at: int) -> int:
        """The index after the bracket that closes the one at ``at``, skipping quotes and nested brackets."""
        t, pairs = self.t, {"(": ")", "{": "}", "[": "]"}
        stack, j = [pairs[t[at]]], at + 1
        while j < len(t) and stack:
            c = t[j]
            if c == "\\":
                j += 2
                continue
            if c == "'" and stack[-1] != "]" and (stack[-1] == ")" or t[at] == "{"):
                k = t.find("'", j + 1)
                j = (k if k >= 0 else len(t) - 1) + 1
                continue
            if c == '"':
                k = j + 1
                while k < len(t) and t[k] != '"':
                    k += 2 if t[k] == "\\" else 1
                j = k + 1
                continue
            if c in pairs and (c != "[" or stack[-1] == "]"):
                stack.append(pairs[c])
            elif c == "$" and t[j + 1:j + 2] in ("(", "{"):
                stack.append(pairs[t[j + 1]])
                j += 1
            elif c == stack[-1]:
                stack.pop()
            j += 1
        if stack:
            raise self.fail(f"unterminated ${t[at]}", self.line)
        return j


def scan_word(text: str, path: str, line: int, *, in_double_quotes: bool = False) -> RawWord:
    """``text`` (the word of a ``${NAME:-word}`` operator) as one raw word: spaces stay literal text."""
    sc = Scanner(text, path)
    sc.line = line
    w = RawWord(line)
    while sc.i < len(text):
        c = text[sc.i]
        if c == "\\" and sc.i + 1 < len(text):
            w.add("q", text[sc.i + 1])
            sc.i += 2
        elif c == "'" and not in_double_quotes:
            w.add("q", sc.single_quoted())
        elif c == '"':
            w.parts.append(Part("dq", parts=sc.double_quoted()))
        elif c in "$`":
            token = sc.expansion()
            w.add("exp" if token != "$" else "lit", token)
        else:
            w.add("q" if in_double_quotes else "lit", c)
            sc.i += 1
    return w
