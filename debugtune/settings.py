"""Where debugtune keeps its state, from the environment with sane defaults."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """``$DEBUGTUNE_HOME`` or ``~/.debugtune``: the local store, tokens, caches."""
    return Path(os.environ.get("DEBUGTUNE_HOME") or Path.home() / ".debugtune")


def default_store() -> str:
    """The store used when ``--store`` is not given: ``$DEBUGTUNE_STORE`` or an on-disk store in home()."""
    return os.environ.get("DEBUGTUNE_STORE") or str(home() / "store")


def lock_wait_s() -> float:
    """``$DEBUGTUNE_LOCK_WAIT_S`` (default 10): how long a writing command waits for a store another process
    holds before it stops and names that process."""
    text = os.environ.get("DEBUGTUNE_LOCK_WAIT_S", "")
    try:
        return max(float(text), 0.0) if text else 10.0
    except ValueError:
        return 10.0
