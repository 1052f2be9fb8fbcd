"""Word expansion as bash does it, for the constructs launch scripts use.

Order (bash manual, "Shell Expansions"): parameter expansion (``$X``, ``${X}``, ``${X:-word}`` and the other
operators, ``${ARR[@]}``, ``${#X}``), arithmetic (``$(( ))``), command substitution (kept unresolved), then
field splitting of the unquoted results on IFS, then quote removal. A quoted ``"${ARR[@]}"`` gives one field
per element; unquoted, every element is split again. The quotes of an operator's word (``${X:-"1"}``) are
removed and protect what they enclose from splitting. A value this module cannot know (an unset variable, a
command's output, a positional parameter) is kept as written and its name recorded, never guessed.
"""

from __future__ import annotations

import ast
import fnmatch
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass

from debugtune.engine.prevent.readers.shell_scan import Part, RawWord, scan_word

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALL_ITEMS = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\[@\]\}|\$@|\$\{@\}")
COMMAND_OUTPUT = "$(...)"
"""The name recorded for a value that comes from a command's output."""


@dataclass(frozen=True)
class Item:
    """One element of a variable's value, with the line it was assigned on, what it could not resolve and
    the variables whose ``${NAME:-default}`` default it holds because they were not set."""

    text: str
    line: int
    unresolved: tuple[str, ...] = ()
    defaulted: tuple[str, ...] = ()


@dataclass
class Value:
    items: list[Item]
    array: bool = False

    def first(self) -> Item | None:
        return self.items[0] if self.items else None


@dataclass(frozen=True)
class Word:
    """An expanded word (field) with the line it starts on, the names it could not resolve and the unset
    variables whose ``${NAME:-default}`` default it holds."""

    text: str
    line: int
    unresolved: tuple[str, ...] = ()
    defaulted: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Frag:
    text: str
    split: bool
    line: int
    unresolved: tuple[str, ...] = ()
    quoted: bool = False
    defaulted: tuple[str, ...] = ()


_BREAK = _Frag("", False, 0)
"""Between two elements of a quoted ``"${ARR[@]}"``: ends a field even when it is empty."""


