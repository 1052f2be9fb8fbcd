"""Plain records of the tuning stage: objectives, historical tasks, trial requests, outcomes and results."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from debugtune.engine.tune.errors import TuneError

DIRECTIONS = ("min", "max")


@dataclass(frozen=True)
class Objective:
    """A metric the trials report and the tuner minimises (``min``) or maximises (``max``)."""

    name: str
    direction: str = "min"

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").replace(".", "a").isalnum():
            raise TuneError(f"objective name {self.name!r}: use letters, digits, '_', '-' or '.'")
        if self.name == "cost":
            raise TuneError("'cost' is the trial's spend in card-hours, not an objective")
        if self.direction not in DIRECTIONS:
            raise TuneError(f"objective {self.name!r}: direction {self.direction!r} is not 'min' or 'max'")

    @classmethod
    def parse(cls, text: str) -> Objective:
        """``"loss"``, ``"cv:min"`` or ``"acc:max"``."""
        name, _, direction = text.strip().partition(":")
        return cls(name.strip(), (direction or "min").strip().lower())

    @property
    def sign(self) -> float:
        """+1 for min, -1 for max: ``sign * value`` is always minimised."""
        return 1.0 if self.direction == "min" else -1.0

    def better(self, a: float, b: float) -> bool:
        """Whether value ``a`` is at least as good as ``b``."""
        return self.sign * a <= self.sign * b

    def __str__(self) -> str:
        return f"{self.name}:{self.direction}"


@dataclass(frozen=True)
class Task:
    """A historical tuning task (one similar case or run): configurations and their objective values."""

    name: str
    configs: tuple[dict[str, Any], ...]
    values: tuple[dict[str, float], ...]
    similarity: float = 1.0
    source: str = ""

    def __len__(self) -> int:
        return len(self.configs)


@dataclass(frozen=True)
class TrialRequest:
    """One trial to run: its index in the session, configuration, seed and replay checkpoint."""

    index: int
    params: dict[str, Any]
    seed: int
    checkpoint: str | None = None


@dataclass(frozen=True)
class TrialOutcome:
    """What a trial returned: metric values, cost (card-hours), status and error text, wall seconds."""

    values: dict[str, float]
    cost: float
    status: str = "ok"
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Trial:
    """A finished experiment of a tuning session."""

    index: int
    params: dict[str, Any]
    values: dict[str, float]
    cost: float
    status: str
    seed: int
    origin: str
    batch: int
    error: str | None = None
    seconds: float = 0.0
    weights: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "params": dict(self.params), "values": dict(self.values), "cost": self.cost,
                "status": self.status, "seed": self.seed, "origin": self.origin, "batch": self.batch,
                "error": self.error, "seconds": round(self.seconds, 3),
                "weights": {k: round(v, 4) for k, v in self.weights.items()}}


@dataclass(frozen=True)
class TuningResult:
    """A finished session: its trials, best trial, Pareto front, hypervolume, spend and why it stopped."""

    trials: tuple[Trial, ...]
    objectives: tuple[Objective, ...]
    best: Trial | None
    pareto: tuple[Trial, ...]
    hypervolume: float | None
    spent: float
    budget: float | None
    stop_reason: str

    def experiments_to_target(self, target: float) -> int | None:
        """The 1-based number of experiments after which the first objective first reached ``target``."""
        obj = self.objectives[0]
        for n, t in enumerate(self.trials, start=1):
            if t.ok and obj.name in t.values and obj.better(t.values[obj.name], target):
                return n
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"objectives": [str(o) for o in self.objectives], "stop_reason": self.stop_reason,
                "spent": self.spent, "budget": self.budget,
                "best": self.best.as_dict() if self.best else None,
                "pareto": [t.index for t in self.pareto],
                "hypervolume": self.hypervolume, "trials": [t.as_dict() for t in self.trials]}


def finite(value: Any) -> bool:
    """Whether ``value`` is a finite real number (bools excluded)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
