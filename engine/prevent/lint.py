"""The linter: read a configuration, check its keys, build its config graph, run the derivations and every
prevention rule that applies to its framework and version, and collect the violations."""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc
from debugtune.engine.prevent.errors import LintError, LintInputError
from debugtune.engine.prevent.graph import ConfigGraph, config_triples, run_derivations
from debugtune.engine.prevent.keys import KeyRegistry
from debugtune.engine.prevent.readers.dispatch import read_config
from debugtune.engine.prevent.rules import DerivationRule, PreventionRule, load_derivations, load_rules
from debugtune.engine.prevent.schema import CheckedConfig, check
from debugtune.engine.prevent.unjudged import (
    Derivation,
    Unjudged,
    derivation,
    given_keys,
    hidden_reason,
    negated_keys,
    not_judged,
    unknown_keys,
)
from debugtune.engine.prevent.vocab import CONFIG_BASE, format_version, parse_version, variable_name
from debugtune.kg.input_errors import reading
from debugtune.kg.store import Store

_PLACEHOLDER = re.compile(r"\{\?([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class OffendingKey:
    """A key of a violation with its value and where the value came from (set, default, derived, issue)."""

    key: str
    value: Any
    origin: str
    line: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "origin": self.origin, "line": self.line}

    def __str__(self) -> str:
        shown = format_value(self.value)
        return f"{self.key}={shown}" + ("" if self.origin in ("set", "issue", "unset") else f" ({self.origin})")


@dataclass(frozen=True)
class Violation:
    """One violated prevention rule in one configuration."""

    rule_id: str
    severity: str
    message: str
    fix: str
    keys: tuple[OffendingKey, ...]
    path: str
    line: int | None = None
    label: str = ""
    error_class: str = ""
    sources: tuple[str, ...] = ()
    prevents: tuple[str, ...] = ()
    learned: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "severity": self.severity, "label": self.label, "error_class": self.error_class,
                "message": self.message, "fix": self.fix, "keys": [k.as_dict() for k in self.keys],
                "path": self.path, "line": self.line, "sources": list(self.sources), "prevents": list(self.prevents),
                "learned": self.learned}


@dataclass
class LintResult:
    """The violations of one configuration, with what was linted and how long it took."""

    path: str
    framework: str
    version: str | None
    source_kind: str
    violations: list[Violation] = field(default_factory=list)
    unresolved: dict[str, str] = field(default_factory=dict)
    rule_errors: list[str] = field(default_factory=list)
    rules_run: int = 0
    seconds: float = 0.0
    unjudged: list[Unjudged] = field(default_factory=list)
    """Rules that could not be judged (a key they need is unknown), with why."""
    skipped: dict[str, str] = field(default_factory=dict)
    entry_point: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity == "error"]

    def failed(self, strict: bool = False) -> bool:
        """Whether this configuration fails the lint: an error, or with ``strict`` an unjudged error-level rule."""
        return bool(self.errors) or (strict and any(u.severity == "error" for u in self.unjudged))

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.severity != "error"]

    def rule_ids(self) -> set[str]:
        return {v.rule_id for v in self.violations}

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "framework": self.framework, "version": self.version,
                "source_kind": self.source_kind, "errors": len(self.errors), "warnings": len(self.warnings),
                "violations": [v.as_dict() for v in self.violations], "unresolved": self.unresolved,
                "not_checked": len(self.unjudged), "unjudged": [u.as_dict() for u in self.unjudged],
                "skipped": self.skipped, "entry_point": self.entry_point, "notes": self.notes,
                "rule_errors": self.rule_errors, "rules_run": self.rules_run, "seconds": round(self.seconds, 4)}


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(map(format_value, value)) + "]"
    return "unset" if value is None else str(value)


