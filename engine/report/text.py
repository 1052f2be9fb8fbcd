"""Plain-text renderings of values a user reads: numbers with their unit, a remedy's tuning parameters and
config changes, "unset" for a missing value. The report, the dashboard and the CLI tables share them, so a
value reads the same everywhere (and ``None`` never reaches a user). Light on purpose: no numpy, no plotly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

UNSET = "unset"
_NONE_TEXTS = ("", "none", "null")

#: a column or field name → the unit its values carry (names ending in a unit suffix are found by suffix)
UNITS = {"cost": "card-h", "spent": "card-h", "budget": "card-h", "card_hours": "card-h", "seconds": "s",
         "wall_s": "s", "duration": "s"}
SUFFIX_UNITS = (("_card_hours", "card-h"), ("_ms", "ms"), ("_s", "s"), ("_seconds", "s"), ("_hours", "h"),
                ("_pct", "%"), ("_gbps", "GB/s"), ("_bytes", "B"), ("_mhz", "MHz"), ("_w", "W"), ("_c", "°C"))


def unit_of(name: str) -> str:
    """The unit of a named quantity ('' when it has none or is not known)."""
    key = name.lower()
    if key in UNITS:
        return UNITS[key]
    return next((u for suffix, u in SUFFIX_UNITS if key.endswith(suffix)), "")


def header(name: str) -> str:
    """A column name as a header: words instead of underscores, the unit in brackets."""
    unit = unit_of(name)
    words = name.replace("_", " ").strip()
    return f"{words} ({unit})" if unit else words


def is_unset(value: Any) -> bool:
    """Whether a value means 'not set' (None, or a None written out by a config dump)."""
    return value is None or (isinstance(value, str) and value.strip().lower() in _NONE_TEXTS)


def number(value: float | int, digits: int = 4) -> str:
    """A number to read: ``digits`` significant figures; from 1,000 to 1e9 whole and with thousands separated."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if value != value:  # NaN
        return "NaN"
    if 1000 <= abs(value) < 1e9:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def with_unit(value: float | int, unit: str) -> str:
    return f"{number(value)} {unit}" if unit else number(value)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)


def _plain(value: Any) -> str:
    if is_unset(value):
        return UNSET
    if isinstance(value, float | int):
        return number(value)
    return str(value)


def param_text(p: Any) -> str:
    """A tuning parameter: ``name ∈ [low, high] scale (default d)`` or ``name ∈ {a, b} (default d)``."""
    default = _get(p, "default")
    tail = "" if is_unset(default) else f" (default {_plain(default)})"
    choices = _get(p, "choices") or ()
    if choices:
        return f"{_get(p, 'name')} ∈ {{{', '.join(map(str, choices))}}}{tail}"
    low, high = _get(p, "low"), _get(p, "high")
    if low is None or high is None:
        return f"{_get(p, 'name')}{tail}"
    scale = _get(p, "scale") or "linear"
    return f"{_get(p, 'name')} ∈ [{_plain(low)}, {_plain(high)}]{' log' if scale == 'log' else ''}{tail}"


def change_text(c: Any) -> str:
    """A config change: ``key: from → to``, a missing side read as 'unset'."""
    return f"{_get(c, 'key')}: {_plain(_get(c, 'from_value'))} → {_plain(_get(c, 'to_value'))}"


def local(value: str) -> str:
    """The local name of an IRI (text after the last '/' or '#'); other text unchanged."""
    if value.startswith(("http://", "https://", "urn:")):
        tail = value.rstrip("/#").replace("#", "/").rsplit("/", 1)[-1]
        return tail or value
    return value


def value_text(name: str, value: Any, *, units: bool = True) -> list[str]:
    """The lines a value of column ``name`` shows as (a list gives one line per item); [] when empty.
    ``units=False`` when the header carries the unit (``header(name)``)."""
    if is_unset(value) and not isinstance(value, str | list | tuple | dict):
        return []
    if isinstance(value, list | tuple):
        return [line for v in value for line in _item(name, v, units)]
    if isinstance(value, Mapping):
        return [", ".join(f"{k}={_plain(v)}" for k, v in value.items())] if value else []
    if isinstance(value, float | int):
        return [with_unit(value, unit_of(name) if units else "")]
    text = str(value)
    if text.strip().lower() in _NONE_TEXTS:
        return []
    return [local(text)]


def _item(name: str, v: Any, units: bool) -> list[str]:
    if isinstance(v, Mapping):
        if "key" in v and ("to_value" in v or "from_value" in v):
            return [change_text(v)]
        if "name" in v and ("low" in v or "choices" in v or "default" in v):
            return [param_text(v)]
        if "name" in v:
            return [str(v["name"])]
        return [", ".join(f"{k}={_plain(x)}" for k, x in v.items())]
    return value_text(name, v, units=units)
