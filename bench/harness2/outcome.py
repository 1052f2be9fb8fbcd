"""What a harness-2 program returns: its own record of the training, judged by :mod:`.manifest` — never what the
probe wrote, so manifestation does not lean on the system under test."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    losses: list[float]                       # the training loss the program computed, per logged step
    learned: bool | None = None               # the program's own success test (healthy kinds), None when it has none
    extra: dict[str, float] = field(default_factory=dict)   # program-specific figures (expert load CV …)

    def final(self, share: float = 0.1) -> float:
        """Median of the last ``share`` of the losses (inf when a loss was non-finite there)."""
        import math

        tail = self.losses[-max(1, int(len(self.losses) * share)):]
        if not tail or any(not math.isfinite(v) for v in tail):
            return math.inf
        return sorted(tail)[len(tail) // 2]
