"""Checking a read configuration against the known keys of its framework and version.

Unknown keys (with the closest known key), values of the wrong type, values outside the choices and keys
that the target version does not accept become ``KeyIssue``s; prevention rules report them like any
other condition (they select ``dt:keyIssue`` nodes of the config graph)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc, KeyIssue
from debugtune.engine.prevent.keys import EntryPoint, FrameworkKeys, KeySpec, guess_scalar
from debugtune.engine.prevent.vocab import Version, format_version, in_range, parse_version


@dataclass
class CheckedConfig:
    """Settings as typed values with where each came from, and the issues found."""

    doc: ConfigDoc
    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    """key → "set" (written in the file), "default" (the framework's default) or "derived"."""
    issues: list[KeyIssue] = field(default_factory=list)
    entry_point: EntryPoint | None = None
    """The known training script the launch runs (None: no script, or one the knowledge base does not know)."""


def check(doc: ConfigDoc, keys: FrameworkKeys, version: Version | None,
          defaults_for: Collection[str] | None = None) -> CheckedConfig:
    """Type every setting, collect issues, and add the defaults of keys that were not set (of the keys in
    ``defaults_for`` only, when given: the keys some rule or derivation reads)."""
    out = CheckedConfig(doc, issues=list(doc.issues),
                        entry_point=keys.entry_point(doc.entry_point, set(doc.options.values())))
    allow_auto = doc.framework in ("deepspeed", "hf")
    for name, raw in doc.settings.items():
        line = doc.lines.get(name)
        key = keys.canonical(name)
        spec = keys.lookup(name)
        if spec is not None and not spec.derived and not in_range(version, spec.min_version, spec.max_version):
            switched = _meaning_in(keys, doc.options.get(name), version, raw)
            if switched is not None:
                spec, raw = switched
                key = spec.key
        if spec is not None and spec.groups and not _group_accepted(spec, doc, out.entry_point):
            option = doc.options.get(name, name)
            out.issues.append(KeyIssue("unknown", option, _text(raw), "added by " + ", ".join(spec.groups),
                                       line=line))
            continue
        if spec is not None and spec.groups and out.entry_point is None:
            # A key some training script adds, in a launch whose script we do not know: that script may
            # define it differently (type, choices), so only its presence is recorded.
            out.values[key] = raw if isinstance(raw, (str, int, float, bool)) else _text(raw)
            out.origin[key] = "set"
            continue
        if spec is None:
            if keys.in_open_section(name):
                out.values[name] = guess_scalar(raw) if not isinstance(raw, (list, dict)) else raw
                out.origin[name] = "set"
            else:
                out.issues.append(KeyIssue("unknown", name, _text(raw), closest=keys.closest_key(name) or "",
                                           line=line))
            continue
        if not in_range(version, spec.min_version, spec.max_version) and not spec.derived:
            out.issues.append(_version_issue(spec, raw, version, line))
            if version is not None:
                continue
        elif doc.version_inferred and spec.max_version and not spec.derived:
            out.issues.append(KeyIssue("removed-later", spec.key, _text(raw), f"removed in {spec.max_version}",
                                       line=line))
        if name in doc.unresolved:
            if spec.value_type == "str" or (spec.value_type == "list" and spec.item_type == "str"):
                out.values[key] = doc.unresolved[name]
                out.origin[key] = "set"
            continue
        try:
            value = spec.coerce(raw, allow_auto=allow_auto)
        except ValueError:
            out.issues.append(KeyIssue("invalid-value", key, _text(raw), spec.expected(), line=line))
            continue
        bad = spec.bad_choices(value)
        if bad:
            out.issues.append(KeyIssue("invalid-choice", key, _text(raw), ", ".join(spec.choices), line=line))
        if spec.value_type != "dict":
            out.values[key] = value
            out.origin[key] = "set"
    wanted = keys.keys.keys() if defaults_for is None else (k for k in defaults_for if k in keys.keys)
    for key in wanted:
        spec = keys.keys[key]
        if key in out.values or key in doc.settings or not spec.defaults or spec.derived:
            continue
        if not in_range(version, spec.min_version, spec.max_version):
            continue
        out.values[key] = list(spec.defaults) if spec.value_type == "list" else spec.defaults[0]
        out.origin[key] = "default"
    return out


def _meaning_in(keys: FrameworkKeys, option: str | None, version: Version | None,
                raw: Any) -> tuple[KeySpec, Any] | None:
    """The key an option means in ``version`` when its dest changed between releases (``--norm-epsilon``:
    ``norm_epsilon`` before 0.16, ``layernorm_epsilon`` from 0.16), with the value it then has."""
    for key, kind in keys.candidates.get(option or "", []):
        spec = keys.keys[key]
        if in_range(version, spec.min_version, spec.max_version):
            return spec, (raw if kind == "value" else kind == "true")
    return None


def _group_accepted(spec: KeySpec, doc: ConfigDoc, entry: EntryPoint | None) -> bool:
    """A key a training script adds is accepted when the launch runs that script, or one we do not know."""
    return doc.entry_point is None or entry is None or bool(set(spec.groups) & set(entry.groups))


def infer_version(doc: ConfigDoc, keys: FrameworkKeys) -> tuple[str, str] | None:
    """For a configuration that names no release but uses keys the newest release no longer has: the newest
    release that accepts every key it sets, and why (None when the newest accepts them all, or when no
    release accepts them all — then the newest is linted and the removed keys are errors)."""
    ranges: list[tuple[str, Version, Version | None]] = []
    for name in doc.settings:
        specs = [keys.keys[k] for k, _ in keys.candidates.get(doc.options.get(name, ""), [])] or \
            [s for s in [keys.lookup(name)] if s is not None]
        specs = [s for s in specs if not s.derived]
        if not specs:
            continue
        low = min((parse_version(s.min_version) or (0, 0, 0)) for s in specs)
        highs = [parse_version(s.max_version) for s in specs]
        high = None if any(h is None for h in highs) else max(h for h in highs if h is not None)
        ranges.append((name, low, high))
    removed: list[tuple[str, Version]] = [(n, h) for n, _, h in ranges if h is not None]
    if not removed:
        return None
    low = max(lo for _, lo, _ in ranges)
    name, high = min(removed, key=lambda r: r[1])
    releases = sorted({v for s in keys.keys.values() for v in map(parse_version, (s.min_version, s.max_version))
                       if v is not None} | {low})
    fits = [r for r in releases if low <= r < high]
    if not fits:
        return None
    version = format_version(fits[-1])
    option = doc.options.get(name, name)
    return version, (f"linted for Megatron-LM {version}, the newest release that accepts every argument given "
                     f"({option} was removed in {format_version(high)}); pass --version to lint for another")


def _version_issue(spec: KeySpec, raw: Any, version: Version | None, line: int | None) -> KeyIssue:
    span = ", ".join(filter(None, (spec.min_version and f"from {spec.min_version}",
                                   spec.max_version and f"before {spec.max_version}")))
    if version is None:
        return KeyIssue("removed", spec.key, _text(raw), f"accepted {span}", line=line)
    return KeyIssue("not-in-version", spec.key, _text(raw), f"accepted {span}, not in {format_version(version)}",
                    line=line)


def _text(raw: Any) -> str:
    if isinstance(raw, (list, tuple)):
        return " ".join(_text(x) for x in raw)
    if isinstance(raw, bool):
        return str(raw).lower()
    return "" if raw is None else str(raw)
