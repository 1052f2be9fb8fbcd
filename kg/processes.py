"""Whether a process still runs, for the folders a process leaves beside its files (staging folders, query
worker checkpoints): those of a process that is gone are stale."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