class Linter:
    """Known keys, prevention rules and derivations read once from a store; lints any number of configs."""

    def __init__(self, registry: KeyRegistry, rules: Sequence[PreventionRule], derivations: Sequence[DerivationRule]):
        self.registry, self.rules, self.derivations = registry, list(rules), list(derivations)
        self._count = 0
        texts = [r.query for r in self.rules] + [d.update for d in self.derivations]
        self.read_keys = {re.sub(r"\.(length|product)$", "", k) for t in texts for k in _KEY_REF.findall(t)}
        """The keys some rule or derivation reads: only their defaults go into a config graph."""
        self.env_names = {n for t in texts for n in _ENV_REF.findall(t)} | set(registry.launch_variables)
        """Environment variables some rule or derivation reads, and the launchers' own: the ones a lint takes
        from the process environment (``launch_environment``)."""
        self._derived: dict[str, list[Derivation]] = {d.framework: [] for d in self.derivations}
        for d in self.derivations:
            self._derived[d.framework].append(derivation(d.update, d.derives))

    @classmethod
    def from_store(cls, store: Store) -> Linter:
        """Everything the linter needs from the store: known keys, prevention rules (KB and learned), derivations."""
        return cls(KeyRegistry.from_store(store), load_rules(store), load_derivations(store))

    def launch_environment(self, process: Mapping[str, str], overrides: Mapping[str, str] | None = None
                           ) -> dict[str, str]:
        """The launch environment of a lint: the variables of the process environment that the rules and
        the launchers use (``WORLD_SIZE``, ``NNODES``, ``GPUS_PER_NODE``, ``SLURM_NTASKS``, ...), then
        ``overrides`` (``--env``) over them."""
        taken = {k: v for k, v in process.items() if k in self.env_names}
        return {**taken, **(overrides or {})}

    def read(self, path: str, *, framework: str = "auto", env: dict[str, str] | None = None,
             text: str | None = None, version: str | None = None) -> ConfigDoc:
        """Read a configuration; ``version`` (the release it is linted for) decides release-dependent reading
        (how Megatron's CI passes MODEL_ARGS values)."""
        with reading(path, _input_error):  # whatever a reader meets fails as unreadable input (kg.input_errors)
            return read_config(path, keys_for=self.registry.for_framework, framework=framework, env=env, text=text,
                               version=version)

    def lint_path(self, path: str, *, framework: str = "auto", version: str | None = None,
                  env: dict[str, str] | None = None, text: str | None = None,
                  only: Collection[str] | None = None) -> LintResult:
        """Lint one file (or ``text`` named ``path``); ``only`` restricts the rules run to those ids."""
        start = time.perf_counter()
        doc = self.read(path, framework=framework, env=env, text=text, version=version)
        with reading(path, _input_error):  # values no rule can hold (a 5,000-digit integer) are unreadable too
            result = self.lint_doc(doc, version=version, only=only)
        result.seconds = time.perf_counter() - start
        return result

    def applicable(self, framework: str, version: str | None) -> list[PreventionRule]:
        v = parse_version(version)
        return [r for r in self.rules if r.applies(framework, v)]

    def graph(self, doc: ConfigDoc, version: str | None = None) -> tuple[CheckedConfig, ConfigGraph, list[str]]:
        """The checked settings and the derived config graph of a read document."""
        text = version or doc.version
        try:
            v = parse_version(text)
        except ValueError as err:
            raise LintError(str(err)) from None
        checked = check(doc, self.registry.for_framework(doc.framework), v, self.read_keys)
        self._count += 1
        node = f"{CONFIG_BASE}{self._count}"
        graph = ConfigGraph(config_triples(checked, node, doc.framework, format_version(v)), node)
        updates = [(d.iri, d.update) for d in self.derivations if d.framework in (doc.framework, "any")]
        errors = run_derivations(graph, updates)
        return checked, graph, errors

    def lint_doc(self, doc: ConfigDoc, *, version: str | None = None,
                 only: Collection[str] | None = None) -> LintResult:
        start = time.perf_counter()
        checked, graph, errors = self.graph(doc, version)
        v = parse_version(version or doc.version)
        result = LintResult(doc.path, doc.framework, format_version(v), doc.source_kind,
                            unresolved=dict(doc.unresolved), rule_errors=errors, skipped=dict(doc.skipped),
                            entry_point=doc.entry_point, notes=list(doc.notes))
        values = graph.settings()
        keymap = {variable_name(k): k for k in values}
        derived = self._derived.get(doc.framework, []) + self._derived.get("any", [])
        unknown = unknown_keys(doc, values, derived)
        given = given_keys(checked.origin, derived) if doc.hidden_args else set()
        if not doc.settings and not doc.issues:
            result.skipped.setdefault("(configuration)", "no settings to check")
        for rule in self.rules if doc.settings or doc.issues else ():
            if not rule.applies(doc.framework, v) or (only is not None and rule.rule_id not in only):
                continue
            result.rules_run += 1
            try:
                answer = graph.query(rule.query)
            except (SyntaxError, OSError, ValueError, LintError) as err:
                result.rule_errors.append(f"rule {rule.rule_id}: {err}")
                continue
            rows = ([{}] if answer else []) if isinstance(answer, bool) else answer
            for row in rows:
                found = self._violation(rule, row, checked, keymap, values)
                if doc.hidden_args:
                    involved = {k.key for k in found.keys if k.origin != "issue"} | negated_keys(rule.query)
                    lacking = sorted(k for k in involved if k not in given)
                    if lacking:
                        if not any(u.rule_id == rule.rule_id for u in result.unjudged):
                            result.unjudged.append(Unjudged(rule.rule_id, rule.severity, tuple(lacking),
                                                            hidden_reason(doc.hidden_args)))
                        continue
                result.violations.append(found)
            if not rows and unknown:
                missing = not_judged(rule.rule_id, rule.severity, rule.query, values, unknown)
                if missing is not None:
                    result.unjudged.append(missing)
        result.violations.sort(key=lambda x: (x.severity != "error", x.rule_id, x.line or 0))
        result.seconds = time.perf_counter() - start
        return result

    def _violation(self, rule: PreventionRule, row: dict[str, Any], checked: CheckedConfig,
                   keymap: dict[str, str], values: dict[str, Any]) -> Violation:
        doc = checked.doc
        keys: dict[str, OffendingKey] = {}
        for var in sorted(v for v in row if v.startswith("key")):
            name = str(row[var])
            issue = next((i for i in checked.issues if i.key == name), None)
            if issue is not None:
                keys[name] = OffendingKey(name, row.get("value", issue.raw) if var == "key" else issue.raw, "issue",
                                          issue.line)
            else:
                keys[name] = OffendingKey(name, values.get(name, row.get("value") if var == "key" else None),
                                          checked.origin.get(name, "derived" if name in values else "unset"),
                                          doc.lines.get(name))
        var_keys, const_keys = _pattern_keys(rule.query)
        for var, value in row.items():
            key = var_keys.get(var) or keymap.get(var)
            if key is not None and not var.startswith(("key", "value")) and key not in keys:
                keys[key] = OffendingKey(key, values.get(key, value), checked.origin.get(key, "derived"),
                                         doc.lines.get(key))
        for key, const in const_keys:
            have = values.get(key)
            if key not in keys and (have == const or (isinstance(have, list) and const in have)):
                keys[key] = OffendingKey(key, have, checked.origin.get(key, "derived"), doc.lines.get(key))
        found = list(keys.values())
        lines = [k.line for k in found if k.line is not None and k.origin in ("set", "issue")]
        return Violation(
            rule_id=rule.rule_id, severity=rule.severity, message=_fill(rule.message, row),
            fix=_fill(rule.fix, row), keys=tuple(found), path=doc.path, line=min(lines) if lines else None,
            label=rule.label, error_class=rule.error_class, sources=rule.sources, prevents=rule.prevents,
            learned=rule.learned_from is not None)


