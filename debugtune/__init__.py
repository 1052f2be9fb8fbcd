"""debugtune: diagnose and tune deep-learning training runs with a knowledge graph.

Public API (imported lazily so that `import debugtune` stays fast and torch stays optional):
``open_store``, ``attach``, ``diagnose``, ``query``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_API = {
    "open_store": ("debugtune.kg", "open_store"),
    "load_knowledge": ("debugtune.kg.knowledge", "load_knowledge"),
    "attach": ("debugtune.engine.capture", "attach"),
    "diagnose": ("debugtune.api", "diagnose"),
    "query": ("debugtune.api", "query"),
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'debugtune' has no attribute {name!r}")
