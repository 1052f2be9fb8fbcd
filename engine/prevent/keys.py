"""Known configuration keys per framework (``dt:ConfigKey`` in ``cases/prevention/keys-*.ttl``): types,
defaults, command-line options, choices, version ranges; value coercion and closest-match suggestions."""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.prevent.vocab import ANY, FRAMEWORKS, parse_version
from debugtune.kg.namespaces import DT
from debugtune.kg.results import to_python
from debugtune.kg.store import Store

_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False,
               "on": True, "off": False}
AUTO = "auto"
"""DeepSpeed and Hugging Face accept "auto" for numbers the trainer fills in."""


@dataclass(frozen=True)
class KeySpec:
    """One known key: what values it takes and how it is written on a command line."""

    key: str
    framework: str
    value_type: str = "any"
    item_type: str | None = None
    defaults: tuple[Any, ...] = ()
    choices: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    true_flags: tuple[str, ...] = ()
    false_flags: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    open_section: bool = False
    derived: bool = False
    min_version: str | None = None
    max_version: str | None = None
    groups: tuple[str, ...] = ()
    """The providers (``file:function`` passed as extra_args_provider) that add this key to the parser;
    empty for the framework's own keys."""
    optional_value: bool = False
    """The option may be given without a value (argparse ``nargs='?'`` or ``'*'``)."""

    def expected(self) -> str:
        """What the key accepts, for messages."""
        kind = f"list of {self.item_type}" if self.value_type == "list" and self.item_type else self.value_type
        return kind + (f" (one of {', '.join(self.choices)})" if self.choices else "")

    def coerce(self, raw: Any, *, allow_auto: bool = False) -> Any:
        """The value as this key's type; raises ValueError when it is not one."""
        if allow_auto and raw == AUTO:
            return AUTO
        if self.value_type == "list":
            items = raw if isinstance(raw, (list, tuple)) else [raw]
            return [_coerce_scalar(self.item_type or "any", x) for x in items]
        if self.value_type == "dict":
            if not isinstance(raw, dict):
                raise ValueError(f"expected a section (mapping), got {raw!r}")
            return raw
        return _coerce_scalar(self.value_type, raw)

    def bad_choices(self, value: Any) -> list[Any]:
        """The items of ``value`` that are not among the key's choices ([] when it has none)."""
        if not self.choices:
            return []
        items = value if isinstance(value, list) else [value]
        return [x for x in items if str(x) not in self.choices and x != AUTO]


def _coerce_scalar(kind: str, raw: Any) -> Any:
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, (int, str)) and str(raw).strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[str(raw).strip().lower()]
        raise ValueError(f"expected true or false, got {raw!r}")
    if kind == "int":
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str):
            try:
                return int(raw.strip().replace("_", ""))
            except ValueError:
                pass
        raise ValueError(f"expected an integer, got {raw!r}")
    if kind == "float":
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {raw!r}")
        if isinstance(raw, (int, float)):
            return float(raw)
        if isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                value = math.nan
            if not math.isnan(value):
                return value
        raise ValueError(f"expected a number, got {raw!r}")
    if kind == "str":
        if isinstance(raw, (dict, list)):
            raise ValueError(f"expected a string, got {raw!r}")
        return raw if isinstance(raw, str) else _plain(raw)
    return guess_scalar(raw)


def _plain(raw: Any) -> str:
    return str(raw).lower() if isinstance(raw, bool) else str(raw)


