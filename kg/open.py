"""`open_store(target)`: None → in-memory Oxigraph, a directory → on-disk Oxigraph, a URL → remote."""

from __future__ import annotations

import os
from pathlib import Path

from debugtune.kg.store import OxigraphStore, Store


def open_store(target: str | os.PathLike[str] | None = None, *, token: str | None = None,
               timeout_s: float = 60.0) -> Store:
    """Open a store. The embedded kinds start empty; load the knowledge base with ``load_knowledge``."""
    if target is None or str(target) in ("", ":memory:", "memory"):
        return OxigraphStore(None)
    text = str(target)
    if text.startswith(("http://", "https://")):
        from debugtune.kg.remote import RemoteStore

        return RemoteStore(text, token=token, timeout_s=timeout_s)
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return OxigraphStore(path)
