"""Errors of the telemetry store: each names the file (and field) that is wrong."""

from __future__ import annotations

from pathlib import Path

from debugtune.kg.errors import DebugtuneError


class TelemetryError(DebugtuneError):
    """A telemetry file or run directory that cannot be read or written; names the path."""

    def __init__(self, path: str | Path | None, message: str):
        self.path = None if path is None else str(path)
        self.detail = message
        super().__init__(message if path is None else f"{path}: {message}")