class Expander:
    """Expands raw words against variables (name → Value); ``lookup`` returns None for an unknown name."""

    def __init__(self, path: str, lookup: Callable[[str], Value | None], assign: Callable[[str, Value], None]):
        self.path, self.lookup, self.assign = path, lookup, assign

    # -- public -------------------------------------------------------------------------------------
    def fields(self, w: RawWord) -> list[Word]:
        """The fields of a command word: expansions, field splitting, quote removal."""
        return _split_fields(self._parts(w.parts, False, w.line), w.line)

    def string(self, w: RawWord) -> Item:
        """A word expanded without field splitting (the value of an assignment, a here-string)."""
        frags = self._parts(w.parts, True, w.line)
        return _join(frags, w.line)

    def text(self, text: str, line: int) -> Item:
        """Text expanded as inside double quotes (an unquoted here-document body)."""
        w = scan_word(text, self.path, line, in_double_quotes=True)
        return self.string(w)

    # -- parts --------------------------------------------------------------------------------------
    def _parts(self, parts: list[Part], quoted: bool, line: int) -> list[_Frag]:
        out: list[_Frag] = []
        for p in parts:
            if p.kind == "lit":
                out.append(_Frag(p.text, False, line, quoted=quoted))
            elif p.kind == "q":
                out.append(_Frag(p.text, False, line, quoted=True))
            elif p.kind == "dq":
                inner = self._parts(p.parts, True, line)
                if not inner and not any(x.kind == "exp" and _ALL_ITEMS.fullmatch(x.text) for x in p.parts):
                    inner = [_Frag("", False, line, quoted=True)]
                out += inner
            else:
                out += self._token(p.text, quoted, line)
        return out

    def _token(self, token: str, quoted: bool, line: int) -> list[_Frag]:
        if token.startswith("$((") and token.endswith("))"):
            text, missing, defaulted = self.arithmetic_item(token[3:-2], line)
            return [_Frag(text, not quoted, line, missing, quoted, defaulted)]
        if token.startswith(("$(", "`")):
            return [_Frag(token, False, line, (COMMAND_OUTPUT,), True)]
        if token.startswith("<"):
            return [_Frag(token, False, line, (token,), True)]  # a template's <placeholder>
        if token.startswith("$["):
            text, missing = self.arithmetic(token[2:-1], line)
            return [_Frag(text, not quoted, line, missing, quoted)]
        if token.startswith("${"):
            return self._braced(token[2:-1], token, quoted, line)
        return self._variable(token[1:], token, quoted, line, all_items=False)

    def _variable(self, name: str, token: str, quoted: bool, line: int, *, all_items: bool,
                  joined: bool = False) -> list[_Frag]:
        value = self.lookup(name)
        if value is None:
            return [_Frag(token, False, line, (name,), True)]
        items = value.items if all_items else value.items[:1]
        if not items:
            return []
        if joined or not quoted or len(items) == 1:
            if joined:
                items = [Item(" ".join(i.text for i in items), items[0].line,
                              tuple(n for i in items for n in i.unresolved),
                              tuple(n for i in items for n in i.defaulted))]
            out: list[_Frag] = []
            for k, it in enumerate(items):
                if k:
                    out.append(_Frag(" ", not quoted, it.line))
                out.append(_Frag(it.text, not quoted and _splittable(it), it.line, it.unresolved, quoted,
                                 it.defaulted))
            return out
        out = []
        for k, it in enumerate(items):
            if k:
                out.append(_BREAK)
            out.append(_Frag(it.text, False, it.line, it.unresolved, True, it.defaulted))
        return out

    # -- ${...} -------------------------------------------------------------------------------------
    def _braced(self, body: str, token: str, quoted: bool, line: int) -> list[_Frag]:
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", body)
        if m:
            return self._variable(m.group(1), token, quoted, line, all_items=True, joined=m.group(2) == "*")
        if body in ("@", "*") or body.isdigit() or body in ("#", "?", "$", "!", "-"):
            return [_Frag(token, False, line, (body,), True)]
        m = re.fullmatch(r"#([A-Za-z_][A-Za-z0-9_]*)(\[[@*]\])?", body)
        if m:
            value = self.lookup(m.group(1))
            if value is None:
                return [_Frag(token, False, line, (m.group(1),), True)]
            n = len(value.items) if m.group(2) else len((value.first() or Item("", line)).text)
            return [_Frag(str(n), not quoted, line, quoted=quoted)]
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([^\]]+)\]", body)
        if m:
            return self._element(m.group(1), m.group(2), token, quoted, line)
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:?[-=+?])(.*)", body, re.S)
        if m:
            return self._default(m.group(1), m.group(2), m.group(3), token, quoted, line)
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(##?|%%?|//?|/#|/%|,,?|\^\^?|:)(.*)", body, re.S)
        if m:
            return self._operator(m.group(1), m.group(2), m.group(3), token, quoted, line)
        if _NAME.fullmatch(body):
            return self._variable(body, token, quoted, line, all_items=False)
        return [_Frag(token, False, line, (token,), True)]

    def _element(self, name: str, index: str, token: str, quoted: bool, line: int) -> list[_Frag]:
        value = self.lookup(name)
        n, missing = self.arithmetic(index, line)
        if value is None or missing or not re.fullmatch(r"-?\d+", n):
            return [_Frag(token, False, line, missing or (name,), True)]
        k = int(n)
        if -len(value.items) <= k < len(value.items):
            it = value.items[k]
            return [_Frag(it.text, not quoted and _splittable(it), it.line, it.unresolved, quoted, it.defaulted)]
        return []

    def _default(self, name: str, op: str, word: str, token: str, quoted: bool, line: int) -> list[_Frag]:
        value = self.lookup(name)
        first = value.first() if value is not None else None
        empty = value is None or (op.startswith(":") and (first is None or first.text == ""))
        kind = op[-1]
        if kind == "+":
            return [] if empty else self._operator_word(word, quoted, line)
        if not empty:
            return self._variable(name, token, quoted, line, all_items=False)
        if kind == "?":
            return [_Frag(token, False, line, (name,), True)]
        frags = [f if f is _BREAK else _Frag(f.text, f.split, f.line, f.unresolved, f.quoted, f.defaulted + (name,))
                 for f in self._operator_word(word, quoted, line)]
        if kind == "=":
            self.assign(name, Value([_join(frags, line)]))
        return frags

    def _operator_word(self, word: str, quoted: bool, line: int) -> list[_Frag]:
        """The word of ``${X:-word}``: expanded, quotes removed; unquoted, its unquoted text is split."""
        w = scan_word(word, self.path, line, in_double_quotes=quoted)
        frags = self._parts(w.parts, quoted, line)
        return [f if f is _BREAK or quoted or f.quoted
                else _Frag(f.text, True, f.line, f.unresolved, False, f.defaulted) for f in frags]

    def _operator(self, name: str, op: str, arg: str, token: str, quoted: bool, line: int) -> list[_Frag]:
        value = self.lookup(name)
        first = value.first() if value is not None else None
        if first is None or first.unresolved:
            return [_Frag(token, False, line, first.unresolved if first else (name,), True)]
        text = first.text
        pattern = self.string(scan_word(arg, self.path, line)).text
        if op in ("#", "##", "%", "%%"):
            out = _remove(text, pattern, op)
        elif op.startswith("/"):
            pat, _, rep = arg.partition("/")
            pat = self.string(scan_word(pat, self.path, line)).text
            rep = self.string(scan_word(rep, self.path, line)).text
            out = _replace(text, pat, rep, op)
        elif op in (",", ",,"):
            out = text.lower() if op == ",," else text[:1].lower() + text[1:]
        elif op in ("^", "^^"):
            out = text.upper() if op == "^^" else text[:1].upper() + text[1:]
        else:
            off, _, length = arg.partition(":")
            a, miss_a = self.arithmetic(off, line)
            b, miss_b = self.arithmetic(length, line) if length else (str(len(text)), ())
            if miss_a or miss_b:
                return [_Frag(token, False, line, miss_a + miss_b, True)]
            start = int(a) if int(a) >= 0 else max(len(text) + int(a), 0)
            n = int(b)
            out = text[start:start + n] if n >= 0 else text[start:len(text) + n]
        return [_Frag(out, not quoted, line, quoted=quoted)]

    # -- arithmetic ---------------------------------------------------------------------------------
    def arithmetic(self, expr: str, line: int) -> tuple[str, tuple[str, ...]]:
        """``$(( expr ))``: integer arithmetic over variables; unknown names leave it unresolved."""
        return self.arithmetic_item(expr, line)[:2]

    def arithmetic_item(self, expr: str, line: int, depth: int = 0) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
        """The value of ``$(( expr ))``, the names it could not resolve and the defaulted variables it used."""
        item = self.string(scan_word(expr, self.path, line, in_double_quotes=True))
        if item.unresolved:
            return "$((" + expr + "))", item.unresolved, item.defaulted
        text = item.text.strip()
        missing: list[str] = []
        defaulted: list[str] = list(item.defaulted)

        def value_of(m: re.Match[str]) -> str:
            v = self.lookup(m.group(0))
            first = v.first() if v is not None else None
            if first is None or first.unresolved or depth > 8:
                missing.append(m.group(0))
                return "0"
            defaulted.extend(first.defaulted)
            inner = first.text.strip() or "0"
            if re.fullmatch(r"-?\d+", inner):
                return f"({inner})"
            result, miss, dflt = self.arithmetic_item(inner, line, depth + 1)
            missing.extend(miss)
            defaulted.extend(dflt)
            return f"({result})" if not miss else "0"

        text = _NAME.sub(value_of, text)
        used = tuple(dict.fromkeys(defaulted))
        if missing:
            return "$((" + expr + "))", tuple(missing), used
        try:
            return str(_arith_eval(ast.parse(_pythonise(text), mode="eval").body)), (), used
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError, RecursionError):
            return "$((" + expr + "))", ("$((" + expr + "))",), used


