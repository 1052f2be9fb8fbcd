"""Encode Megatron-LM's own configuration checks as prevention rules (``cases/prevention/megatron-checks.ttl``).

For every configuration-only check of ``bench/lint_coverage.py`` that no written rule encodes, the condition
under which the check fails (the conditions of the branches around it, and the negated assertion) is
translated from its syntax tree into a SPARQL condition over the config graph. Only what the translation
understands is encoded: ``args.x`` / ``self.x`` of keys that have a command-line option, constants (enum
members by name), ``and`` / ``or`` / ``not``, comparisons, ``is None``, ``in``, ``len`` and integer
arithmetic; a check that reads a local variable, calls a function, or reads a key that ``validate_args``
assigns before the check (so the value checked is not the one written) is left out. Each candidate rule is
kept only when a search over values finds a configuration that violates it and one that passes (checked by
evaluating the check's own condition), the linter agrees on both, and the rule stays quiet on every valid
reference configuration (cases/prevention/valid) and on every configuration of the real corpus
(bench/lint_corpus.py). The first release that has the same check is its ``dt:minVersion``.

    python bench/lint_framework_rules.py --megatron DIR --tags-root DIR --corpus-cache DIR [--transformers FILE]

``--megatron`` is the tree the keys come from (main @ d98e8a6), ``--tags-root`` holds one extracted tree per
release tag (as bench/lint_keys_megatron.py extracts them).
"""

from __future__ import annotations

import argparse
import ast
import csv
import itertools
import json
import math
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench import lint_coverage  # noqa: E402

OUT = HERE.parent / "cases" / "prevention" / "megatron-checks.ttl"
MUTANTS = HERE / "lint_check_mutants.tsv"
TAGS = ("core_v0.9.0", "core_v0.10.0", "core_v0.11.0", "core_v0.12.0", "core_v0.13.0", "core_v0.14.0",
        "core_v0.15.0", "core_v0.16.0", "core_v0.17.0", "core_v0.18.0", "core_v0.19.0")
_PREFIX = {"arguments.py": "MEGA", "transformer_config.py": "MEGT", "model_parallel_config.py": "MEGM",
           "parallel_state.py": "MEGP"}
_PARALLEL = re.compile(r"parallel_size|world_size|num_layers|num_attention_heads|num_query_groups|hidden_size")
_BATCH = re.compile(r"batch_size|micro_batch|global_batch")


# Module-level names a check compares a config field with: torch dtypes, torch.nn.functional, and the
# activation functions core_transformer_config_from_args assigns (cases/prevention/derived-megatron-checks.ttl
# names them the same way).
_MODULES = ("torch", "F")
_FUNCTIONS = ("quick_gelu", "squared_relu")


class Unsupported(Exception):
    pass


@dataclass
class Key:
    name: str
    spec: Any
    var: str


