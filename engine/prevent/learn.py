"""The feedback loop: a run's confirmed cause whose remedy is a config change becomes a prevention rule.

The run's top hypothesis names the cause; the remedy that addresses it (the most effective one with a
usable config change, or the one asked for) gives the key and the change ``from → to``; a template from the
knowledge base (``cases/prevention/templates.ttl``: one kept for the cause, else one for the shape of the
change) gives the condition, message, fix and the two examples. The rule is checked against its own
examples and written to the local graph (``GRAPH_LOCAL``) with ``dt:learnedFrom`` the hypothesis, in one
update that replaces an earlier rule learned for the same cause and key.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from debugtune import cases
from debugtune.engine.prevent.errors import LintError
from debugtune.engine.prevent.keys import KeyRegistry, guess_scalar
from debugtune.engine.prevent.lint import Linter
from debugtune.engine.prevent.rules import PreventionRule, load_derivations
from debugtune.engine.prevent.vocab import ANY
from debugtune.kg.assertions import read_hypotheses
from debugtune.kg.errors import MissingThresholdError
from debugtune.kg.knowledge import thresholds
from debugtune.kg.namespaces import DCT, DT, GRAPH_LOCAL, KB, SKOS, local_name, run_base
from debugtune.kg.records import Hypothesis
from debugtune.kg.results import to_python
from debugtune.kg.sparql import iri, literal
from debugtune.kg.store import Store

LEARNED_BASE = KB + "prevention/learned/"
_PLACEHOLDER = re.compile(r"\{(key|from|to|from_yaml|to_yaml|framework|cause|remedy|run)\}")
_NONE = {"", "none", "null", "unset"}


class LearnError(LintError):
    """A run whose cause cannot become a prevention rule (no hypothesis, low confidence, no usable change)."""


@dataclass(frozen=True)
class Change:
    """A remedy's config change: ``key`` from ``old`` to ``new`` (as written in the knowledge base)."""

    remedy: str
    key: str
    old: str | None
    new: str
    effectiveness: float


@dataclass(frozen=True)
class Scope:
    """The context a learned rule needs: its causes, a key pattern, and per framework a condition, the key
    it tests and the settings that put an example in the scope."""

    iri: str
    causes: frozenset[str]
    key_pattern: str | None
    conditions: dict[str, tuple[str, str, str]]
    """framework → (SPARQL pattern, key, YAML settings for the examples)."""

    def covers(self, cause: str, key: str) -> bool:
        return cause in self.causes or bool(self.key_pattern and re.search(self.key_pattern, key))


VALID_CONFIGS = Path(cases.HERE) / "prevention" / "valid"
"""Complete configurations known to be valid: a learned rule that fires on one of them is refused."""


@dataclass(frozen=True)
class Template:
    iri: str
    fields: dict[str, str]
    cause: str | None
    key: str | None
    shape: str | None
    sources: tuple[str, ...]


def learn_from_run(store: Store, run_id: str, *, remedy: str | None = None,
                   min_confidence: float | None = None) -> PreventionRule:
    """Learn one prevention rule from the run's top hypothesis and write it to the local graph."""
    hypotheses = read_hypotheses(store, run_id)
    if not hypotheses:
        raise LearnError(f"run {run_id}: no hypotheses in the store; run `cann-debug root-cause {run_id}` first")
    top = hypotheses[0]
    floor = min_confidence if min_confidence is not None else _min_confidence(store)
    if top.confidence < floor:
        raise LearnError(f"run {run_id}: the top hypothesis {top.cause} has confidence {top.confidence:.2f} "
                         f"< {floor:.2f}; it is not a confirmed cause")
    registry = KeyRegistry.from_store(store)
    candidates, reasons = _candidates(store, top, remedy, _templates(store), registry)
    scopes = _scopes(store)
    for change, template in candidates:
        rule, triples = _instantiate(template, change, top, run_id, registry, scopes)
        try:
            _verify(rule, registry, store)
        except LearnError as err:
            reasons.append(str(err))
            continue
        break
    else:
        raise LearnError(f"no usable config change for {top.cause}: " + "; ".join(reasons))
    store.update(f"DELETE WHERE {{ GRAPH {iri(GRAPH_LOCAL)} {{ {iri(rule.iri)} ?p ?o }} }} ;\n"
                 f"INSERT DATA {{ GRAPH {iri(GRAPH_LOCAL)} {{\n{triples}}} }}")
    return rule


