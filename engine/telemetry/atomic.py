"""Atomic file and directory publication: write beside the target under a hidden name, then rename."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from debugtune.kg.processes import process_alive


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_STALE_AFTER_S = 24 * 3600
"""A staging folder without its writer's process id (written before ids were recorded) is stale after a day."""


def clean_stale_stages(target: str | Path) -> list[Path]:
    """Remove the staging (and swapped-out ``.old``) folders of ``target`` that a killed writer left behind.

    A folder is ``.<name>.<pid>.<random>.staging`` (or ``.<name>.<pid>.old``); it is stale when that
    process is gone (or, without a process id, when it is a day old). Returns what was removed.
    """
    target = Path(target)
    removed: list[Path] = []
    if not target.parent.is_dir():
        return removed
    for entry in target.parent.glob(f".{glob_escape(target.name)}.*"):
        if not entry.is_dir() or not entry.name.endswith((".staging", ".old")):
            continue
        middle = entry.name[len(target.name) + 2:].split(".")
        pid = int(middle[0]) if middle and middle[0].isdigit() else None
        stale = not process_alive(pid) if pid is not None else (time.time() - entry.stat().st_mtime > _STALE_AFTER_S)
        if stale and pid != os.getpid():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


@contextmanager
def staged_directory(target: str | Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a hidden sibling directory to fill; on success it is renamed to ``target``, on error deleted.

    With ``replace`` an existing ``target`` is swapped out (and removed) after the new one is complete;
    without it the caller must have checked that ``target`` does not exist. Stale staging folders of
    ``target`` (`clean_stale_stages`) are removed first.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_stages(target)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".staging", dir=target.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = None
    if target.exists():
        if not replace:
            shutil.rmtree(stage, ignore_errors=True)
            raise FileExistsError(str(target))
        old = target.with_name(f".{target.name}.{os.getpid()}.old")
        os.replace(target, old)
    os.replace(stage, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
