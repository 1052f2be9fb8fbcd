"""Errors of the report stage."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError


class ReportError(DebugtuneError):
    """A report or cost figure that cannot be made: names the run, file or input at fault."""
