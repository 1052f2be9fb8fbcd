"""What a query worker opens instead of the live directory of an on-disk store: a RocksDB checkpoint.

A worker cannot use the RocksDB handle it inherits by fork (its background threads are gone), so it opens the
store read-only. On the live directory that races with the server's own compaction: RocksDB deletes the table
files it has merged, and a read-only instance opens table files lazily, so a worker dies ("IO error: No such
file or directory: While open a file for random read: …sst") at its open or at a later query — more often the
more loaded the machine, since a slow compaction overlaps the worker's start (issue 36: 13 of 60 forks after a
write died). A checkpoint (``pyoxigraph.Store.backup``: hard links of the table files, tens of milliseconds)
holds its files however the server compacts; one is taken per write generation and store, and removed when no
live worker uses it. Checkpoints lie beside the store (hard links need the same file system), in
``.<store>.workers-<pid>-*``; those of a server that is gone are removed by the next one.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from debugtune.kg.processes import process_alive
from debugtune.kg.store import OxigraphStore

LOG = logging.getLogger("debugtune.query_workers")


def _sweep_stale(store: Path) -> None:
    """Remove checkpoint folders of servers that are no longer running."""
    for folder in store.parent.glob(f".{store.name}.workers-*"):
        pid = folder.name[len(f".{store.name}.workers-"):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


class Checkpoints:
    """Checkpoints of the shared on-disk stores, one folder per (write generation, store), counted by the workers
    that use them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roots: dict[int, Path] = {}  # store key -> this server's folder beside that store
        self._taken: dict[int, dict[int, Path]] = {}  # generation -> store key -> checkpoint
        self._users: dict[int, int] = {}  # generation -> workers using its checkpoints
        self._latest = -1

    def take(self, generation: int, stores: dict[int, OxigraphStore]) -> dict[int, Path]:
        """The checkpoints of ``generation`` for one more worker (taken now if new; call under the store's write
        lock, and `drop` when that worker is gone). A store whose checkpoint fails (another file system, files
        gone under a read-only handle) is left out, with a warning: its workers open the live directory."""
        with self._lock:
            if generation not in self._taken:
                self._taken[generation] = {k: p for k, s in stores.items() if (p := self._checkpoint(k, s, generation))}
                self._latest = max(self._latest, generation)
                self._remove_unused()
            self._users[generation] = self._users.get(generation, 0) + 1
            return self._taken[generation]

    def _checkpoint(self, key: int, store: OxigraphStore, generation: int) -> Path | None:
        assert store.path is not None
        try:
            if key not in self._roots:
                _sweep_stale(store.path)
                self._roots[key] = Path(tempfile.mkdtemp(prefix=f".{store.path.name}.workers-{os.getpid()}-",
                                                         dir=store.path.parent))
            target = self._roots[key] / f"g{generation}"
            shutil.rmtree(target, ignore_errors=True)
            store.raw.backup(str(target))  # flushes a read-write store first
            return target
        except (OSError, RuntimeError) as err:
            LOG.warning("%s: no checkpoint for the query workers (%s: %s); they open the live directory",
                        store.path, type(err).__name__, err)
            return None

    def drop(self, generation: int) -> None:
        """One worker of ``generation`` is gone; checkpoints no worker uses, but the latest, are removed."""
        with self._lock:
            if self._users.get(generation, 0) > 0:
                self._users[generation] -= 1
            self._remove_unused()

    def _remove_unused(self) -> None:
        for generation in [g for g in self._taken if g != self._latest and not self._users.get(g)]:
            self._users.pop(generation, None)
            for path in self._taken.pop(generation).values():
                shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Remove every checkpoint folder (the workers are gone)."""
        with self._lock:
            for root in self._roots.values():
                shutil.rmtree(root, ignore_errors=True)
            self._roots.clear()
            self._taken.clear()
            self._users.clear()