class Translator:
    """One check's failure condition as SPARQL, as a Python evaluator, and as words."""

    def __init__(self, keys: Any, table: dict[str, str], root: str, derivable: dict[str, list[str]] | None = None):
        self.keys, self.table, self.root = keys, table, root
        self.derivable = derivable or {}
        self.linter: Any = None
        self.used: dict[str, Key] = {}
        self.lists: set[str] = set()

    def key(self, attr: str) -> Key:
        """A key the check reads: an argument, a config field a --yaml-cfg sets (``settings:``), or a key a
        derivation computes (with the arguments that produce its values)."""
        name = self.table.get(attr, attr)
        spec = self.keys.keys.get(name)
        if spec is None or spec.derived and name != "world_size" and name not in self.derivable:
            raise Unsupported(f"{attr}: not a key")
        if spec.value_type == "any" and name not in self.derivable and not spec.options:
            raise Unsupported(f"{attr}: a config field of no known type")
        return self.used.setdefault(name, Key(name, spec, "?k_" + name))

    # -- SPARQL -------------------------------------------------------------------------------------------
    def sparql(self, n: ast.AST) -> str:
        if isinstance(n, ast.BoolOp):
            op = " && " if isinstance(n.op, ast.And) else " || "
            return "(" + op.join(self.sparql(v) for v in n.values) + ")"
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return f"!({self.sparql(n.operand)})"
        if isinstance(n, ast.Compare):
            parts, left = [], n.left
            for op, right in zip(n.ops, n.comparators, strict=True):
                parts.append(self._compare(left, op, right))
                left = right
            return "(" + " && ".join(parts) + ")"
        if self._is_key(n):
            k = self.key(n.attr)
            kind = k.spec.value_type
            if kind == "bool":
                return f"(BOUND({k.var}) && {k.var} = true)"
            if kind == "list":
                self.lists.add(k.name)
                return f"(BOUND({k.var}_len) && {k.var}_len > 0)"
            if kind in ("int", "float"):
                return f"(BOUND({k.var}) && {k.var} != 0)"
            return f'(BOUND({k.var}) && STR({k.var}) != "")'
        if isinstance(n, ast.Constant) and isinstance(n.value, bool):
            return "true" if n.value else "false"
        if _call(n, "bool", 1):
            return self.sparql(n.args[0])
        if _call(n, "any", 1) and isinstance(n.args[0], (ast.List, ast.Tuple)) and n.args[0].elts:
            return "(" + " || ".join(self.sparql(e) for e in n.args[0].elts) + ")"
        if _call(n, "isinstance", 2) and self._is_key(n.args[0]):
            return self._isinstance(n.args[0], n.args[1])
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "math.isfinite" and len(n.args) == 1:
            v = self._term(n.args[0])  # NaN is not equal to itself; the infinities are beyond every double
            return f'({v} = {v} && {v} < "INF"^^xsd:double && {v} > "-INF"^^xsd:double)'
        raise Unsupported(ast.unparse(n))

    def _isinstance(self, target: ast.Attribute, types: ast.AST) -> str:
        """``isinstance(x, T)`` of a key whose values argparse converts to one scalar type: whether that type is
        (a subclass of) T, for a set value. A key of no single type (a list-or-int option) or a list (one item
        reaches TransformerConfig as the item, argument_utils.py:343) is read only through a derivation."""
        k = self.key(target.attr)
        kind = _PY_TYPES.get(k.spec.value_type)
        names = types.elts if isinstance(types, ast.Tuple) else [types]
        wanted = [_PY_TYPES.get(getattr(t, "id", "")) for t in names]
        if kind is None or kind is list or None in wanted:  # a list option may reach the config as its item
            raise Unsupported(f"isinstance of {k.name} ({k.spec.value_type})")
        return f"BOUND({k.var})" if any(issubclass(kind, w) for w in wanted if w is not None) else "false"

    def _is_key(self, n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == self.root

    def _term(self, n: ast.AST) -> str:
        if self._is_key(n):
            return self.key(n.attr).var
        if _call(n, "bool", 1) or _call(n, "any", 1):
            return f"IF({self.sparql(n)}, 1, 0)"
        if isinstance(n, ast.Constant):
            if n.value is None or isinstance(n.value, bool):
                raise Unsupported("None/bool in arithmetic")
            return json.dumps(n.value) if isinstance(n.value, str) else repr(n.value)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and \
                (n.value.id[:1].isupper() or n.value.id in _MODULES):
            return json.dumps(n.attr)  # an enum member (or torch.bfloat16, F.silu): its name, as derived values hold it
        if isinstance(n, ast.Name) and n.id in _FUNCTIONS:
            return json.dumps(n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return f"(-{self._term(n.operand)})"
        if isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and len(n.values) == 2 and \
                self._is_key(n.values[0]) and isinstance(n.values[1], ast.Constant) and \
                isinstance(n.values[1].value, (int, float)) and not isinstance(n.values[1].value, bool):
            k = self.key(n.values[0].attr)  # `x or 0`: the value, or the constant where unset (or zero)
            return f"COALESCE({k.var}, {n.values[1].value!r})"
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "len" and len(n.args) == 1 and \
                self._is_key(n.args[0]):
            k = self.key(n.args[0].attr)
            self.lists.add(k.name)
            return f"COALESCE({k.var}_len, 0)"
        if isinstance(n, ast.BinOp):
            a, b = self._number(n.left), self._number(n.right)
            if isinstance(n.op, ast.Mod):
                return f"({a} - {b} * FLOOR({a} / {b}))"
            if isinstance(n.op, ast.FloorDiv):
                return f"FLOOR({a} / {b})"
            ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
            if type(n.op) in ops:
                return f"({a} {ops[type(n.op)]} {b})"
        raise Unsupported(ast.unparse(n))

    def _number(self, n: ast.AST) -> str:
        """An operand of arithmetic: a flag counts as 1 or 0, as Python's ``True + 1`` does."""
        if self._is_key(n) and self.key(n.attr).spec.value_type == "bool":
            return f"IF(COALESCE({self.key(n.attr).var}, false), 1, 0)"
        return self._term(n)

    def _compare(self, left: ast.AST, op: ast.cmpop, right: ast.AST) -> str:
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and isinstance(right.value, bool) \
                and self._is_key(left):
            k = self.key(left.attr)
            return f"(BOUND({k.var}) && {k.var} = {'true' if right.value else 'false'})"
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None:
            if not self._is_key(left):
                raise Unsupported("is None of a non-key")
            k = self.key(left.attr)
            return f"!BOUND({k.var})" if isinstance(op, ast.Is) else f"BOUND({k.var})"
        if isinstance(op, (ast.In, ast.NotIn)):
            if isinstance(right, ast.BoolOp) and isinstance(right.op, ast.Or) and len(right.values) == 2 \
                    and self._is_key(right.values[0]) and isinstance(right.values[1], (ast.List, ast.Tuple)) \
                    and not right.values[1].elts:
                right = right.values[0]  # `x in (key or [])`: nothing is in an unset list
            if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and self._is_key(left) and \
                    any(isinstance(e, ast.Constant) and e.value is None for e in right.elts):
                rest = [e for e in right.elts if not (isinstance(e, ast.Constant) and e.value is None)]
                k = self.key(left.attr)
                unset = f"!BOUND({k.var})"
                if not rest:
                    return unset if isinstance(op, ast.In) else f"!{unset}"
                inner = self._compare(left, op, ast.Tuple(rest, ast.Load()))
                return f"({unset} || {inner})" if isinstance(op, ast.In) else f"(!{unset} && {inner})"
            if isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                items = ", ".join(self._term(e) for e in right.elts)
                t = f"STR({self._term(left)})" if self._is_key(left) else self._term(left)
                items = ", ".join(f"STR({x})" if not x.startswith('"') else x for x in items.split(", "))
                return f"({t} {'IN' if isinstance(op, ast.In) else 'NOT IN'} ({items}))"
            if self._is_key(right):
                k = self.key(right.attr)
                if k.spec.value_type != "list":
                    raise Unsupported("in of a non-list")
                value = self._term(left)
                m = f"?m_{k.name}"
                exists = f"EXISTS {{ ?c <{lint_coverage_cfg()}{k.name}> {m} FILTER(STR({m}) = STR({value})) }}"
                return exists if isinstance(op, ast.In) else f"!{exists}"
            raise Unsupported("in")
        ops = {ast.Eq: "=", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
        if type(op) not in ops:
            raise Unsupported(type(op).__name__)
        a, b = self._term(left), self._term(right)
        if a.startswith('"') or b.startswith('"'):
            a = f"STR({a})" if not a.startswith('"') else a
            b = f"STR({b})" if not b.startswith('"') else b
        return f"({a} {ops[type(op)]} {b})"

    def query(self, condition: ast.AST) -> str:
        body = self.sparql(condition)
        binds = [f"OPTIONAL {{ ?c cfg:{k.name} {k.var} }}" for k in self.used.values()]
        binds += [f"OPTIONAL {{ ?c cfg:{n}.length ?k_{n}_len }}" for n in sorted(self.lists)]
        return "ASK { ?c a dt:LaunchConfiguration .\n      " + "\n      ".join(binds) + f"\n      FILTER({body}) }}"

    # -- evaluation (the check's own semantics, for finding examples) -------------------------------------
    def evaluate(self, n: ast.AST, values: dict[str, Any]) -> Any:
        if isinstance(n, ast.BoolOp):
            v = None
            for part in n.values:  # Python's and/or: the deciding operand's value
                v = self.evaluate(part, values)
                if bool(v) != isinstance(n.op, ast.And):
                    return v
            return v
        if isinstance(n, ast.UnaryOp):
            v = self.evaluate(n.operand, values)
            return (not v) if isinstance(n.op, ast.Not) else -v
        if isinstance(n, ast.Compare):
            left = self.evaluate(n.left, values)
            for op, right_node in zip(n.ops, n.comparators, strict=True):
                right = self.evaluate(right_node, values)
                if not _cmp(op, left, right):
                    return False
                left = right
            return True
        if self._is_key(n):
            return values.get(self.table.get(n.attr, n.attr))
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Attribute):
            return n.attr
        if isinstance(n, ast.Name) and n.id in _FUNCTIONS:
            return n.id
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return [self.evaluate(e, values) for e in n.elts]
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "len":
            return len(self.evaluate(n.args[0], values) or [])
        if _call(n, "bool", 1):
            return bool(self.evaluate(n.args[0], values))
        if _call(n, "any", 1):
            return any(self.evaluate(n.args[0], values) or [])
        if _call(n, "isinstance", 2):
            names = n.args[1].elts if isinstance(n.args[1], ast.Tuple) else [n.args[1]]
            types = tuple(_PY_TYPES[getattr(t, "id", "")] for t in names if getattr(t, "id", "") in _PY_TYPES)
            return isinstance(self.evaluate(n.args[0], values), types)
        if isinstance(n, ast.Call) and ast.unparse(n.func) == "math.isfinite" and len(n.args) == 1:
            return math.isfinite(self.evaluate(n.args[0], values))
        if isinstance(n, ast.BinOp):
            a, b = self.evaluate(n.left, values), self.evaluate(n.right, values)
            ops = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
                   ast.Div: lambda x, y: x / y, ast.FloorDiv: lambda x, y: x // y, ast.Mod: lambda x, y: x % y}
            return ops[type(n.op)](a, b)
        raise Unsupported(ast.unparse(n))

    def words(self, n: ast.AST) -> str:
        """The condition in the command line's terms."""
        text = ast.unparse(n)
        for attr in sorted({m for m in re.findall(rf"\b{self.root}\.([A-Za-z_]\w*)", text)}, key=len, reverse=True):
            k = self.used.get(self.table.get(attr, attr))
            if k is not None:
                opt = (k.spec.options or k.spec.true_flags or k.spec.false_flags or (k.name,))[0]
                text = re.sub(rf"\b{self.root}\.{attr}\b", opt, text)
        return text


def _call(n: ast.AST, name: str, nargs: int) -> bool:
    return isinstance(n, ast.Call) and getattr(n.func, "id", "") == name and len(n.args) == nargs and not n.keywords


_PY_TYPES: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool, "list": list}


def lint_coverage_cfg() -> str:
    from debugtune.engine.prevent.vocab import CFG

    return CFG


def _cmp(op: ast.cmpop, a: Any, b: Any) -> bool:
    if isinstance(op, ast.Is):
        return a is b
    if isinstance(op, ast.IsNot):
        return a is not b
    if isinstance(op, ast.In):
        return a in (b or [])
    if isinstance(op, ast.NotIn):
        return a not in (b or [])
    if isinstance(op, ast.Eq):
        return a == b
    if isinstance(op, ast.NotEq):
        return a != b
    if a is None or b is None:
        raise Unsupported("comparison with an unset value")
    return {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b}[type(op)]


@dataclass(frozen=True)
class Model:
    """A value the function computes before a check, as a derivation rule models it (``dt:modelsExpression``
    ``file:line:expression``: from that line on, the expression denotes the derived key)."""

    key: str
    file: str
    line: int
    expression: str
    assignments: frozenset[str]


def load_models(store: Any) -> tuple[list[Model], dict[str, list[str]]]:
    """The modelled expressions, and the example arguments of every derived key (``dt:exampleArgs``)."""
    models, examples = [], {}
    rows = store.query("""SELECT ?d ?key ?expr ?assign ?ex WHERE { ?d a dt:DerivationRule ; dt:derivesKey ?key .
        OPTIONAL { ?d dt:modelsExpression ?expr } OPTIONAL { ?d dt:modelsAssignment ?assign }
        OPTIONAL { ?d dt:exampleArgs ?ex } }""").dicts()
    assigns: dict[str, set[str]] = {}
    for r in rows:
        assigns.setdefault(r["d"], set())
        if r.get("assign"):
            assigns[r["d"]].add(str(r["assign"]))
        if r.get("ex") is not None:
            examples.setdefault(str(r["key"]), [])
            if str(r["ex"]) not in examples[str(r["key"])]:
                examples[str(r["key"])].append(str(r["ex"]))
    seen = set()
    for r in rows:  # a derivation into the key itself models the assignments it names
        if not r.get("expr") and assigns[r["d"]] and (r["d"], r["key"]) not in seen:
            seen.add((r["d"], r["key"]))
            for file in {a.split(":")[0] for a in assigns[r["d"]]}:
                models.append(Model(str(r["key"]), file, 0, f"{{root}}.{r['key']}", frozenset(assigns[r["d"]])))
    for r in rows:
        if r.get("expr") and (r["d"], r["key"], r["expr"]) not in seen:
            seen.add((r["d"], r["key"], r["expr"]))
            file, line, expr = str(r["expr"]).split(":", 2)
            expr, _, key = expr.partition(" => ")  # a derivation of several keys names the one it denotes
            if key and key != str(r["key"]):
                continue
            models.append(Model(str(r["key"]), file, int(line), expr, frozenset(assigns[r["d"]])))
    return models, examples


def local_constants(path: Path, function: str, line: int) -> dict[str, ast.expr]:
    """Local names the function binds, once, to a literal (``supported = ["rope", "none"]``) before ``line``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, ast.expr] = {}
    seen: set[str] = set()
    for _, fn in lint_coverage._functions(tree, [function]):
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
            for target in targets:
                for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                    if name in seen or getattr(node, "lineno", line) >= line:
                        out.pop(name, None)  # bound more than once, or later: not a constant
                    elif isinstance(node, ast.Assign) and isinstance(target, ast.Name) and _literal(node.value):
                        out[name] = node.value
                    seen.add(name)
    return out


def _literal(n: ast.AST | None) -> bool:
    if isinstance(n, ast.Constant):
        return True
    return isinstance(n, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in n.elts)


def rewrite(cond: ast.AST, models: list[Model], file: str, line: int, root: str,
            constants: dict[str, ast.expr] | None = None) -> ast.AST:
    """The condition with every modelled expression replaced by its derived key (``root.key``), a local
    constant by its literal, and ``getattr(root, "x", None)`` read as ``root.x``."""
    base = file.rsplit("/", 1)[-1]
    constants = constants or {}
    table = {m.expression: m.key for m in sorted(models, key=lambda m: m.line)
             if m.file == base and m.line <= line and "{root}" not in m.expression}

    class _Sub(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            text = ast.unparse(node) if isinstance(node, ast.expr) else None
            if text in table:
                return ast.copy_location(ast.Attribute(ast.Name(root, ast.Load()), table[text], ast.Load()), node)
            if isinstance(node, ast.Name) and node.id in constants:
                return ast.copy_location(constants[node.id], node)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr" and len(node.args) == 3 \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id == root \
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[2], ast.Constant) \
                    and node.args[2].value in (None, False):
                return ast.Attribute(ast.Name(root, ast.Load()), str(node.args[1].value), ast.Load())
            return super().generic_visit(node)

    return ast.fix_missing_locations(_Sub().visit(cond))


def failure(conditions: tuple[str, ...], kind: str) -> ast.AST:
    """The condition under which the check fails: its branch conditions and, for an assert, not its test."""
    parts = [ast.parse(c, mode="eval").body for c in conditions]
    if kind == "assert":
        parts[-1] = ast.UnaryOp(ast.Not(), parts[-1])
    return parts[0] if len(parts) == 1 else ast.BoolOp(ast.And(), parts)


def _assigned_before(path: Path, function: str, line: int, root: str) -> dict[str, set[int]]:
    """Keys the function assigns before ``line`` in a way that can make the checked value differ from the one
    written so that a rule would fire where the check does not: a computed value, or one that clears the key
    (None, False, 0, "none", []). Setting a key to another constant (a deprecated flag's translation, a default
    filled in) only makes the rule miss, and is allowed."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for _, fn in lint_coverage._functions(tree, [function]):
        out: dict[str, set[int]] = {}
        for node in ast.walk(fn):
            if getattr(node, "lineno", line) >= line:
                continue
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                value = node.value
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == root \
                            and (isinstance(node, ast.AugAssign) or _unsafe(value)):
                        out.setdefault(t.attr, set()).add(node.lineno)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                # setattr(args, "x", ...); a loop over names sets defaults only
                out.setdefault(str(node.args[1].value), set()).add(node.lineno)
        return out
    return {}


def _unsafe(value: ast.AST | None) -> bool:
    if isinstance(value, ast.Constant):
        return value.value in (None, False, 0, "none", "")
    if isinstance(value, (ast.List, ast.Tuple)):
        return not value.elts or not all(isinstance(e, ast.Constant) for e in value.elts)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id[:1].isupper():
        return value.attr.lower() in ("none", "disabled", "off")
    return True


def _candidates(k: Key, constants: list[Any], tr: Translator | None = None) -> list[Any]:
    spec = k.spec
    if tr is not None and k.name in tr.derivable:
        return list(tr.derivable[k.name])  # the arguments that give it its values
    own = [c for c in constants if c is not None and not isinstance(c, bool)]
    if spec.value_type == "bool":
        return [True, False]
    words = [c for c in own if isinstance(c, str)]
    if spec.value_type == "list":  # one item each, then the check's items together ('mhc' and 'mlp')
        items = [c for c in words if c in spec.choices] if spec.choices else words
        single = [[c] for c in (spec.choices or words)]
        return single + ([items] if len(items) > 1 else []) + ([] if spec.choices else [["x"]])
    if spec.choices:
        return list(spec.choices)
    last = lambda v: (v < 0, v)  # noqa: E731 - negative values last: argparse takes them, and checks refuse them
    if spec.value_type == "int":
        base = {1, 2, 3, 4, 8, 0, -1}
        for c in own:
            if isinstance(c, (int, float)):
                base |= {int(c), int(c) + 1, int(c) - 1, int(c) * 2}
        return sorted(base, key=last)
    if spec.value_type == "float":
        return sorted({0.0, 0.5, 1.0, 2.0, -1.0} | {float(c) for c in own if isinstance(c, (int, float))}, key=last)
    return words + _example_values(k, tr) + ["x"]


def _example_values(k: Key, tr: Translator | None) -> list[str]:
    """Values a derivation's example arguments give this option (a pipeline layout Megatron can parse)."""
    if tr is None or not k.spec.options:
        return []
    out = []
    for texts in tr.derivable.values():
        for text in texts:
            words = shlex.split(text)
            out += [words[i + 1] for i, w in enumerate(words[:-1]) if w in k.spec.options and words[i + 1] not in out]
    return out


def _default(k: Key, tr: Translator | None = None) -> Any:
    if tr is not None and k.name in tr.derivable:
        return ""
    d = k.spec.defaults
    if k.spec.value_type == "list":
        return list(d) if d else None
    return d[0] if d else None


def examples(tr: Translator, cond: ast.AST) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Violating and passing assignments (keys set differently from their defaults), by search."""
    keys = list(tr.used.values())
    constants = [n.value for n in ast.walk(cond) if isinstance(n, ast.Constant)]
    defaults = {k.name: _default(k, tr) for k in keys}
    options = {k.name: _candidates(k, constants, tr) for k in keys}

    on_graph = tr.linter is not None and any(k.name in tr.derivable for k in keys)
    cache: dict[str, bool | None] = {}

    def value(assign: dict[str, Any]) -> bool | None:
        if on_graph:  # derived keys: the check on the values the derivations give the rendered configuration
            text = render(tr, assign)
            if text is None:
                return None
            if text not in cache:
                try:
                    cache[text] = _holds(tr, cond, tr.linter, text)
                except Exception:  # noqa: BLE001 - an unreadable combination is no example
                    cache[text] = None
            return cache[text]
        try:
            vals = {k: list(v) if isinstance(v, tuple) else v for k, v in {**defaults, **assign}.items()}
            return bool(tr.evaluate(cond, vals))
        except (Unsupported, ZeroDivisionError, TypeError, KeyError, AttributeError):
            return None

    for size in range(1, min(len(keys), 4 if on_graph else 5) + 1):  # a lint per candidate on the graph
        for subset in itertools.combinations(keys, size):
            for combo in itertools.islice(itertools.product(*(options[k.name] for k in subset)), 4000):
                assign = dict(zip((k.name for k in subset), combo, strict=True))
                if value(assign) is not True:
                    continue
                # passing: add a key first (the fix a user makes), then change one of those set
                rest = [k for k in keys if k not in subset] + list(subset)
                for k in rest:
                    for alt in options[k.name] + ([None] if k.spec.value_type != "bool" else []):  # or not given
                        other = {**assign, k.name: alt}
                        if value(other) is False and render(tr, other):
                            yield assign, other
                            break


def _settings(linter: Any, text: str) -> dict[str, Any]:
    doc = linter.read("<example>", text=text or "--seed 1234")
    return linter.graph(doc)[1].settings()


def _holds(tr: Translator, cond: ast.AST, linter: Any, text: str) -> bool:
    """Whether the check's own failure condition holds on the values the linter's graph has for ``text``."""
    settings = _settings(linter, text)
    values = {}
    for name, k in tr.used.items():
        v = settings.get(name)
        if k.spec.value_type == "list" and v is not None and not isinstance(v, list):
            v = [v]
        if isinstance(v, list) and isinstance(settings.get(f"{name}.length"), int):
            v = v + v[-1:] * (settings[f"{name}.length"] - len(v))  # the graph keeps an item once: its count back
        values[name] = v
    try:
        return bool(tr.evaluate(cond, values))
    except (Unsupported, ZeroDivisionError, TypeError, KeyError, AttributeError):
        return False


def render(tr: Translator, assign: dict[str, Any]) -> str | None:
    """The assignment as a configuration: argument words, else ``settings:`` (a --yaml-cfg field), and the
    example arguments that give a derived key its value."""
    parts = _parts(tr, assign)
    if parts is None:
        return None
    words, settings = parts
    text = " ".join(w for w in words if w)
    world = assign.get("world_size")
    if world is None and not settings:
        return text
    lines = ["framework: megatron"] + ([f"launch: {{world_size: {world}}}"] if world is not None else [])
    lines += [f"args: {json.dumps(text)}"] if text else []
    lines += [f"settings: {json.dumps(settings)}"] if settings else []
    return "\n".join(lines)


def mutation(tr: Translator, assign: dict[str, Any]) -> dict[str, Any]:
    """The violating assignment as a mutation of another configuration (bench/lint_check_mutants.tsv): the
    arguments and settings to set, the world size, and the options of the other keys the check reads, which
    the mutation removes so that they take the default the search assumed."""
    words, settings = _parts(tr, assign) or ([], {})
    unset = sorted({o for name, k in tr.used.items() if name not in assign and name != "world_size"
                    and name not in tr.derivable for o in (*k.spec.options, *k.spec.true_flags, *k.spec.false_flags)})
    return {"args": " ".join(w for w in words if w), "settings": settings, "world_size": assign.get("world_size"),
            "unset": unset}


def _parts(tr: Translator, assign: dict[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
    words, settings = [], {}
    for name, v in assign.items():
        spec = tr.used[name].spec
        if name == "world_size":
            continue
        if name in tr.derivable:
            words.append(str(v))
        elif not (spec.options or spec.true_flags or spec.false_flags):
            if v is not None:
                settings[name] = list(v) if isinstance(v, tuple) else v
        elif spec.value_type == "bool":
            if v and spec.true_flags:
                words.append(spec.true_flags[0])
            elif not v and spec.false_flags:
                words.append(spec.false_flags[0])
            elif v != _default(tr.used[name]):
                return None
        elif v is None:
            continue
        elif isinstance(v, list):
            words.append(f"{spec.options[0]} " + " ".join(shlex.quote(str(x)) for x in v))
        else:
            words.append(f"{spec.options[0]} {shlex.quote(str(v))}")  # read as the shell reads it
    return words, settings


def _first_release(check: lint_coverage.Check, tags_root: Path) -> str | None:
    """The first tag from which every later tag has the same check (same failing test) in the same function."""
    want = re.sub(r"\s+", "", check.conditions[-1])
    first = None
    for tag in reversed(TAGS):
        path = tags_root / tag / check.file
        if not path.is_file():
            break
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            break
        tests = {re.sub(r"\s+", "", conds[-1]) for _, fn in lint_coverage._functions(tree, [check.function])
                 for _, _, conds, _ in lint_coverage._checks_in(fn) if conds}
        if want not in tests:
            break
        first = tag
    if first == TAGS[0]:
        return None
    return (first or "core_v0.20.0").removeprefix("core_v")


def _error_class(keys: list[str], cond: str) -> str:
    if "%" in cond or "//" in cond:
        return "batch-arithmetic" if any(_BATCH.search(k) for k in keys) else "parallel-divisibility"
    if re.search(r"\bnot\b.*\band\b|\band\b", cond) and " is None" not in cond and "==" not in cond:
        return "mutual-exclusion"
    if " is None" in cond or "is not None" in cond:
        return "missing-requirement"
    return "value-range"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron", type=Path, required=True)
    ap.add_argument("--tags-root", type=Path, required=True)
    ap.add_argument("--corpus-cache", type=Path, required=True)
    ap.add_argument("--only", nargs="+", metavar="CHECK",
                    help="translate these checks only (megatron:file:line), print what was found, write nothing")
    args = ap.parse_args(argv)
    from bench.lint_corpus import read_manifest
    from debugtune.engine.prevent.learn import VALID_CONFIGS
    from debugtune.engine.prevent.lint import Linter
    from debugtune.engine.prevent.rules import PreventionRule
    from debugtune.engine.prevent.vocab import parse_version
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    if OUT.exists() and not args.only:
        OUT.unlink()  # re-derive from the written rules only
    store = open_store(None)
    load_knowledge(store)
    linter = Linter.from_store(store)
    checks = lint_coverage.extract("megatron", args.megatron)
    lint_coverage.match(checks, linter)
    keys = linter.registry.for_framework("megatron")
    table = lint_coverage._canonical("megatron", linter.registry)
    corpus = [(e, e.local(args.corpus_cache)) for e in read_manifest() if e.framework == "megatron"]
    corpus_docs = []
    for e, path in corpus:
        try:
            corpus_docs.append((linter.read(str(path), env=e.environment(), version=e.version or None),
                                e.version or None))
        except Exception:  # noqa: BLE001 - a file the reader refuses is not a place a rule can fire
            continue
    valid_docs = [(linter.read(str(p)), None) for p in sorted(VALID_CONFIGS.iterdir())]
    valid_docs = [(d, v) for d, v in valid_docs if d.framework == "megatron"]
    corpus_graphs = []  # each configuration's derived graph, built once: a candidate rule is one ASK on each
    for d, v in valid_docs + corpus_docs:
        try:
            corpus_graphs.append((d, linter.graph(d, version=v)[1], v))
        except Exception:  # noqa: BLE001 - as above
            continue
    models, derived_examples = load_models(store)
    derivable = {k: [""] + texts for k, texts in derived_examples.items()}
    kept, reasons = [], {}
    if args.only:
        checks = [c for c in checks if c.id in args.only]
        for c in checks:
            c.rules = ()  # translated again, whatever encodes it now
    for c in checks:
        if not c.config_only or c.rules:
            continue
        root = "args" if c.file.endswith("arguments.py") else "self"
        if c.file.endswith("parallel_state.py"):
            reasons[c.id] = "parameters of initialize_model_parallel"
            continue
        assigned = _assigned_before(args.megatron / c.file, c.function, c.line, root)
        base = c.file.rsplit("/", 1)[-1]
        modelled = {m.expression.replace("{root}", root).removeprefix(root + "."): m
                    for m in models if m.file == base and m.line <= c.line}
        computed = {k for k in set(c.keys) & set(assigned)
                    if k not in modelled or not {f"{base}:{n}" for n in assigned[k]} <= modelled[k].assignments}
        if "*" in assigned or computed:
            reasons[c.id] = f"reads a value the function computes before the check ({', '.join(sorted(computed))})"
            continue
        tr = Translator(keys, table, root, derivable)
        tr.linter = linter
        try:
            cond = rewrite(failure(c.conditions, c.kind), models, c.file, c.line, root,
                           local_constants(args.megatron / c.file, c.function, c.line))
            query = tr.query(cond)
            pairs = examples(tr, cond)
        except (Unsupported, SyntaxError, KeyError) as err:
            reasons[c.id] = f"not translated: {str(err)[:80]}"
            continue
        rid = f"{_PREFIX[base]}{c.line}"
        first = _first_release(c, args.tags_root)  # the examples must fire at the release their reading infers
        rule = PreventionRule(iri=f"https://w3id.org/debugtune/kb/prevention/{rid}", rule_id=rid, severity="error",
                              message="", fix="", framework="megatron", query=query, min_version=first)
        probe = Linter(linter.registry, [rule], linter.derivations)
        tr.linter = probe  # the search evaluates the check on the graph the rule sees: with the defaults it reads
        reasons[c.id], found = "no example found", None
        for assign_bad, assign_good in itertools.islice(pairs, 40):
            bad, good = render(tr, assign_bad), render(tr, assign_good)
            if not bad or not good or bad == good:
                reasons[c.id] = "examples not expressible as a configuration"
                continue
            try:
                fires = rid in probe.lint_path("<bad>", text=bad).rule_ids()
                quiet = rid not in probe.lint_path("<good>", text=good).rule_ids()
                truth = (_holds(tr, cond, probe, bad), _holds(tr, cond, probe, good))
            except Exception as err:  # noqa: BLE001
                reasons[c.id] = f"example unreadable: {str(err)[:80]}"
                continue
            if truth != (True, False):
                reasons[c.id] = "the check itself, on the linter's values of the examples, disagrees with the search"
                continue
            if not (fires and quiet):
                reasons[c.id] = "the linter disagrees with the check on the examples"
                continue
            found = bad, good, mutation(tr, assign_bad)
            break
        if found is None:
            continue
        del reasons[c.id]
        bad, good, mutated = found
        applies = rule  # a hit of the bare query, confirmed as lint reports it
        hit = next((d.path for d, g, v in corpus_graphs if applies.applies("megatron", parse_version(v))
                    and g.query(query) and rid in probe.lint_doc(d, version=v).rule_ids()), None)
        if hit is not None:
            reasons[c.id] = f"would fire on a valid configuration ({hit})"
            continue
        kept.append((c, rid, first, query, cond, tr, bad, good, mutated))
    # last, every kept rule together, linted as lint does on every valid and real configuration
    together = Linter(linter.registry, [PreventionRule(iri=f"https://w3id.org/debugtune/kb/prevention/{k[1]}",
                                                       rule_id=k[1], severity="error", message="", fix="",
                                                       framework="megatron", query=k[3], min_version=k[2])
                                        for k in kept], linter.derivations)
    fired: dict[str, str] = {}
    for d, _g, v in corpus_graphs:
        for rid in together.lint_doc(d, version=v).rule_ids():
            fired.setdefault(rid, d.path)
    for k in kept:
        if k[1] in fired:
            reasons[k[0].id] = f"would fire on a valid configuration ({fired[k[1]]})"
    kept = [k for k in kept if k[1] not in fired]
    if args.only:
        for k in kept:
            print(f"{k[0].id}: {k[1]}\n  violating: {k[6]}\n  passing: {k[7]}\n  condition: {k[3]}")
        for k, v in sorted(reasons.items()):
            print(f"{k}: {v}")
        return 0
    OUT.write_text(_turtle(kept))
    _write_mutants(kept)
    print(f"encoded {len(kept)} checks into {OUT}; left out {len(reasons)}", file=sys.stderr)
    for k, v in sorted(reasons.items()):
        print(f"  {k}: {v}", file=sys.stderr)
    return 0


def _write_mutants(kept: list[Any]) -> None:
    """One mutation per encoded check, for bench/lint_bench.py: found by evaluating the check, not the rule."""
    with MUTANTS.open("w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["check", "rule", "class", "args", "settings", "world_size", "unset"])
        for c, rid, _first, _query, cond, tr, _bad, _good, m in sorted(kept, key=lambda k: k[1]):
            settings = json.dumps(m["settings"]) if m["settings"] else ""
            w.writerow([c.id, rid, _error_class(list(tr.used), ast.unparse(cond)), m["args"], settings,
                        m["world_size"] or "", " ".join(m["unset"])])


def _lit(text: str) -> str:
    return '"""' + text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"') + '"""' if "\n" in text or '"' in text \
        else json.dumps(text)