def _splittable(item: Item) -> bool:
    """Values are field-split, except a template's ``<placeholder>`` (one value to fill in); a command
    substitution kept as written stays one piece (see _pieces)."""
    return not any(n.startswith("<") for n in item.unresolved)


def _pieces(text: str) -> list[str]:
    """``text`` split on IFS white space, except inside a ``$(...)`` or backquoted command kept as written
    (its output is unknown, so its own spaces are not the value's)."""
    out, cur, depth, tick, i = [], [], 0, False, 0
    while i < len(text):
        c = text[i]
        if c == "`":
            tick = not tick
        elif text.startswith("$(", i):
            depth += 1
            cur.append("$(")
            i += 2
            continue
        elif c == ")" and depth:
            depth -= 1
        elif c in " \t\n" and not depth and not tick:
            out.append("".join(cur))
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


def _split_fields(frags: list[_Frag], line: int) -> list[Word]:
    """Field splitting on IFS whitespace of the splittable fragments, then the fields as words."""
    fields: list[list[_Frag]] = []
    cur: list[_Frag] | None = None
    for f in frags:
        if f is _BREAK:
            fields.append(cur if cur is not None else [])
            cur = []
            continue
        if not f.split:
            cur = (cur or []) + [f]
            continue
        pieces = _pieces(f.text)
        for k, piece in enumerate(pieces):
            if k:
                if cur is not None:
                    fields.append(cur)
                cur = None
            if piece:
                names = tuple(n for n in f.unresolved if mentions(piece, n))
                cur = (cur or []) + [_Frag(piece, False, f.line, names, False, f.defaulted)]
    if cur is not None:
        fields.append(cur)
    out = []
    for fl in fields:
        text = "".join(f.text for f in fl)
        if not text and not any(f.quoted for f in fl):
            continue
        start = next((f.line for f in fl if f.text), line)
        out.append(Word(text, start, tuple(dict.fromkeys(n for f in fl for n in f.unresolved)),
                        tuple(dict.fromkeys(n for f in fl for n in f.defaulted))))
    return out


