"""A small interpreter for launch scripts: enough of bash to find the training command and its arguments.

It understands line continuations, comments, quotes, variable assignments (also ``export`` and arrays),
``$VAR`` / ``${VAR}`` / ``${VAR:-default}`` / ``${ARR[@]}`` expansions with word splitting, ``$(( ))``
arithmetic, inline environment (``A=1 torchrun ...``), and statement separators. Control flow is not
followed: assignments run in file order. Command substitution and unknown variables stay unresolved
(the value is kept as written and its name reported), so the linter never guesses a value.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import LintInputError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_SKIP = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
         "{", "}", "!", "[[", "]]", "[", "test", "echo", "printf", "set", "cd", "mkdir", "exit", "return", "source",
         ".", "shift", "wait", "sleep", "trap", "rm", "cp", "mv", "ln", "touch", "cat", "unset", "true", "false",
         "pushd", "popd", "ulimit", "module", "conda", "nvidia-smi", "hostname", "date", "sed", "awk", "grep"}
_PREFIX_KEYWORDS = {"then", "do", "else", "{", "!", "time", "exec", "nohup", "command", "builtin"}
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}


@dataclass
class Seg:
    """Part of a word: ``lit`` (as is), ``dq`` (double-quoted: expand, no splitting), ``exp`` (unquoted expansion)."""

    kind: str
    text: str


@dataclass
class RawWord:
    line: int
    segs: list[Seg] = field(default_factory=list)
    array: list[RawWord] | None = None

    def add(self, kind: str, text: str) -> None:
        if kind == "lit" and self.segs and self.segs[-1].kind == "lit":
            self.segs[-1].text += text
        else:
            self.segs.append(Seg(kind, text))

    def literal_prefix(self) -> str:
        return self.segs[0].text if self.segs and self.segs[0].kind == "lit" else ""


@dataclass
class Word:
    """An expanded word (field) with the line it starts on and the names it could not resolve."""

    text: str
    line: int
    unresolved: tuple[str, ...] = ()


@dataclass
class Command:
    """A simple command after expansion, with its inline environment assignments."""

    words: list[Word]
    env: dict[str, str]
    line: int


class _Scanner:
    def __init__(self, text: str, path: str):
        self.t, self.path, self.i, self.line = text, path, 0, 1

    def fail(self, message: str, line: int) -> LintInputError:
        return LintInputError(self.path, message, line)

    def statements(self) -> Iterator[tuple[int, list[RawWord]]]:
        while self.i < len(self.t):
            words, start = self._words(end=None)
            if words:
                yield start, words

    def _words(self, end: str | None) -> tuple[list[RawWord], int]:
        """Words up to the end of a statement (or up to ``end`` for an array body)."""
        t, words = self.t, []
        cur: RawWord | None = None
        start = self.line
        drop_next = False

        def finish() -> None:
            nonlocal cur, drop_next
            if cur is not None:
                if not drop_next:
                    words.append(cur)
                else:
                    drop_next = False
                cur = None

        while self.i < len(t):
            c = t[self.i]
            if c == "\\":
                if self.t.startswith("\\\n", self.i):
                    self.i += 2
                    self.line += 1
                    continue
                cur = cur or RawWord(self.line)
                cur.add("lit", t[self.i + 1:self.i + 2])
                self.i += 2
                continue
            if c == "\n":
                finish()
                self.i += 1
                self.line += 1
                if end is None:
                    return words, start
                continue
            if c in " \t\r":
                finish()
                self.i += 1
                continue
            if c == "#" and cur is None:
                nl = t.find("\n", self.i)
                self.i = len(t) if nl < 0 else nl
                continue
            if end is not None and c == end:
                finish()
                self.i += 1
                return words, start
            if c in ";&|" and end is None:
                finish()
                while self.i < len(t) and t[self.i] in ";&|":
                    self.i += 1
                return words, start
            if c in "<>":
                if cur is not None and cur.segs and all(s.kind == "lit" and s.text.isdigit() for s in cur.segs):
                    cur = None
                finish()
                self.i += 1
                while self.i < len(t) and t[self.i] in "<>&":
                    self.i += 1
                if self.i < len(t) and t[self.i].isdigit():
                    while self.i < len(t) and t[self.i].isdigit():
                        self.i += 1
                else:
                    drop_next = True
                continue
            if c == "'":
                j = t.find("'", self.i + 1)
                if j < 0:
                    raise self.fail("unterminated single quote", self.line)
                cur = cur or RawWord(self.line)
                cur.add("lit", t[self.i + 1:j])
                self.line += t.count("\n", self.i, j)
                self.i = j + 1
                continue
            if c == '"':
                cur = cur or RawWord(self.line)
                cur.add("dq", self._double_quoted())
                continue
            if c == "$" or c == "`":
                cur = cur or RawWord(self.line)
                cur.add("exp", self._expansion())
                continue
            if c == "(":
                if cur is not None and len(cur.segs) == 1 and _ASSIGN.match(cur.literal_prefix()) \
                        and cur.literal_prefix().endswith("="):
                    self.i += 1
                    cur.array = self._words(end=")")[0]
                    continue
                finish()
                self.i += 1
                continue
            if c == ")":
                finish()
                self.i += 1
                continue
            cur = cur or RawWord(self.line)
            cur.add("lit", c)
            self.i += 1
        if end is not None:
            raise self.fail(f"unterminated array: missing '{end}'", start)
        finish()
        return words, start

    def _double_quoted(self) -> str:
        t, start_line = self.t, self.line
        self.i += 1
        out = []
        while self.i < len(t):
            c = t[self.i]
            if c == "\\" and self.i + 1 < len(t) and t[self.i + 1] in '"\\$`\n':
                if t[self.i + 1] == "\n":
                    self.line += 1
                else:
                    out.append("\\" + t[self.i + 1] if t[self.i + 1] in "$`" else t[self.i + 1])
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "$" or c == "`":
                out.append(self._expansion())
                continue
            if c == "\n":
                self.line += 1
            out.append(c)
            self.i += 1
        raise self.fail("unterminated double quote", start_line)

    def _expansion(self) -> str:
        """The text of one expansion starting at ``$`` or a backquote (kept as written, expanded later)."""
        t, i, start_line = self.t, self.i, self.line
        if t[i] == "`":
            j = t.find("`", i + 1)
            if j < 0:
                raise self.fail("unterminated backquote", start_line)
            self.i = j + 1
            return t[i:j + 1]
        nxt = t[i + 1:i + 2]
        if nxt in ("(", "{"):
            close = ")" if nxt == "(" else "}"
            depth, j = 0, i + 1
            while j < len(t):
                if t[j] == nxt:
                    depth += 1
                elif t[j] == close:
                    depth -= 1
                    if depth == 0:
                        break
                elif t[j] == "\n":
                    self.line += 1
                j += 1
            else:
                raise self.fail(f"unterminated ${nxt}", start_line)
            self.i = j + 1
            return t[i:j + 1]
        m = _NAME.match(t, i + 1)
        if m:
            self.i = m.end()
            return t[i:m.end()]
        if nxt and nxt in "0123456789@*#?$!-":
            self.i = i + 2
            return t[i:i + 2]
        self.i = i + 1
        return "$"


class Shell:
    """Runs the assignments of a script and returns its commands, expanded."""

    def __init__(self, path: str, env: dict[str, str] | None = None):
        self.path = path
        self.vars: dict[str, str | list[str]] = dict(env or {})
        self.exported: set[str] = set(env or {})
        self.tainted: dict[str, tuple[str, ...]] = {}
        """Variables whose value holds an unresolved expansion → the names it could not resolve."""
        self.lines: dict[str, list[int]] = {}
        """Line of each element of a variable's value (where it was assigned)."""

    def run(self, text: str) -> list[Command]:
        commands = []
        for line, raw in _Scanner(text, self.path).statements():
            cmd = self._statement(line, raw)
            if cmd is not None:
                commands.append(cmd)
        return commands

    def words(self, text: str, line: int) -> list[Word]:
        """``text`` as the words of one command line (quotes, expansions, splitting), all on ``line``."""
        scanner = _Scanner(text.replace("\n", " "), self.path)
        out = [f for _, raw in scanner.statements() for w in raw for f in self._fields(w)]
        for w in out:
            w.line = line
        return out

    def exported_env(self) -> dict[str, str]:
        return {k: v if isinstance(v, str) else " ".join(v) for k, v in self.vars.items() if k in self.exported}

    # -- statements ---------------------------------------------------------------------------------
    def _statement(self, line: int, raw: list[RawWord]) -> Command | None:
        while raw and _plain(raw[0]) in _PREFIX_KEYWORDS:
            raw = raw[1:]
        if not raw:
            return None
        first = _plain(raw[0])
        if first in _DECLARE:
            for w in raw[1:]:
                if _plain(w).startswith("-"):
                    continue
                name = self._assign(w) or _plain(w)
                if first == "export" and _NAME.fullmatch(name or ""):
                    self.exported.add(name)
            return None
        inline: dict[str, str] = {}
        k = 0
        while k < len(raw) and _ASSIGN.match(raw[k].literal_prefix()):
            inline[_ASSIGN.match(raw[k].literal_prefix()).group(1)] = ""
            k += 1
        if k == len(raw):
            for w in raw:
                self._assign(w)
            return None
        if first in _SKIP or first.startswith(("[", "#")):
            return None
        for w in raw[:k]:
            name, value, _, _ = self._assignment_value(w)
            inline[name] = value if isinstance(value, str) else " ".join(value)
        words = [f for w in raw[k:] for f in self._fields(w)]
        return Command(words, inline, line) if words else None

    def _assign(self, w: RawWord) -> str | None:
        if not _ASSIGN.match(w.literal_prefix()):
            return None
        name, value, missing, lines = self._assignment_value(w)
        plus = _ASSIGN.match(w.literal_prefix()).group(2)
        old = self.vars.get(name)
        if plus and old is not None:
            if isinstance(old, list) and isinstance(value, list):
                value, lines = old + value, self.lines.get(name, []) + lines
            else:
                value = _join(old) + _join(value)
            missing = self.tainted.get(name, ()) + missing
        self.vars[name] = value
        self.lines[name] = lines
        if missing:
            self.tainted[name] = missing
        else:
            self.tainted.pop(name, None)
        return name

    def _assignment_value(self, w: RawWord) -> tuple[str, str | list[str], tuple[str, ...], list[int]]:
        m = _ASSIGN.match(w.literal_prefix())
        assert m is not None
        name = m.group(1)
        if w.array is not None:
            fields = [f for el in w.array for f in self._fields(el)]
            missing = tuple(n for f in fields for n in f.unresolved)
            return name, [f.text for f in fields], missing, [f.line for f in fields]
        rest = RawWord(w.line, [Seg("lit", w.segs[0].text[m.end():])] + w.segs[1:])
        text, missing = self._join_segments(rest)
        return name, text, missing, [w.line]

    # -- expansion ----------------------------------------------------------------------------------
    def _join_segments(self, w: RawWord) -> tuple[str, tuple[str, ...]]:
        """A word expanded without splitting (assignment values)."""
        out, missing = [], []
        for s in w.segs:
            if s.kind == "lit":
                out.append(s.text)
            else:
                value, miss = self.expand_text(s.text) if s.kind == "dq" else self._expand_one(s.text)
                out.append(_join(value))
                missing += miss
        return "".join(out), tuple(missing)

    def _fields(self, w: RawWord) -> list[Word]:
        """A word expanded with word splitting of unquoted expansions; each field keeps its source line."""
        fields: list[list[str]] = [[]]
        lines: list[int] = [w.line]
        missing: list[str] = []
        quoted = False

        def spread(items: list[str], item_lines: list[int], glue: bool) -> None:
            if not items:
                return
            if not glue and "".join(fields[-1]):
                fields.append([])
                lines.append(w.line)
            fields[-1].append(items[0])
            if item_lines and not "".join(fields[-1][:-1]):
                lines[-1] = item_lines[0]
            for j, x in enumerate(items[1:], 1):
                fields.append([x])
                lines.append(item_lines[j] if j < len(item_lines) else w.line)

        for s in w.segs:
            if s.kind == "lit":
                fields[-1].append(s.text)
                quoted = quoted or not s.text
                continue
            var = _single_var(s.text)
            if s.kind == "dq" and not re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\[@\]\}", s.text):
                quoted = True
                value, miss = self.expand_text(s.text)
                fields[-1].append(_join(value))
                missing += miss
                continue
            quoted = quoted or s.kind == "dq"
            value, miss = self._expand_one(s.text)
            missing += miss
            var_lines = self.lines.get(var or "", [])
            if isinstance(value, list):
                spread(value, var_lines, glue=True)
                continue
            parts = value.split() if s.kind == "exp" else [value]
            spread(parts, var_lines * len(parts) if len(var_lines) == 1 else var_lines,
                   glue=not value[:1].isspace())
            if value[-1:].isspace() and s.kind == "exp":
                fields.append([])
                lines.append(w.line)
        out = []
        for f, line in zip(fields, lines, strict=True):
            text = "".join(f)
            if text or (quoted and len(fields) == 1):
                out.append(Word(text, line, tuple(n for n in dict.fromkeys(missing) if _mentions(text, n))))
        return out

    def expand_text(self, text: str) -> tuple[str, list[str]]:
        """Expand every ``$...`` inside a double-quoted string."""
        out, missing, i = [], [], 0
        while i < len(text):
            if text[i] == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 2
                continue
            if text[i] in "$`":
                sc = _Scanner(text, self.path)
                sc.i = i
                token = sc._expansion()
                value, miss = self._expand_one(token)
                missing += miss
                out.append(_join(value))
                i = sc.i
                continue
            out.append(text[i])
            i += 1
        return "".join(out), missing

    def _expand_one(self, token: str) -> tuple[str | list[str], list[str]]:
        """Value of one expansion token, and the names that could not be resolved."""
        if token == "$":
            return "$", []
        if token.startswith("$((") and token.endswith("))"):
            return self._arith(token[3:-2])
        if token.startswith(("$(", "`")):
            return token, ["$(...)"]
        if token.startswith("${"):
            return self._braced(token[2:-1])
        name = token[1:]
        return self._lookup(name)

    def _lookup(self, name: str) -> tuple[str | list[str], list[str]]:
        if name in self.vars:
            v = self.vars[name]
            return (v[0] if v else "") if isinstance(v, list) else v, list(self.tainted.get(name, ()))
        return "$" + name, [name]

    def _braced(self, body: str) -> tuple[str | list[str], list[str]]:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", body)
        if m:
            v = self.vars.get(m.group(1))
            if v is None:
                return "${" + body + "}", [m.group(1)]
            return (list(v) if isinstance(v, list) else v.split()), list(self.tainted.get(m.group(1), ()))
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)", body)
        if m:
            v = self.vars.get(m.group(1))
            return (str(len(v)) if v is not None else "${" + body + "}"), ([] if v is not None else [m.group(1)])
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(:?[-=+?])(.*)", body, re.S)
        if m:
            name, op, word = m.groups()
            v = self.vars.get(name)
            empty = v is None or (op.startswith(":") and v in ("", []))
            if op.endswith("+"):
                return ("" if empty else self.expand_text(word)[0]), []
            if not empty:
                return _join(v), list(self.tainted.get(name, ()))
            value, miss = self.expand_text(word)
            if op.endswith("="):
                self.vars[name] = value
            return value, miss
        if _NAME.fullmatch(body) or body.isdigit():
            value, missing = self._lookup(body)
            return ("${" + body + "}" if body not in self.vars else value), missing
        return "${" + body + "}", [body]

    def _arith(self, expr: str) -> tuple[str, list[str]]:
        text, missing = self.expand_text(expr)
        if missing:
            return "$((" + expr + "))", missing
        unknown = [n for n in _NAME.findall(text) if n not in self.vars]
        if unknown:
            return "$((" + expr + "))", unknown
        text = _NAME.sub(lambda m: str(_join(self.vars[m.group(0)]) or 0), text)
        try:
            return str(_arith_eval(ast.parse(text.strip(), mode="eval").body)), []
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
            return "$((" + expr + "))", ["$((" + expr + "))"]


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


def _arith_eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith_eval(node.left), _arith_eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _arith_eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    raise ValueError("unsupported arithmetic")


def _mentions(text: str, name: str) -> bool:
    """Whether an expanded word still holds the unresolved expansion ``name`` (kept as written)."""
    if name.startswith("$"):
        return "$(" in text or "`" in text
    return f"${name}" in text or f"${{{name}" in text or f"${{#{name}" in text


def _single_var(token: str) -> str | None:
    """The variable name when an expansion token is just one variable ($X, ${X}, ${X[@]}, ${X:-d})."""
    m = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(?:\[[@*]\]|:?[-=][^}]*)?\}?", token)
    return m.group(1) if m else None


def _plain(w: RawWord) -> str:
    return "".join(s.text for s in w.segs if s.kind == "lit") if all(s.kind == "lit" for s in w.segs) else ""


def _join(value: str | list[str] | None) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else " ".join(value)
