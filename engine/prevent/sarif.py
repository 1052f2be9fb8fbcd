"""SARIF 2.1.0 output of lint results (one run, the rules that fired as reporting descriptors)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from debugtune.engine.prevent.lint import LintResult, Violation
from debugtune.engine.prevent.rules import PreventionRule
from debugtune.engine.prevent.unjudged import Unjudged

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL = "debugtune-lint"
INFO_URI = "https://w3id.org/debugtune"


def to_sarif(results: Sequence[LintResult], rules: Sequence[PreventionRule], *, version: str,
             unreadable: Sequence[tuple[str, str]] = (), strict: bool = False) -> dict[str, Any]:
    """A SARIF log: every violation a result with rule id, level, message (with the fix) and location; every
    rule that could not be judged a result of kind ``open`` (level ``none``, or ``error`` for an error-level
    rule under ``strict``) that says why."""
    by_id = {r.rule_id: r for r in rules}
    fired = sorted({v.rule_id for r in results for v in r.violations}
                   | {u.rule_id for r in results for u in r.unjudged})
    index = {rid: i for i, rid in enumerate(fired)}
    descriptors = [_descriptor(rid, by_id.get(rid)) for rid in fired]
    sarif_results = [_result(v, index[v.rule_id]) for r in results for v in r.violations]
    sarif_results += [_open(u, r.path, index[u.rule_id], strict) for r in results for u in r.unjudged]
    notifications = [{"level": "error", "message": {"text": message},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}]}
                     for path, message in unreadable]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": TOOL, "version": version, "informationUri": INFO_URI,
                                "rules": descriptors}},
            "invocations": [{"executionSuccessful": not unreadable,
                             "toolExecutionNotifications": notifications}],
            "artifacts": [{"location": {"uri": _uri(r.path)}} for r in results],
            "results": sarif_results,
        }],
    }


def _descriptor(rule_id: str, rule: PreventionRule | None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rule_id}
    if rule is None:
        return out
    out.update({
        "name": rule.label or rule_id,
        "shortDescription": {"text": rule.label or rule_id},
        "fullDescription": {"text": rule.message},
        "help": {"text": rule.fix},
        "defaultConfiguration": {"level": _level(rule.severity)},
        "properties": {"framework": rule.framework, "errorClass": rule.error_class, "sources": list(rule.sources),
                       "prevents": list(rule.prevents), "learned": rule.learned_from is not None},
    })
    if rule.sources:
        out["helpUri"] = rule.sources[0]
    return out


def _result(v: Violation, rule_index: int) -> dict[str, Any]:
    keys = ", ".join(str(k) for k in v.keys)
    text = v.message + (f" [{keys}]" if keys else "") + f" Fix: {v.fix}"
    region = {"startLine": v.line or 1}
    return {
        "ruleId": v.rule_id, "ruleIndex": rule_index, "level": _level(v.severity), "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(v.path)}, "region": region}}],
        "properties": {"keys": [k.as_dict() for k in v.keys], "fix": v.fix, "errorClass": v.error_class},
    }


def _open(u: Unjudged, path: str, rule_index: int, strict: bool) -> dict[str, Any]:
    return {
        "ruleId": u.rule_id, "ruleIndex": rule_index, "kind": "open",
        "level": "error" if strict and u.severity == "error" else "none",
        "message": {"text": f"not checked: {u.reason}"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}],
        "properties": {"keys": list(u.keys), "reason": u.reason, "severity": u.severity},
    }


def _level(severity: str) -> str:
    return "error" if severity == "error" else "warning"


def _uri(path: str) -> str:
    return quote(PurePath(path).as_posix(), safe="/:._-~")