def _join(frags: list[_Frag], line: int) -> Item:
    text = "".join(" " if f is _BREAK else f.text for f in frags)
    start = next((f.line for f in frags if f.text), line)
    return Item(text, start, tuple(dict.fromkeys(n for f in frags for n in f.unresolved)),
                tuple(dict.fromkeys(n for f in frags for n in f.defaulted)))


def mentions(text: str, name: str) -> bool:
    """Whether an expanded piece still holds the unresolved expansion ``name`` (kept as written)."""
    if name == COMMAND_OUTPUT:
        return "$(" in text or "`" in text
    if name.startswith("$(("):
        return "$((" in text
    if name.startswith("<"):
        return name in text
    return f"${name}" in text or f"${{{name}" in text or f"${{#{name}" in text


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern).removesuffix(r"\Z").removeprefix("(?s:").removesuffix(")"), re.S)


def _remove(text: str, pattern: str, op: str) -> str:
    rx = _glob(pattern)
    ends = range(len(text) + 1) if op in ("#", "%") else range(len(text), -1, -1)
    for k in ends:
        if op.startswith("#") and rx.fullmatch(text[:k]):
            return text[k:]
        if op.startswith("%") and rx.fullmatch(text[len(text) - k:]):
            return text[:len(text) - k]
    return text


def _replace(text: str, pattern: str, rep: str, op: str) -> str:
    if not pattern:
        return text
    rx = _glob(pattern)
    if op == "/#":
        for k in range(len(text), -1, -1):
            if rx.fullmatch(text[:k]):
                return rep + text[k:]
        return text
    if op == "/%":
        for k in range(len(text) + 1):
            if rx.fullmatch(text[k:]):
                return text[:k] + rep
        return text
    out, i, done = [], 0, False
    while i <= len(text):
        match = None
        if not done:
            for k in range(len(text), i, -1):
                if rx.fullmatch(text[i:k]):
                    match = k
                    break
        if match is not None:
            out.append(rep)
            i = match
            done = op == "/"
            continue
        if i < len(text):
            out.append(text[i])
        i += 1
    return "".join(out)


def _pythonise(text: str) -> str:
    """Bash arithmetic → a Python expression over integers (``&&``, ``||``, ``!``, ``/`` truncating)."""
    text = re.sub(r"\b0+(\d)", r"\1", text)
    text = text.replace("&&", " and ").replace("||", " or ")
    return re.sub(r"!(?!=)", " not ", text)


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _tmod(a: int, b: int) -> int:
    return a - b * _tdiv(a, b)


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _tdiv,
        ast.FloorDiv: _tdiv, ast.Mod: _tmod, ast.Pow: operator.pow, ast.LShift: operator.lshift,
        ast.RShift: operator.rshift, ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_CMP = {ast.Lt: operator.lt, ast.Gt: operator.gt, ast.LtE: operator.le, ast.GtE: operator.ge, ast.Eq: operator.eq,
        ast.NotEq: operator.ne}


def _arith_eval(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        left, right = _arith_eval(node.left), _arith_eval(node.right)
        if isinstance(node.op, ast.Pow) and right > 64:
            raise ValueError("exponent too large")
        return _BIN[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        v = _arith_eval(node.operand)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Not):
            return int(not v)
        if isinstance(node.op, ast.Invert):
            return ~v
    if isinstance(node, ast.BoolOp):
        values = [_arith_eval(v) for v in node.values]
        return int(all(values)) if isinstance(node.op, ast.And) else int(any(values))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        return int(_CMP[type(node.ops[0])](_arith_eval(node.left), _arith_eval(node.comparators[0])))
    raise ValueError("unsupported arithmetic")