def _min_confidence(store: Store) -> float:
    """``prevent.learn_min_confidence`` of the knowledge base (templates.ttl): required, no default here."""
    try:
        return thresholds(store).require("prevent.learn_min_confidence")["prevent.learn_min_confidence"]
    except MissingThresholdError as err:  # a lint error, so `cann-debug lint --learn` reports it in one line
        raise LearnError(f"{err} (cases/prevention/templates.ttl), or pass --min-confidence") from err


def _scopes(store: Store) -> list[Scope]:
    rows = store.select("""SELECT ?s ?pattern ?fw ?cond ?key ?ex WHERE {
        ?s a dt:RuleScope ; dt:scopeCondition ?n . ?n dt:framework ?fw ; dt:pattern ?cond ; dt:scopeKey ?key ;
           dt:exampleSettings ?ex . OPTIONAL { ?s dt:scopeKeyPattern ?pattern } }""").dicts()
    causes = defaultdict(set)
    for r in store.select("SELECT ?s ?c WHERE { ?s a dt:RuleScope ; dt:scopeCause ?c }").dicts():
        causes[r["s"]].add(local_name(r["c"]))
    out: dict[str, Scope] = {}
    for r in rows:
        scope = out.setdefault(r["s"], Scope(r["s"], frozenset(causes[r["s"]]), r["pattern"], {}))
        scope.conditions[str(r["fw"])] = (str(r["cond"]), str(r["key"]), str(r["ex"]))
    return [out[k] for k in sorted(out)]


def _changes(store: Store, cause: str, remedy: str | None) -> list[Change]:
    rows = store.select(f"""
        SELECT ?r ?key ?from ?to ?eff WHERE {{
          ?r a dt:Remedy ; dt:addresses {iri(KB + cause)} ; dt:configChange ?ch .
          ?ch dt:configKey ?key ; dt:toValue ?to .
          OPTIONAL {{ ?ch dt:fromValue ?from }} OPTIONAL {{ ?r dt:effectiveness ?eff }}
        }}""").dicts()
    out = [Change(local_name(r["r"]), str(r["key"]), None if r["from"] is None else str(r["from"]), str(r["to"]),
                  float(r["eff"] or 0.0)) for r in rows]
    if remedy is not None:
        out = [c for c in out if c.remedy == remedy]
        if not out:
            raise LearnError(f"remedy {remedy} does not address {cause} with a config change")
    return sorted(out, key=lambda c: (-c.effectiveness, c.remedy, c.key))


def _templates(store: Store) -> list[Template]:
    rows = store.select("SELECT ?t ?p ?o WHERE { ?t a dt:RuleTemplate ; ?p ?o }")
    props: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for t_, p_, o in rows.rows:
        props[to_python(t_)][to_python(p_)].append(to_python(o))
    out = []
    for t, p in sorted(props.items()):
        def one(name: str, ns: str = DT, p: dict[str, list[Any]] = p) -> str | None:
            values = p.get(ns + name)
            return str(values[0]) if values else None

        fields = {n: one(n) or "" for n in ("queryTemplate", "messageTemplate", "fixTemplate", "ruleSeverity",
                                            "errorClass", "framework", "exampleViolating", "examplePassing")}
        fields["label"] = one("prefLabel", SKOS) or ""
        cause = one("forCause")
        out.append(Template(t, fields, local_name(cause) if cause else None, one("configKey"), one("changeShape"),
                            tuple(sorted(map(str, p.get(DCT + "source", []))))))
    return out


