"""The config graph of one configuration (docs/lint.md): a ``dt:LaunchConfiguration`` node with its
settings as ``cfg:<key>`` properties, its environment as ``env:<NAME>``, its key issues, and the derived
values that the derivation rules add. It lives in its own small in-memory Oxigraph store."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import pyoxigraph as ox

from debugtune.engine.prevent.errors import LintError
from debugtune.engine.prevent.functions import FUNCTIONS
from debugtune.engine.prevent.schema import CheckedConfig
from debugtune.engine.prevent.vocab import CFG, CONFIG_BASE, CONFIG_PREFIXES, ENV, is_env_name, is_graph_key
from debugtune.kg.namespaces import DT, RDF, XSD
from debugtune.kg.results import to_python

_BOOL, _INT, _DOUBLE = (ox.NamedNode(XSD + t) for t in ("boolean", "integer", "double"))


def literal(value: Any) -> ox.Literal | None:
    """An RDF literal for a setting value (bool, int, float or text); None for other values."""
    return typed_literal(value) if isinstance(value, bool | int | float | str) else None


def typed_literal(value: bool | int | float | str) -> ox.Literal:
    """The literal of a flag, number or text, typed as the rules compare it."""
    if isinstance(value, bool):
        return ox.Literal("true" if value else "false", datatype=_BOOL)
    if isinstance(value, int):
        return ox.Literal(str(value), datatype=_INT)
    if isinstance(value, float):
        if math.isnan(value):
            return ox.Literal("NaN", datatype=_DOUBLE)
        if math.isinf(value):
            return ox.Literal("INF" if value > 0 else "-INF", datatype=_DOUBLE)
        return ox.Literal(repr(value), datatype=_DOUBLE)
    return ox.Literal(value)


def config_triples(checked: CheckedConfig, node: str, framework: str, version: str | None) -> list[ox.Triple]:
    """Every triple of the config graph before derivation."""
    c = ox.NamedNode(node)
    out = [ox.Triple(c, ox.NamedNode(RDF + "type"), ox.NamedNode(DT + "LaunchConfiguration")),
           ox.Triple(c, ox.NamedNode(DT + "framework"), ox.Literal(framework)),
           ox.Triple(c, ox.NamedNode(DT + "sourceKind"), ox.Literal(checked.doc.source_kind))]
    if version:
        out.append(ox.Triple(c, ox.NamedNode(DT + "configVersion"), ox.Literal(version)))
    if checked.doc.entry_point:
        out.append(ox.Triple(c, ox.NamedNode(DT + "entryPoint"), ox.Literal(checked.doc.entry_point)))
    if checked.entry_point is not None:
        extends = typed_literal(checked.entry_point.extends)
        out.append(ox.Triple(c, ox.NamedNode(DT + "entryPointExtendsParser"), extends))
    mode = checked.doc.mode or (checked.entry_point.mode if checked.entry_point is not None else None)
    if mode:
        out.append(ox.Triple(c, ox.NamedNode(DT + "launchMode"), ox.Literal(mode)))
    given = ox.NamedNode(DT + "givenKey")
    for key, value in checked.values.items():
        if is_graph_key(key):
            out += _value_triples(c, key, value)
            if checked.origin.get(key) == "set":
                out.append(ox.Triple(c, given, ox.Literal(key)))
    for name, value in checked.doc.env.items():
        if is_env_name(name):
            out.append(ox.Triple(c, ox.NamedNode(ENV + name), ox.Literal(str(value))))
    for i, issue in enumerate(checked.issues):
        n = ox.NamedNode(f"{node}/issue/{i}")
        out.append(ox.Triple(c, ox.NamedNode(DT + "keyIssue"), n))
        out.append(ox.Triple(n, ox.NamedNode(RDF + "type"), ox.NamedNode(DT + "KeyIssue")))
        for prop, text in (("issueKind", issue.kind), ("key", issue.key), ("rawValue", issue.raw),
                           ("expected", issue.expected), ("closestKey", issue.closest)):
            out.append(ox.Triple(n, ox.NamedNode(DT + prop), ox.Literal(text)))
    return out


def _value_triples(c: ox.NamedNode, key: str, value: Any) -> list[ox.Triple]:
    items = value if isinstance(value, list) else [value]
    p = ox.NamedNode(CFG + key)
    out = [ox.Triple(c, p, lit) for lit in map(literal, items) if lit is not None]
    if isinstance(value, list):
        out.append(ox.Triple(c, ox.NamedNode(CFG + key + ".length"), typed_literal(len(value))))
        if value and all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            out.append(ox.Triple(c, ox.NamedNode(CFG + key + ".product"), typed_literal(math.prod(value))))
    return out


_DOTTED = re.compile(r"(?<![\w<:/#])cfg:([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)+)")


def expand_config_names(sparql: str) -> str:
    """``cfg:a.b.c`` → ``<…config#a.b.c>``: dotted keys of nested sections as full IRIs (SPARQL allows dots
    inside a prefixed name, but Oxigraph's parser rejects more than one)."""
    return _DOTTED.sub(lambda m: f"<{CFG}{m.group(1)}>", sparql)


class ConfigGraph:
    """One configuration's graph: build, derive, query."""

    def __init__(self, triples: Iterable[ox.Triple], node: str = CONFIG_BASE + "0"):
        self.node = node
        self.store = ox.Store()
        self.store.extend(ox.Quad(t.subject, t.predicate, t.object, ox.DefaultGraph()) for t in triples)

    def update(self, sparql: str) -> None:
        self.store.update(CONFIG_PREFIXES + expand_config_names(sparql), custom_functions=FUNCTIONS)

    def query(self, sparql: str) -> bool | list[dict[str, Any]]:
        """A SELECT as rows of plain values, or an ASK as a boolean."""
        result = self.store.query(CONFIG_PREFIXES + expand_config_names(sparql), custom_functions=FUNCTIONS)
        if isinstance(result, ox.QueryBoolean):
            return bool(result)
        if not isinstance(result, ox.QuerySolutions):
            raise LintError("a rule condition must be a SELECT or an ASK query, not CONSTRUCT or DESCRIBE")
        names = [v.value for v in result.variables]
        return [{n: to_python(row[n]) for n in names if row[n] is not None} for row in result]

    def settings(self) -> dict[str, Any]:
        """Every ``cfg:`` value of the configuration node (lists for keys with several values)."""
        out: dict[str, Any] = {}
        for q in self.store.quads_for_pattern(ox.NamedNode(self.node), None, None):
            if q.predicate.value.startswith(CFG):
                key = q.predicate.value[len(CFG):]
                value = to_python(q.object)
                if key in out:
                    prev = out[key]
                    out[key] = (prev if isinstance(prev, list) else [prev]) + [value]
                else:
                    out[key] = value
        return out

    def dump(self) -> str:
        """The graph as Turtle with the cfg:, env: and dt: prefixes (for --explain and debugging)."""
        data = self.store.dump(format=ox.RdfFormat.TURTLE, from_graph=ox.DefaultGraph(),
                               prefixes={"cfg": CFG, "env": ENV, "dt": DT, "xsd": XSD}) or b""
        return data.decode()


def run_derivations(graph: ConfigGraph, updates: Sequence[tuple[str, str]]) -> list[str]:
    """Run (id, update) pairs in order; returns the messages of those that failed (the rest still run)."""
    errors = []
    for rid, sparql in updates:
        try:
            graph.update(sparql)
        except (SyntaxError, OSError, ValueError) as err:
            errors.append(f"derivation {rid}: {err}")
    return errors


