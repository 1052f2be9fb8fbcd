"""Errors of the diagnosis stage: each says what could not be diagnosed and why."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError, MissingThresholdError

__all__ = ["DiagnoseError", "MissingThresholdError"]


class DiagnoseError(DebugtuneError):
    """Telemetry or knowledge that the detectors cannot work with (names the run, metric or threshold)."""
