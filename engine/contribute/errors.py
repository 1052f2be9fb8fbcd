"""Errors of the contribute stage (building, packaging, feedback and the sandbox)."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError


class ContributeError(DebugtuneError):
    """A run, option or package that cannot be contributed, given feedback or run; names what and why."""
