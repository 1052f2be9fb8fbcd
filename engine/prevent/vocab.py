"""The config-graph vocabulary (docs/lint.md), framework names and version comparison."""

from __future__ import annotations

import re
from typing import overload

from debugtune.kg.namespaces import SPARQL_PREFIXES

CFG = "https://w3id.org/debugtune/config#"
"""Settings of a launch configuration: ``cfg:tensor_model_parallel_size 8``."""
ENV = "https://w3id.org/debugtune/config/env#"
"""Environment variables of a launch: ``env:CUDA_DEVICE_MAX_CONNECTIONS "1"``."""
CONFIG_BASE = "urn:debugtune:config:"

FN = "https://w3id.org/debugtune/fn#"
"""Functions a derivation rule may call (engine/prevent/functions.py): ``dtfn:expandRepeats(?text, ?pattern)``."""
CONFIG_PREFIXES = SPARQL_PREFIXES + f"PREFIX cfg: <{CFG}>\nPREFIX env: <{ENV}>\nPREFIX dtfn: <{FN}>\n"
"""PREFIX block put before every rule condition and derivation update."""

FRAMEWORKS = ("megatron", "deepspeed", "hf")
ANY = "any"
SEVERITIES = ("error", "warning")

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_graph_key(key: str) -> bool:
    """True when ``key`` can be a property local name in the config graph (letters, digits, ``_``, ``.``)."""
    return bool(_KEY.match(key)) and not key.endswith(".")


def is_env_name(name: str) -> bool:
    """True for a well-formed environment variable name."""
    return bool(_ENV_NAME.match(name))


def variable_name(key: str) -> str:
    """The SPARQL variable a rule uses for a key: every character other than a letter, digit or ``_`` → ``_``."""
    return re.sub(r"\W", "_", key)


Version = tuple[int, int, int]


def parse_version(text: str | None) -> Version | None:
    """``"0.12.0"``, ``"core_v0.12.0rc3"``, ``"v4.46"`` → ``(0, 12, 0)`` / ``(4, 46, 0)``; None for None or ''."""
    if not text:
        return None
    m = re.search(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if not m:
        raise ValueError(f"not a version: {text!r} (expected something like 0.12.0)")
    return tuple(int(g or 0) for g in m.groups())  # type: ignore[return-value]


def in_range(version: Version | None, low: str | None, high: str | None) -> bool:
    """Whether ``version`` is in [low, high). An unknown version means the newest: it passes unless ``high`` is set."""
    if version is None:
        return high is None
    lo, hi = parse_version(low), parse_version(high)
    return (lo is None or version >= lo) and (hi is None or version < hi)


@overload
def format_version(version: Version) -> str: ...


@overload
def format_version(version: None) -> None: ...


@overload
def format_version(version: Version | None) -> str | None: ...


def format_version(version: Version | None) -> str | None:
    """``(0, 12, 0)`` → ``"0.12.0"``; a version given is always a text (the overloads say so to callers)."""
    return None if version is None else ".".join(map(str, version))
