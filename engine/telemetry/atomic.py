"""Atomic file and directory publication: write beside the target under a hidden name, then rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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


@contextmanager
def staged_directory(target: str | Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a hidden sibling directory to fill; on success it is renamed to ``target``, on error deleted.

    With ``replace`` an existing ``target`` is swapped out (and removed) after the new one is complete;
    without it the caller must have checked that ``target`` does not exist.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=target.parent))
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
