"""Errors of the tuning stage: each names the parameter, file or field that is wrong."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError


class TuneError(DebugtuneError):
    """Base class of tuning errors (bad search space, trial specification, budget, checkpoint...)."""


class SearchSpaceError(TuneError):
    """A remedy's tuning parameters that do not make a search space; names the parameter and field."""


class TrialSpecError(TuneError):
    """A trial command template or ``module:function`` that cannot be used; says what is wrong."""


class CheckpointError(TuneError):
    """A replay checkpoint that cannot be written or read; names the file."""