def _candidates(store: Store, top: Hypothesis, remedy: str | None, templates: list[Template],
                registry: KeyRegistry) -> tuple[list[tuple[Change, Template]], list[str]]:
    """Usable (change, template) pairs, best first (a template kept for the cause, then by the remedy's
    effectiveness), and why the other changes are not usable."""
    changes = _changes(store, top.cause, remedy)
    if not changes:
        raise LearnError(f"no remedy of {top.cause} makes a config change; nothing to learn")
    out: list[tuple[Change, Template]] = []
    for t in (t for t in templates if t.cause == top.cause):
        out += [(c, t) for c in changes if t.key in (None, c.key)]
    reasons = []
    for c in changes:
        shape, why = change_shape(c, registry)
        if shape is None:
            reasons.append(f"{c.remedy}: {c.key} {c.old} → {c.new}: {why}")
            continue
        found = next((t for t in templates if t.shape == shape), None)
        if found is not None:
            out.append((c, found))
        else:
            reasons.append(f"{c.remedy}: no template for a change of shape {shape}")
    return out, reasons


def change_shape(c: Change, registry: KeyRegistry) -> tuple[str | None, str]:
    """increase, decrease, enable, disable or set, from the key's type and the two values (None + reason if
    the change cannot become a condition: unknown key, relative or placeholder values, a key being added)."""
    if not registry.frameworks_knowing(c.key):
        return None, "not a known configuration key"
    old, new = (c.old or "").strip(), c.new.strip()
    if old.lower() in _NONE:
        return None, "the change adds the key; only a template for the cause can say when it is missing"
    if any(s.startswith(("x", "<", "[")) or s.endswith(">") or " " in s for s in (old, new)):
        return None, "relative, placeholder or descriptive values"
    a, b = guess_scalar(old), guess_scalar(new)
    if isinstance(a, bool) and isinstance(b, bool):
        return ("enable" if b else "disable"), ""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a != b:
        return ("increase" if b > a else "decrease"), ""
    return "set", ""


def _instantiate(t: Template, c: Change, top: Hypothesis, run_id: str, registry: KeyRegistry,
                 scopes: list[Scope]) -> tuple[PreventionRule, str]:
    known = registry.frameworks_knowing(c.key)
    framework = t.fields["framework"] if t.fields["framework"] not in ("", ANY) else (known[0] if known else ANY)
    conditions = [s.conditions[framework] for s in scopes if s.covers(top.cause, c.key) and framework in s.conditions]
    values = {"key": c.key, "from": _sparql(c.old), "to": _sparql(c.new), "from_yaml": _yaml(c.old),
              "to_yaml": _yaml(c.new), "framework": framework, "cause": top.cause, "remedy": c.remedy, "run": run_id}
    human = {**values, "from": str(c.old), "to": c.new}

    def fill(name: str, table: dict[str, str]) -> str:
        return _PLACEHOLDER.sub(lambda m: table[m.group(1)], t.fields[name])

    rule_id = f"LRN-{top.cause}" if t.cause else f"LRN-{top.cause}-{c.key}"
    rule = PreventionRule(
        iri=LEARNED_BASE + re.sub(r"[^A-Za-z0-9_.-]", "_", rule_id), rule_id=rule_id,
        severity=t.fields["ruleSeverity"] or "warning", message=fill("messageTemplate", human),
        fix=fill("fixTemplate", human), framework=framework,
        query=_scoped(fill("queryTemplate", values), [p for p, _, _ in conditions]),
        label=t.fields["label"], error_class=t.fields["errorClass"],
        sources=tuple(sorted({KB + c.remedy, run_base(run_id), *t.sources})), prevents=(top.cause,),
        learned_from=f"{run_base(run_id)}hypothesis/{top.rank}",
        violating=(_in_scope(fill("exampleViolating", values), [x for _, _, x in conditions]),),
        passing=(_in_scope(fill("examplePassing", values), [x for _, _, x in conditions]),))
    return rule, _rule_triples(rule, t.iri, run_base(run_id), [k for _, k, _ in conditions])