def _input_error(path: str, message: str, line: int | None, field: str | None) -> LintInputError:
    return LintInputError(path, message + (f" (at {field})" if field else ""), line)


def _fill(template: str, row: dict[str, Any]) -> str:
    """Replace ``{?var}`` placeholders with the row's values (unbound → "unset")."""
    return _PLACEHOLDER.sub(lambda m: format_value(row.get(m.group(1))), template)


_KEY_REF = re.compile(r"cfg:([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])")
_ENV_REF = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")
_VAR_PATTERN = re.compile(r"cfg:([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])\s+\?([A-Za-z_][A-Za-z0-9_]*)")
_CONST_PATTERN = re.compile(
    r'cfg:([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])\s+(true|false|-?\d+(?:\.\d+)?(?:[eE]-?\d+)?|"[^"]*")')


def _pattern_keys(query: str) -> tuple[dict[str, str], list[tuple[str, Any]]]:
    """Which variable a rule binds to which key (``cfg:world_size ?w``), and the keys it matches against a
    constant (``cfg:fp16 true``): the offending keys of a violation."""
    var_keys = {var: key for key, var in _VAR_PATTERN.findall(query)}
    consts: list[tuple[str, Any]] = []
    for key, text in _CONST_PATTERN.findall(query):
        if text in ("true", "false"):
            value: Any = text == "true"
        elif text.startswith('"'):
            value = text[1:-1]
        else:
            value = float(text) if any(ch in text for ch in ".eE") else int(text)
        consts.append((key, value))
    return var_keys, consts
