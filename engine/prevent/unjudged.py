"""Which rules could not be judged for a configuration, and why (docs/lint.md, "Nothing skipped silently").

A rule is *not judged* when it did not fire and a key its condition requires is missing from the config
graph for a reason outside the file: the world size is not known (no launcher, no ``WORLD_SIZE``), a value
comes from a variable the launch environment did not give, or the value is ``auto`` (filled in by the
trainer). Keys derived from such a key (data-parallel size, number of micro-batches, ...) are unknown too.
A rule whose other required keys are simply absent (MoE rules on a dense model) does not apply and is not
counted. The required keys of a condition are read from its text: the ``cfg:`` keys of its triple patterns
outside ``OPTIONAL``, ``NOT EXISTS``, ``MINUS``, ``UNION`` and ``VALUES`` blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc
from debugtune.engine.prevent.keys import AUTO
from debugtune.engine.prevent.vocab import CFG

_BLOCK_START = re.compile(r"\b(OPTIONAL|MINUS|NOT\s+EXISTS|VALUES\s*(?:\?\w+|\([^)]*\)))\s*\{", re.I)
_KEY = re.compile(r"(?<![\w<:/#])cfg:([A-Za-z_][A-Za-z0-9_.]*[A-Za-z0-9_])|<" + re.escape(CFG) + r"([^>]+)>")
_INSERT = re.compile(r"INSERT\s*\{(.*?)\}\s*WHERE", re.S | re.I)
WORLD_SIZE = "world_size"


@dataclass(frozen=True)
class Unjudged:
    """A rule that could not be judged: the keys it lacks and why they are unknown."""

    rule_id: str
    severity: str
    keys: tuple[str, ...]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule_id, "severity": self.severity, "keys": list(self.keys), "reason": self.reason}


def _close(text: str, at: int) -> int:
    """Index just after the ``}`` that closes the ``{`` at ``at``."""
    depth = 0
    for j in range(at, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def _strip_blocks(text: str) -> str:
    """The condition without its optional, negated and alternative parts."""
    while True:
        m = _BLOCK_START.search(text)
        if not m:
            break
        text = text[:m.start()] + text[_close(text, m.end() - 1):]
    while True:
        m = re.search(r"\}\s*UNION\s*\{", text, re.I)
        if not m:
            break
        start = _open_of(text, m.start())
        end = _close(text, m.end() - 1)
        while True:
            nxt = re.match(r"\s*UNION\s*\{", text[end:], re.I)
            if not nxt:
                break
            end = _close(text, end + nxt.end() - 1)
        text = text[:start] + text[end:]
    return text


def _open_of(text: str, close: int) -> int:
    """Index of the ``{`` that the ``}`` at ``close`` closes."""
    depth = 0
    for j in range(close, -1, -1):
        if text[j] == "}":
            depth += 1
        elif text[j] == "{":
            depth -= 1
            if depth == 0:
                return j
    return 0


def _keys(text: str) -> frozenset[str]:
    return frozenset(a or b for a, b in _KEY.findall(text))


@lru_cache(maxsize=4096)
def required_keys(condition: str) -> frozenset[str]:
    """The ``cfg:`` keys a condition cannot match without."""
    where = condition.split("WHERE", 1)[-1] if re.match(r"\s*(SELECT|ASK)", condition, re.I) else condition
    return _keys(_strip_blocks(where))


@dataclass(frozen=True)
class Derivation:
    """What one derivation rule adds (its outputs) from what (its required inputs)."""

    outputs: frozenset[str]
    inputs: frozenset[str]


def derivation(update: str, declared: Iterable[str] = ()) -> Derivation:
    """The outputs (``dt:derivesKey`` when given, else the keys of the INSERT template) and inputs of an update."""
    m = _INSERT.search(update)
    template = m.group(1) if m else ""
    where = update[m.end():] if m else update
    outputs = frozenset(declared) or _keys(template)
    return Derivation(outputs, required_keys("WHERE " + where) - outputs)


def unknown_keys(doc: ConfigDoc, values: Mapping[str, Any], derivations: Sequence[Derivation]) -> dict[str, str]:
    """Keys whose value cannot be known from the file and the environment given → why."""
    unknown: dict[str, str] = {}
    for key, text in doc.unresolved.items():
        if key not in values or values.get(key) == text:
            names = sorted(set(re.findall(r"\$\{?#?([A-Za-z_][A-Za-z0-9_]*)", text)))
            hint = ", ".join(f"--env {n}=…" for n in names) if names else "--env NAME=VALUE"
            unknown[key] = f"{key} comes from {text} — pass {hint}"
    for key, value in values.items():
        if value == AUTO:
            unknown[key] = f'{key} is "auto": the trainer fills it in at launch'
    _propagate(unknown, values, derivations)
    if WORLD_SIZE not in values and WORLD_SIZE not in unknown:
        unknown[WORLD_SIZE] = ("the world size is unknown — pass --env WORLD_SIZE=N (or NNODES and GPUS_PER_NODE), "
                               "or run where the launcher sets it")
        _propagate(unknown, values, derivations)
    return unknown


def _propagate(unknown: dict[str, str], values: Mapping[str, Any], derivations: Sequence[Derivation]) -> None:
    """Mark what the derivations would have added from unknown inputs as unknown, with the same reason."""
    changed = True
    while changed:
        changed = False
        for d in derivations:
            if not d.inputs or not any(k in unknown for k in d.inputs):
                continue
            if not all(k in values or k in unknown for k in d.inputs):
                continue
            cause = next(unknown[k] for k in sorted(d.inputs) if k in unknown)
            for out in d.outputs:
                if out not in values and out not in unknown:
                    unknown[out] = cause
                    changed = True


def not_judged(rule_id: str, severity: str, condition: str, values: Mapping[str, Any],
               unknown: Mapping[str, str]) -> Unjudged | None:
    """The rule's Unjudged record when the only keys it lacks are unknown ones (None: judged or not applicable)."""
    needed = required_keys(condition)
    lacking = [k for k in sorted(needed) if k not in values or values.get(k) == AUTO]
    if not lacking or not all(k in unknown for k in lacking):
        return None
    reasons = list(dict.fromkeys(unknown[k] for k in lacking))
    return Unjudged(rule_id, severity, tuple(lacking), "; ".join(reasons))


@lru_cache(maxsize=4096)
def negated_keys(condition: str) -> frozenset[str]:
    """The ``cfg:`` keys a condition may test for absence (inside ``NOT EXISTS``, ``MINUS`` or ``OPTIONAL``)."""
    out: set[str] = set()
    for m in re.finditer(r"\b(NOT\s+EXISTS|MINUS|OPTIONAL)\s*\{", condition, re.I):
        out |= _keys(condition[m.end() - 1:_close(condition, m.end() - 1)])
    return frozenset(out)


def given_keys(origin: Mapping[str, str], derivations: Sequence[Derivation]) -> set[str]:
    """The keys the file itself sets, and the derived keys computed only from such keys."""
    given = {k for k, o in origin.items() if o == "set"}
    changed = True
    while changed:
        changed = False
        for d in derivations:
            if d.inputs and d.inputs <= given and not d.outputs <= given:
                given |= d.outputs
                changed = True
    return given


def hidden_reason(hidden_args: Sequence[str]) -> str:
    shown = ", ".join(dict.fromkeys(hidden_args))
    return f"the arguments include {shown}, which this file does not show — a key the rule needs may be set there"


def summary(items: Sequence[Unjudged]) -> list[tuple[str, list[str]]]:
    """Reasons with the rules they keep from being judged, most rules first."""
    by_reason: dict[str, list[str]] = {}
    for u in items:
        by_reason.setdefault(u.reason, []).append(u.rule_id)
    return sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
