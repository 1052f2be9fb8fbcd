"""`open_store(target)`: None → in-memory Oxigraph, a directory → on-disk Oxigraph, a URL → remote;
`open_for_reading(target)`: the same for a command that only reads, beside a writer holding the store."""

from __future__ import annotations

import os
from pathlib import Path

from debugtune.kg.errors import KgError
from debugtune.kg.store import OxigraphStore, Store


def _is_memory(target: str | os.PathLike[str] | None) -> bool:
    return target is None or str(target) in ("", ":memory:", "memory")


def open_store(target: str | os.PathLike[str] | None = None, *, token: str | None = None,
               timeout_s: float = 60.0, wait_s: float = 0.0) -> Store:
    """Open a store. The embedded kinds start empty; load the knowledge base with ``load_knowledge``.
    An on-disk store held read-write by another process is waited for ``wait_s`` seconds."""
    if _is_memory(target):
        return OxigraphStore(None)
    text = str(target)
    if text.startswith(("http://", "https://")):
        from debugtune.kg.remote import RemoteStore

        return RemoteStore(text, token=token, timeout_s=timeout_s)
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return OxigraphStore(path, wait_s=wait_s)


def open_for_reading(target: str | os.PathLike[str] | None = None, *, token: str | None = None,
                     timeout_s: float = 60.0) -> Store:
    """A store for a command that only reads. An on-disk store is opened read-only (it works while another
    process such as ``serve`` or a diagnosis holds it read-write); when its knowledge base is not the one
    shipped (so it would need loading) or it cannot be opened, its own graphs (runs, learned rules) are
    copied into an in-memory store, which the caller loads the knowledge base into. A missing store is an
    empty in-memory one."""
    from debugtune.kg.knowledge import is_current

    if _is_memory(target) or str(target).startswith(("http://", "https://")):
        return open_store(target, token=token, timeout_s=timeout_s)
    path = Path(str(target)).expanduser()
    memory = OxigraphStore(None)
    memory.target = f"{path} (read into memory)"
    if not (path / "CURRENT").is_file():
        return memory
    try:
        snapshot = OxigraphStore(path, read_only=True)
    except KgError:
        return memory
    if is_current(snapshot):
        return snapshot
    memory.raw.extend(q for q in snapshot.raw if not is_knowledge_graph(q.graph_name))
    snapshot.close()
    return memory


def is_knowledge_graph(graph: object) -> bool:
    """Whether a graph name is one that ``load_knowledge`` writes (ontology, knowledge base)."""
    from debugtune.kg.namespaces import GRAPH_KB, GRAPH_ONTOLOGY

    return getattr(graph, "value", None) in (GRAPH_KB, GRAPH_ONTOLOGY)