def _scoped(query: str, patterns: list[str]) -> str:
    """The condition with the scope patterns put first in its WHERE (or ASK) group."""
    if not patterns:
        return query
    m = re.search(r"(WHERE|ASK)\s*\{", query, re.I)
    if m is None:
        raise LearnError(f"a template condition without a WHERE or ASK group: {query[:80]}")
    return query[:m.end()] + " " + " ".join(patterns) + " " + query[m.end():]


def _in_scope(example: str, settings: list[str]) -> str:
    """An example (our YAML with a settings: section) with the scope's settings added to it."""
    if not settings:
        return example
    if "\nsettings:\n" not in example:
        raise LearnError("a template example without a settings: section cannot be put in the rule's scope")
    lines = "".join(f"  {s}\n" for s in settings)
    return example.replace("\nsettings:\n", "\nsettings:\n" + lines, 1)


def _rule_triples(r: PreventionRule, template: str, run: str, scope_keys: list[str]) -> str:
    pairs = [("a", "dt:PreventionRule"), ("dt:ruleId", literal(r.rule_id)), ("dt:ruleSeverity", literal(r.severity)),
             ("dt:message", literal(r.message)), ("dt:fix", literal(r.fix)), ("dt:framework", literal(r.framework)),
             ("dt:askQuery", literal(r.query)), ("dt:errorClass", literal(r.error_class)),
             ("skos:prefLabel", literal(r.label) + "@en"), ("dt:learnedFrom", iri(r.learned_from or "")),
             ("prov:wasDerivedFrom", iri(template)), ("dt:preventsCause", iri(KB + r.prevents[0])),
             ("prov:generatedAtTime", literal(datetime.now(UTC).isoformat()) + "^^xsd:dateTime"),
             ("dt:learnedFromCase", iri(run))]
    pairs += [("dt:requiresKey", literal(k)) for k in scope_keys]
    pairs += [("dct:source", iri(s)) for s in r.sources]
    pairs += [("dt:exampleViolating", literal(x)) for x in r.violating]
    pairs += [("dt:examplePassing", literal(x)) for x in r.passing]
    return f"{iri(r.iri)} " + " ;\n    ".join(f"{p} {o}" for p, o in pairs) + " .\n"


def _verify(rule: PreventionRule, registry: KeyRegistry, store: Store) -> None:
    """The rule must parse, fire on its violating example, stay quiet on its passing one, and stay quiet on
    every valid configuration of its framework (cases/prevention/valid): a rule that would flag a known-good
    launch is refused with the configuration it flags."""
    linter = Linter(registry, [rule], load_derivations(store))
    for text, expected in ((rule.violating[0], True), (rule.passing[0], False)):
        result = linter.lint_path(f"<{rule.rule_id} example>", text=text, only={rule.rule_id})
        if result.rule_errors:
            raise LearnError(f"learned rule {rule.rule_id} does not run: {result.rule_errors[0]}")
        if (rule.rule_id in result.rule_ids()) != expected:
            raise LearnError(f"learned rule {rule.rule_id} {'misses' if expected else 'flags'} its "
                             f"{'violating' if expected else 'passing'} example:\n{text}")
    for path in sorted(VALID_CONFIGS.iterdir()):
        doc = linter.read(str(path))
        if rule.framework not in (doc.framework, ANY):
            continue
        result = linter.lint_doc(doc, only={rule.rule_id})
        hits = [v for v in result.violations if v.rule_id == rule.rule_id]
        if hits:
            raise LearnError(f"learned rule {rule.rule_id} is refused: it fires on the valid configuration "
                             f"{path.name} ({hits[0].message})")


def _sparql(value: str | None) -> str:
    v = guess_scalar((value or "").strip())
    return literal(v) if isinstance(v, str) else ("true" if v is True else "false" if v is False else repr(v))


def _yaml(value: str | None) -> str:
    v = guess_scalar((value or "").strip())
    return json.dumps(v) if isinstance(v, str) else ("true" if v is True else "false" if v is False else repr(v))