def _turtle(kept: list[Any]) -> str:
    head = ["@prefix dt:   <https://w3id.org/debugtune#> .", "@prefix dct:  <http://purl.org/dc/terms/> .",
            "@prefix skos: <http://www.w3.org/2004/02/skos/core#> .",
            "@prefix pr:   <https://w3id.org/debugtune/kb/prevention/> .", "",
            "# Megatron-LM's own configuration checks, translated from validate_args and TransformerConfig of",
            "# NVIDIA/Megatron-LM main @ d98e8a6 by bench/lint_framework_rules.py (regenerate, do not edit): each",
            "# rule fails where the check fails, with examples found by evaluating the check itself, and stays quiet",
            "# on the valid reference configurations and the real corpus. dt:encodesCheck names the check.", ""]
    out = head
    for c, rid, first, query, cond, tr, bad, good, _ in kept:
        base = c.file.rsplit("/", 1)[-1]
        words = tr.words(cond)
        keys = list(tr.used)
        version = f'\n    dt:minVersion "{first}" ;' if first else ""
        label = json.dumps(f"{c.function.rsplit('.', 1)[0]} check at {base}:{c.line}")
        message = _lit(f"Megatron-LM stops at start-up ({c.function}, {base}:{c.line}): it refuses " + words)
        out.append(
            f'pr:{rid} a dt:PreventionRule ; dt:ruleId "{rid}" ; dt:framework "megatron" ;\n'
            f'    skos:prefLabel {label}@en ;\n'
            f'    dt:ruleSeverity "error" ; dt:errorClass "{_error_class(keys, ast.unparse(cond))}" ;{version}\n'
            f'    dt:message {message} ;\n'
            f'    dt:fix {_lit("Change the arguments so that this no longer holds: " + words)} ;\n'
            f'    dt:askQuery {_lit(query)} ;\n'
            f'    dt:exampleViolating {_lit(bad)} ;\n'
            f'    dt:examplePassing {_lit(good)} ;\n'
            f'    dt:encodesCheck "{c.id}" ;\n'
            f'    dct:source <https://github.com/NVIDIA/Megatron-LM/blob/d98e8a6/{c.file}#L{c.line}> .\n')
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
