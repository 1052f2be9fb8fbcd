"""Errors of the suggestion stage."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from debugtune.kg.errors import DebugtuneError


class SuggestError(DebugtuneError):
    """A run, remedy or setting the suggestion stage cannot use; names it and the closest known ones."""


def closest(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` known words closest to ``word`` (case-insensitive, difflib ratio ≥ 0.5)."""
    by_lower = {k.lower(): k for k in known}
    return [by_lower[m] for m in difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.5)]


def unknown(kind: str, word: str, known: Iterable[str]) -> str:
    """``unknown <kind> 'word'`` plus a "did you mean" hint when something is close."""
    near = closest(word, known)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return f"unknown {kind} {word!r}{hint}"