def guess_scalar(raw: Any) -> Any:
    """A command-line word as the literal it looks like (int, float, bool or text); other values unchanged."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return raw


@dataclass(frozen=True)
class EntryPoint:
    """A training script of a framework, and whether it extends the argument parser."""

    path: str
    framework: str
    extends: bool
    groups: tuple[str, ...] = ()
    mode: str = "training"
    selected_by: str | None = None
    """An option that picks this script over another of the same path: a fork's script
    (Megatron-DeepSpeed's ``pretrain_gpt.py`` when the launch passes ``--deepspeed``)."""

    def matches(self, script: str) -> bool:
        return script == self.path or script.endswith("/" + self.path)


@dataclass
class FrameworkKeys:
    """The keys one framework accepts (its own plus the launch-context keys of framework "any")."""

    framework: str
    keys: dict[str, KeySpec]
    aliases: dict[str, str] = field(default_factory=dict)
    options: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Command-line option → (key, "value" | "true" | "false") of the newest release that has the option."""
    candidates: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Command-line option → every (key, kind) it has meant, newest first (an option whose dest changed)."""
    entry_points: tuple[EntryPoint, ...] = ()
    launch_variables: frozenset[str] = frozenset()
    """Environment variables of the launch topology (dt:LaunchVariable)."""

    def __post_init__(self) -> None:
        for spec in self.keys.values():
            for a in spec.aliases:
                self.aliases[a] = spec.key
            for kind, opts in (("value", spec.options), ("true", spec.true_flags), ("false", spec.false_flags)):
                for o in opts:
                    self.candidates.setdefault(o, []).append((spec.key, kind))
        for o, found in self.candidates.items():
            found.sort(key=lambda kk: _recency(self.keys[kk[0]]), reverse=True)
            self.options[o] = found[0]
        self._open = tuple(k + "." for k, s in self.keys.items() if s.open_section)

    def entry_point(self, script: str | None, given: Collection[str] = ()) -> EntryPoint | None:
        """The known training script ``script`` runs (None when unknown or ambiguous); ``given`` are the
        options of the launch, which select a fork's script of the same path (``EntryPoint.selected_by``)."""
        if not script:
            return None
        usable = [e for e in self.entry_points if e.selected_by is None or e.selected_by in given]
        found = _prefer_selected([e for e in usable if e.matches(script)])
        if not found:
            base = script.rsplit("/", 1)[-1]
            found = _prefer_selected([e for e in usable if e.path.rsplit("/", 1)[-1] == base])
            if len({(e.extends, e.groups) for e in found}) > 1:
                return None
        return max(found, key=lambda e: len(e.path)) if found else None

    def lookup(self, key: str) -> KeySpec | None:
        """The spec of ``key`` or of the key it is an alias of."""
        return self.keys.get(key) or self.keys.get(self.aliases.get(key, ""))

    def canonical(self, key: str) -> str:
        return self.aliases.get(key, key)

    def in_open_section(self, key: str) -> bool:
        """Whether ``key`` lies under a section that accepts any sub-key."""
        return key.startswith(self._open)

    def closest_key(self, key: str) -> str | None:
        found = difflib.get_close_matches(key, [k for k, s in self.keys.items() if not s.derived], n=1, cutoff=0.6)
        return found[0] if found else None

    def closest_option(self, option: str) -> str | None:
        found = difflib.get_close_matches(option, list(self.options), n=1, cutoff=0.6)
        return found[0] if found else None


def _prefer_selected(found: list[EntryPoint]) -> list[EntryPoint]:
    """The scripts an option of the launch selected, when there are any among ``found``."""
    return [e for e in found if e.selected_by is not None] or found


def _recency(spec: KeySpec) -> tuple[int, tuple[int, int, int]]:
    """Sort key: a key the newest release still accepts first, then the one introduced last."""
    return (spec.max_version is None, parse_version(spec.max_version or spec.min_version) or (0, 0, 0))


class KeyRegistry:
    """All known keys, by framework, with the frameworks' training scripts and the launchers' variables."""

    def __init__(self, specs: Iterable[KeySpec], entry_points: Iterable[EntryPoint] = (),
                 launch_variables: Iterable[str] = ()):
        self._by_fw: dict[str, dict[str, KeySpec]] = defaultdict(dict)
        for s in specs:
            self._by_fw[s.framework][s.key] = s
        self._views: dict[str, FrameworkKeys] = {}
        self.entry_points = tuple(entry_points)
        self.launch_variables = tuple(sorted(set(launch_variables)))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_fw.values())

    def for_framework(self, framework: str) -> FrameworkKeys:
        """The keys of ``framework`` merged with the context keys every framework accepts."""
        if framework not in self._views:
            merged = {**self._by_fw.get(ANY, {}), **self._by_fw.get(framework, {})}
            eps = tuple(e for e in self.entry_points if e.framework == framework)
            self._views[framework] = FrameworkKeys(framework, merged, entry_points=eps,
                                                   launch_variables=frozenset(self.launch_variables))
        return self._views[framework]

    def frameworks_knowing(self, key: str) -> list[str]:
        """Frameworks (in FRAMEWORKS order) whose own keys include ``key``."""
        return [fw for fw in FRAMEWORKS if key in self._by_fw.get(fw, {})]

    @classmethod
    def from_store(cls, store: Store) -> KeyRegistry:
        """Read every ``dt:ConfigKey`` of the store (knowledge base and local graph)."""
        rows = store.select("SELECT ?k ?p ?o WHERE { ?k a dt:ConfigKey ; ?p ?o }")
        props: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
        for k, p, o in rows.rows:
            props[to_python(k)][to_python(p)].append(to_python(o))
        eps = store.select("""SELECT ?e ?path ?fw ?ext ?mode ?sel (GROUP_CONCAT(?g; separator="\\n") AS ?groups)
            WHERE { ?e a dt:EntryPoint ; dt:scriptPath ?path ; dt:framework ?fw ; dt:extendsParser ?ext .
            OPTIONAL { ?e dt:launchMode ?mode } OPTIONAL { ?e dt:addsKeyGroup ?g }
            OPTIONAL { ?e dt:selectedByOption ?sel } }
            GROUP BY ?e ?path ?fw ?ext ?mode ?sel""").dicts()
        entry_points = [EntryPoint(str(r["path"]), str(r["fw"]), bool(r["ext"]),
                                   tuple(sorted(filter(None, str(r["groups"] or "").split("\n")))),
                                   str(r["mode"] or "training"), str(r["sel"]) if r.get("sel") else None)
                        for r in eps]
        variables = store.select("SELECT ?n WHERE { ?v a dt:LaunchVariable ; dt:variableName ?n }").column("n")
        return cls((_spec(v) for v in props.values() if v.get(DT + "key")), entry_points, map(str, variables))


def _spec(p: dict[str, list[Any]]) -> KeySpec:
    def one(name: str) -> Any:
        values = p.get(DT + name) or [None]
        return values[0]

    def many(name: str) -> tuple[Any, ...]:
        return tuple(sorted(p.get(DT + name, []), key=str)) if name != "defaultValue" else tuple(p.get(DT + name, []))

    return KeySpec(
        key=one("key"), framework=one("framework") or ANY, value_type=one("valueType") or "any",
        item_type=one("itemType"), defaults=many("defaultValue"), choices=tuple(str(c) for c in many("choice")),
        options=many("option"), true_flags=many("trueFlag"), false_flags=many("falseFlag"), aliases=many("keyAlias"),
        open_section=bool(one("openSection")), derived=bool(one("derived")),
        min_version=one("minVersion"), max_version=one("maxVersion"), groups=many("keyGroup"),
        optional_value=bool(one("optionalValue")))
