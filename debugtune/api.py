"""The Python API behind ``debugtune.diagnose`` and ``debugtune.query`` (front door; imports every stage)."""

from __future__ import annotations

__all__: list[str] = []
