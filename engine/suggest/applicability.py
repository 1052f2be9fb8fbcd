"""Which suggestions a run's trial can apply: a remedy is tunable on a run when the trial sets every one of its
tuning parameters. The ranking stays the knowledge base's; applicability only reorders (applicable ones first,
in rank order) and says, for the others, what the trial cannot set — a remedy the run cannot express is shown
as such and never tuned first (a tuning of a parameter the trial ignores would return the same result for
every configuration).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from debugtune.kg.records import Suggestion


@dataclass(frozen=True)
class Applicability:
    """One suggestion and whether the run's trial can apply it (``missing``: parameters it cannot set)."""

    suggestion: Suggestion
    applicable: bool
    missing: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """Why it cannot be applied, empty when it can."""
        if self.applicable:
            return ""
        if not self.suggestion.parameters:
            return "no tuning parameters (apply it by hand)"
        return f"the run's trial cannot set {', '.join(self.missing)}"

    def as_dict(self) -> dict[str, object]:
        return {"remedy": self.suggestion.remedy, "applicable": self.applicable, "missing": list(self.missing),
                "reason": self.reason}


def applicability(suggestion: Suggestion, settable: Iterable[str] | None) -> Applicability:
    """Whether ``settable`` (None: unknown, every parameter counts as settable) covers the remedy's parameters."""
    if not suggestion.parameters:
        return Applicability(suggestion, False)
    if settable is None:
        return Applicability(suggestion, True)
    can = set(settable)
    missing = tuple(sorted(p.name for p in suggestion.parameters if p.name not in can))
    return Applicability(suggestion, not missing, missing)


def applicable_first(suggestions: Sequence[Suggestion], settable: Iterable[str] | None) -> list[Applicability]:
    """The suggestions with their applicability, applicable ones first; each group keeps the ranking's order."""
    settable = None if settable is None else tuple(settable)
    judged = [applicability(s, settable) for s in suggestions]
    return [a for a in judged if a.applicable] + [a for a in judged if not a.applicable]
