"""Loading JSON and YAML with line numbers, and flattening nested sections to dotted keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from debugtune.engine.prevent.document import KeyIssue
from debugtune.engine.prevent.errors import LintInputError


def load_json(text: str, path: str) -> tuple[Any, list[KeyIssue]]:
    """Parse JSON; a syntax error names line and column; duplicate keys come back as issues."""
    dups: list[KeyIssue] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                dups.append(KeyIssue("duplicate", k, json.dumps(v) if not isinstance(v, str) else v))
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs), dups
    except json.JSONDecodeError as err:
        raise LintInputError(path, f"invalid JSON: {err.msg}", err.lineno, err.colno) from None


def load_yaml(text: str, path: str) -> Any:
    """Parse YAML (safe loader); a syntax error names line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise LintInputError(path, f"invalid YAML: {err.problem or err}", line, col) from None
    except yaml.reader.ReaderError as err:  # a character YAML refuses: named with its line and column
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        raise LintInputError(path, f"invalid YAML: character {err.character!r} is not allowed", line, column) from None
    except yaml.YAMLError as err:
        raise LintInputError(path, f"invalid YAML: {err}") from None


def key_lines(text: str) -> dict[str, int]:
    """1-based line of every mapping key, by dotted path (works for YAML and for JSON)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return _json_key_lines(text)
    out: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                name = prefix + str(k.value)
                out.setdefault(name, k.start_mark.line + 1)
                walk(v, name + ".")

    if root is not None:
        walk(root, "")
    return out


def _json_key_lines(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), 1):
        for part in line.split('"')[1::2]:
            out.setdefault(part, i)
    return out


def flatten(mapping: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf; an empty section stays a leaf ({}); None (unset) is skipped."""
    for k, v in mapping.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from flatten(v, name + ".")
        elif v is not None:
            yield name, v
