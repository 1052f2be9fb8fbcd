"""A small interpreter for launch scripts: enough of bash to find the training command and its arguments.

Statements are scanned (``shell_scan``) and run in file order: assignments (also ``export``, ``declare``,
``local``, arrays and ``+=``), ``unset``, ``read`` / ``mapfile`` from here-strings and here-documents, and
``eval``; every other command is expanded (``shell_expand``: bash's parameter expansion, arithmetic, field
splitting and quote removal) and returned with its inline environment (``A=1 torchrun ...``). Control flow
is not followed. Command substitution, positional parameters and variables the script and the launch
environment do not set stay unresolved: the value is kept as written and its name reported, so the linter
never guesses a value.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from debugtune.engine.prevent.readers.shell_expand import Expander, Item, Value, Word
from debugtune.engine.prevent.readers.shell_scan import ASSIGN, RawWord, Scanner, Statement

__all__ = ["Command", "Shell", "Word"]

_SKIP = {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac", "function",
         "{", "}", "!", "[[", "]]", "[", "test", "echo", "printf", "set", "cd", "mkdir", "exit", "return", "source",
         ".", "shift", "wait", "sleep", "trap", "rm", "cp", "mv", "ln", "touch", "cat", "true", "false",
         "pushd", "popd", "ulimit", "module", "conda", "nvidia-smi", "hostname", "date", "sed", "awk", "grep",
         "let", "getopts", "alias", "local_rank", "tee", "pip", "git", "wget", "curl"}
_PREFIX_KEYWORDS = {"then", "do", "else", "{", "!", "time", "exec", "nohup", "command", "builtin"}
_DECLARE = {"export", "declare", "local", "readonly", "typeset"}
_EVAL_DEPTH = 4
_SHELLS = {"bash", "sh", "zsh", "dash"}


@dataclass
class Command:
    """A simple command after expansion, with its inline environment assignments."""

    words: list[Word]
    env: dict[str, str]
    line: int


class Shell:
    """Runs the assignments of a script and returns its commands, expanded."""

    def __init__(self, path: str, env: dict[str, str] | None = None):
        self.path = path
        self.vars: dict[str, Value] = {k: Value([Item(str(v), 0)]) for k, v in (env or {}).items()}
        self.exported: set[str] = set(env or {})
        self._x = Expander(path, self.vars.get, self._set)
        self._depth = 0

    def run(self, text: str) -> list[Command]:
        """Run the statements of ``text``; ``if``/``elif``/``else`` take the first branch whose condition is
        true or cannot be decided (an unresolved variable), other control flow runs in file order."""
        commands: list[Command] = []
        sts = Scanner(text, self.path).statements()
        branches: list[_Branch] = []
        i = 0
        while i < len(sts):
            st = sts[i]
            kw = st.words[0].plain() if st.words else ""
            if kw in ("if", "elif"):
                parts = [(st.words[1:], st.end)]
                j = i + 1
                while j < len(sts) and (sts[j].words[0].plain() if sts[j].words else "") != "then":
                    parts.append((sts[j].words, sts[j].end))
                    j += 1
                if kw == "if":
                    branches.append(_Branch(all(b.active for b in branches)))
                b = branches[-1] if branches else _Branch(True)
                value = self._condition(parts) if b.enclosing and not b.taken else False
                b.active = b.enclosing and not b.taken and value is not False
                b.taken = b.taken or b.active
                if j < len(sts):
                    sts[j] = Statement(sts[j].line, sts[j].words[1:], sts[j].stdin, sts[j].docs, sts[j].end)
                i = j
                continue
            if kw in ("else", "fi") and branches:
                b = branches[-1]
                if kw == "else":
                    b.active, b.taken = b.enclosing and not b.taken, True
                else:
                    branches.pop()
                st = Statement(st.line, st.words[1:], st.stdin, st.docs, st.end)
            i += 1
            if all(b.active for b in branches):
                cmd = self._statement(st)
                if cmd is not None:
                    commands += cmd
        return commands

    # -- conditions ---------------------------------------------------------------------------------
    def _condition(self, parts: list[tuple[list[RawWord], str]]) -> bool | None:
        """A condition list joined by ``&&`` / ``||`` (left to right, as bash does); None when undecided."""
        value: bool | None = None
        op = ""
        for words, end in parts:
            one = self._test(words)
            if not op:
                value = one
            elif op == "&&":
                value = False if value is False or one is False else (None if None in (value, one) else True)
            elif op == "||":
                value = True if value is True or one is True else (None if None in (value, one) else False)
            op = end if end in ("&&", "||") else ""
        return value

    def _test(self, raw: list[RawWord]) -> bool | None:
        """``[ ... ]``, ``[[ ... ]]`` or ``test ...`` over strings and integers; None for anything else
        (a command's exit status, a file test, an unresolved value)."""
        words = list(raw)
        negate = False
        while words and words[0].plain() == "!":
            negate, words = not negate, words[1:]
        if words and words[0].plain() in ("[", "[[", "test"):
            words = words[1:]
        if words and words[-1].plain() in ("]", "]]"):
            words = words[:-1]
        elif raw and raw[0].plain() not in ("[", "[[", "test") and not (words and words[0].plain().startswith("-")):
            if not (len(words) == 3 and words[1].plain() in _BINARY):
                return None
        items = [self._x.string(w) for w in words]
        if any(it.unresolved for it in items):
            return None
        result = _evaluate([it.text for it in items])
        return None if result is None else result != negate


    def words(self, text: str, line: int) -> list[Word]:
        """``text`` as the words of one command line (quotes, expansions, splitting), all on ``line``."""
        out = []
        for st in Scanner(text.replace("\n", " "), self.path).statements():
            for w in st.words:
                out += [Word(f.text, line, f.unresolved, f.defaulted) for f in self._x.fields(w)]
        return out

    def array(self, name: str) -> list[Word]:
        """The elements of a variable as words (an array's elements, a scalar's one value)."""
        value = self.vars.get(name)
        return [] if value is None else [Word(i.text, i.line, i.unresolved, i.defaulted) for i in value.items]

    def exported_env(self) -> dict[str, str]:
        return {k: " ".join(i.text for i in v.items) for k, v in self.vars.items() if k in self.exported}

    # -- statements ---------------------------------------------------------------------------------
    def _statement(self, st: Statement) -> list[Command] | None:
        raw = st.words
        while raw and raw[0].plain() in _PREFIX_KEYWORDS:
            raw = raw[1:]
        if not raw:
            return None
        first = raw[0].plain()
        if first in _DECLARE:
            self._declare(first, raw[1:])
            return None
        k = 0
        while k < len(raw) and _assignment(raw[k]):
            k += 1
        if k == len(raw):
            for w in raw:
                self._assign(w)
            return None
        inline = {}
        for w in raw[:k]:
            name, value = self._value(w)
            inline[name] = " ".join(i.text for i in value.items)
        first = raw[k].plain()
        if first == "unset":
            for w in raw[1:]:
                self.vars.pop(w.plain(), None)
            return None
        if first in ("read", "mapfile", "readarray"):
            self._read(first, raw[1:], st, inline)
            return None
        if first == "eval":
            return self._eval(raw[1:])
        if first in _SKIP or first.startswith(("[", "#")):
            return None
        words = [f for w in raw[k:] for f in self._x.fields(w)]
        nested = self._nested(words, st)
        if nested is not None:
            return nested
        return [Command(words, inline, st.line)] if words else None

    def _nested(self, words: list[Word], st: Statement) -> list[Command] | None:
        """``bash -c "SCRIPT"`` (also under ``srun``) and ``sbatch <<EOF ... EOF``: the inner script's commands."""
        if self._depth >= _EVAL_DEPTH:
            return None
        text = None
        for i, w in enumerate(words):
            if w.text.rsplit("/", 1)[-1] in _SHELLS:
                j = i + 1
                while j < len(words) and words[j].text.startswith("-") and "c" not in words[j].text[1:]:
                    j += 1
                if j + 1 < len(words) and words[j].text.startswith("-") and "c" in words[j].text[1:]:
                    text = words[j + 1].text
                elif j >= len(words) and st.docs:
                    here = self._stdin(st)
                    text = here.text if here else None
                break
        if text is None and words and words[0].text in ("sbatch", "qsub", "bsub") and st.docs:
            item = self._stdin(st)
            text = item.text if item else None
        if text is None:
            return None
        self._depth += 1
        try:
            return self.run(text)
        finally:
            self._depth -= 1

    def _declare(self, builtin: str, raw: list[RawWord]) -> None:
        export = builtin == "export"
        for w in raw:
            flag = w.plain()
            if flag.startswith("-"):
                export = export or "x" in flag
                continue
            name = self._assign(w) if _assignment(w) else self._x.string(w).text
            if export and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
                self.exported.add(name)

    def _eval(self, raw: list[RawWord]) -> list[Command] | None:
        """``eval ARGS``: the arguments joined with spaces, run as script text (how Megatron's CI builds argv)."""
        if self._depth >= _EVAL_DEPTH:
            return None
        fields = [f for w in raw for f in self._x.fields(w)]
        if any(f.unresolved for f in fields):
            return None
        self._depth += 1
        try:
            return self.run(" ".join(f.text for f in fields)) or None
        finally:
            self._depth -= 1

    def _read(self, builtin: str, raw: list[RawWord], st: Statement, inline: dict[str, str]) -> None:
        """``read [-r] [-a NAME] [-d DELIM] NAME...`` and ``mapfile -t NAME`` from a here-string or -document."""
        data = self._stdin(st)
        if data is None:
            return
        opts, names, i = {}, [], 0
        words = [f.text for w in raw for f in self._x.fields(w)]
        while i < len(words):
            if words[i].startswith("-") and len(words[i]) > 1:
                flag = words[i][1:]
                takes = next((c for c in flag if c in ("adpntNu" if builtin == "read" else "dnOsuCc")), None)
                for c in flag:
                    opts[c] = ""
                if takes:
                    opts[takes] = words[i + 1] if i + 1 < len(words) else ""
                    i += 1
            else:
                names.append(words[i])
            i += 1
        text, line, missing = data.text, data.line, data.unresolved
        if builtin in ("mapfile", "readarray"):
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            self._set(names[0] if names else "MAPFILE", Value([Item(x, line, missing) for x in lines], True))
            return
        if opts.get("d", None) != "":
            text = text.split("\n")[0]
        ifs = inline.get("IFS")
        if ifs is None:
            v = self.vars.get("IFS")
            ifs = v.items[0].text if v is not None and v.items else " \t\n"
        fields = _ifs_split(text, ifs)
        if "a" in opts:
            self._set(opts["a"], Value([Item(x, line, missing) for x in fields], True))
            return
        names = names or ["REPLY"]
        for k, name in enumerate(names):
            if k == len(names) - 1:
                rest = _ifs_rest(text, ifs, k)
                self._set(name, Value([Item(rest, line, missing)]))
            else:
                self._set(name, Value([Item(fields[k] if k < len(fields) else "", line, missing)]))

    def _stdin(self, st: Statement) -> Item | None:
        if st.docs:
            body, expand = st.docs[-1]
            return self._x.text(body, st.line) if expand else Item(body, st.line)
        words = [w for kind, w in st.stdin if kind == "word" and w is not None]
        if words:
            item = self._x.string(words[-1])
            return Item(item.text + "\n", item.line, item.unresolved)
        return None

    # -- assignments --------------------------------------------------------------------------------
    def _set(self, name: str, value: Value) -> None:
        self.vars[name] = value

    def _value(self, w: RawWord) -> tuple[str, Value]:
        m = ASSIGN.match(w.literal_prefix())
        assert m is not None
        if w.array is not None:
            items = [Item(f.text, f.line, f.unresolved, f.defaulted) for el in w.array for f in self._x.fields(el)]
            return m.group(1), Value(items, True)
        rest = RawWord(w.line, list(w.parts))
        rest.parts[0] = type(rest.parts[0])("lit", rest.parts[0].text[m.end():])
        return m.group(1), Value([self._x.string(rest)])

    def _assign(self, w: RawWord) -> str:
        m = ASSIGN.match(w.literal_prefix())
        assert m is not None
        name, value = self._value(w)
        index, plus = m.group(2), m.group(3)
        old = self.vars.get(name)
        if index:
            self._assign_element(name, index[1:-1], value, old, w.line)
            return name
        if plus and old is not None:
            if value.array:
                value = Value(old.items + value.items, True)
            else:
                first = old.first() or Item("", w.line)
                add = value.first() or Item("", w.line)
                value = Value([Item(first.text + add.text, first.line, first.unresolved + add.unresolved,
                                    first.defaulted + add.defaulted)] + old.items[1:], old.array)
        self.vars[name] = value
        return name

    def _assign_element(self, name: str, index: str, value: Value, old: Value | None, line: int) -> None:
        n, missing = self._x.arithmetic(index, line)
        items = list(old.items) if old is not None else []
        if missing or not n.lstrip("-").isdigit():
            return
        k = int(n)
        while len(items) <= k:
            items.append(Item("", line))
        items[k] = value.first() or Item("", line)
        self.vars[name] = Value(items, True)


def _assignment(w: RawWord) -> bool:
    m = ASSIGN.match(w.literal_prefix())
    return m is not None


def _ifs_split(text: str, ifs: str) -> list[str]:
    """Fields of ``text`` split on IFS as ``read`` splits them: IFS white space collapses and trims, each
    other IFS character ends one field."""
    white = "".join(c for c in ifs if c in " \t\n")
    other = "".join(c for c in ifs if c not in " \t\n")
    text = text.strip(white) if white else text
    if not text:
        return []
    ws = f"[{re.escape(white)}]*" if white else ""
    alternatives = [f"{ws}[{re.escape(other)}]{ws}"] if other else []
    if white:
        alternatives.append(f"[{re.escape(white)}]+")
    return re.split("|".join(alternatives), text) if alternatives else [text]


def _ifs_rest(text: str, ifs: str, skip: int) -> str:
    """What ``read`` gives its last name: the input after the first ``skip`` fields, outer IFS space removed."""
    white = "".join(c for c in ifs if c in " \t\n")
    rest = text.strip(white) if white else text
    for _ in range(skip):
        parts = re.split(f"[{re.escape(ifs)}]+", rest, maxsplit=1) if ifs else [rest]
        rest = parts[1] if len(parts) > 1 else ""
    return rest.strip(white) if white else rest


@dataclass
class _Branch:
    """One ``if`` being run: whether its enclosing code runs, whether a branch was taken, whether this one runs."""

    enclosing: bool
    taken: bool = False
    active: bool = False


_BINARY = {"=", "==", "!=", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "=~", "<", ">"}
_INT_OPS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__,
            "-ge": int.__ge__}


def _evaluate(args: list[str]) -> bool | None:
    """The truth of a test command's arguments (after expansion)."""
    if not args:
        return False
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2:
        op, value = args
        if op == "-z":
            return value == ""
        if op == "-n":
            return value != ""
        if op == "!":
            return value == ""
        return None
    if len(args) == 3:
        a, op, b = args
        if op in ("=", "=="):
            return fnmatch.fnmatchcase(a, b) if any(ch in b for ch in "*?[") else a == b
        if op == "!=":
            return a != b
        if op in _INT_OPS:
            try:
                return _INT_OPS[op](int(a), int(b))
            except ValueError:
                return None
        if op == "=~":
            try:
                return re.search(b, a) is not None
            except re.error:
                return None
        if op in ("<", ">"):
            return a < b if op == "<" else a > b
    return None
