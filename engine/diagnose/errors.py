"""Errors of the diagnosis stage: each says what could not be diagnosed and why."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError


class DiagnoseError(DebugtuneError):
    """Telemetry or knowledge that the detectors cannot work with (names the run, metric or threshold)."""


class MissingThresholdError(DiagnoseError):
    """A detector asked for a threshold key that the knowledge base does not define."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"threshold {key!r} is not in the knowledge base (define it as a dt:Threshold "
                         f"in cases/thresholds/*.ttl)")
