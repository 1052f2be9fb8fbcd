"""The cost of a training problem and the return on a debugging setup (formulas and sources in docs/roi.md).

Every constant is a ``dt:Threshold`` under ``cost.*`` in ``cases/thresholds/cost.ttl`` with its
``dct:source``; callers may override each one. All times are hours; ``card-hours`` = hours x cards.

ROI of a debugging setup for a job of ``P`` parameters on ``C`` cards::

    incidents/day  I = r * C                       r: interruptions per card-day (Llama 3)
    restore        R = P * b / B / 3600            b: checkpoint bytes/param, B: restore bytes/s (BLOOM)
    rollback       K = interval / 2                the progress since the last checkpoint, on average
    lost/incident  T_manual = H + K + R,  T_tool = h + K + R     (H, h: hours to detect by hand / with the tool)
    saving/day     S = I * (H - h) * C             card-hours
    overhead/day   O = f * 24 * C                  f: fraction of step time the telemetry costs
    net/day        N = S - O;  ROI = N / O;  break-even H* = h + f * 24 / I   (where S = O)

The cost of one diagnosed run: from the onset of its problem to the last recorded step the job paid
``(last - onset + 1) * step_s * C / 3600`` card-hours on a broken run; the detectors flagged it
``(detection - onset) * step_s * C / 3600`` card-hours after onset; the difference is what stopping at
detection saves, and ``(H - t_detect) * C`` is the projected saving against a manual detection.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from debugtune.engine.report.errors import ReportError
from debugtune.kg.knowledge import thresholds
from debugtune.kg.store import Store

PREFIX = "cost."
HOURS_PER_DAY = 24.0
DAYS_PER_MONTH = 30.0


@dataclass(frozen=True)
class CostConstants:
    """The ``cost.*`` thresholds of the knowledge base (names without the prefix) and their sources."""

    card_hour_price: float
    interruptions_per_card_day: float
    manual_detect_hours: float
    tool_detect_hours: float
    checkpoint_interval_hours: float
    checkpoint_bytes_per_param: float
    restore_bytes_per_second: float
    tool_overhead_fraction: float
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "sources"]

    @classmethod
    def from_store(cls, store: Store) -> CostConstants:
        """Read every ``cost.*`` threshold and its ``dct:source`` (a missing one names the key)."""
        values = thresholds(store).require(*(PREFIX + n for n in cls.names()))
        rows = store.select(f"""SELECT ?k ?src WHERE {{ ?t a dt:Threshold ; dt:thresholdKey ?k ; dct:source ?src .
                               FILTER(STRSTARTS(?k, "{PREFIX}")) }} ORDER BY ?k ?src""").dicts()
        sources: dict[str, list[str]] = {}
        for r in rows:
            sources.setdefault(r["k"][len(PREFIX):], []).append(str(r["src"]))
        return cls(**{n: values[PREFIX + n] for n in cls.names()},
                   sources={k: tuple(v) for k, v in sources.items()})

    def override(self, **values: float | None) -> CostConstants:
        """A copy with the given (non-None) values replaced; their source becomes ``user``."""
        given = {k: v for k, v in values.items() if v is not None}
        unknown = set(given) - set(self.names())
        if unknown:
            raise ReportError(f"unknown cost constant {sorted(unknown)[0]!r} (known: {', '.join(self.names())})")
        for k, v in given.items():
            check_number(k, v, low=0.0)
        return replace(self, **given, sources={**self.sources, **{k: ("user",) for k in given}})


def check_number(name: str, value: float, *, low: float = 0.0, strict: bool = False) -> float:
    """``value`` as a float when finite and >= ``low`` (> with ``strict``); else a ReportError naming it."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ReportError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < low or (strict and v == low):
        raise ReportError(f"{name} must be a finite number {'>' if strict else '>='} {low:g}, got {value!r}")
    return v


@dataclass(frozen=True)
class Roi:
    """The return on a debugging setup for one job size (see the module docstring)."""

    params: float
    cards: int
    constants: CostConstants
    incidents_per_day: float
    restore_hours: float
    rollback_hours: float
    hours_lost_per_incident_manual: float
    hours_lost_per_incident_tool: float
    saving_card_hours_per_day: float
    overhead_card_hours_per_day: float
    break_even_hours_to_detect: float

    @property
    def net_card_hours_per_day(self) -> float:
        return self.saving_card_hours_per_day - self.overhead_card_hours_per_day

    @property
    def roi(self) -> float | None:
        """Net saving per unit of overhead spent (None when the setup costs nothing)."""
        o = self.overhead_card_hours_per_day
        return self.net_card_hours_per_day / o if o > 0 else None

    def money(self, card_hours: float) -> float:
        return card_hours * self.constants.card_hour_price

    def as_dict(self) -> dict[str, Any]:
        c = self.constants
        per_day = {
            "incidents": self.incidents_per_day,
            "card_hours_lost_manual": self.incidents_per_day * self.hours_lost_per_incident_manual * self.cards,
            "card_hours_lost_tool": self.incidents_per_day * self.hours_lost_per_incident_tool * self.cards,
            "saving_card_hours": self.saving_card_hours_per_day,
            "overhead_card_hours": self.overhead_card_hours_per_day,
            "net_card_hours": self.net_card_hours_per_day,
            "net_cost": self.money(self.net_card_hours_per_day),
        }
        return {
            "inputs": {"params": self.params, "cards": self.cards,
                       **{k: v for k, v in asdict(c).items() if k != "sources"}},
            "sources": {k: list(v) for k, v in c.sources.items()},
            "per_incident_hours": {"restore": self.restore_hours, "rollback": self.rollback_hours,
                                   "manual": self.hours_lost_per_incident_manual,
                                   "tool": self.hours_lost_per_incident_tool},
            "per_day": per_day,
            "per_month": {k: v * DAYS_PER_MONTH for k, v in per_day.items()},
            "roi": self.roi,
            "break_even_hours_to_detect": self.break_even_hours_to_detect,
            "currency": "USD",
        }


def roi(params: float, cards: int, constants: CostConstants) -> Roi:
    """The ROI of a debugging setup for a job of ``params`` parameters on ``cards`` cards."""
    p = check_number("params", params, strict=True)
    if isinstance(cards, bool) or not isinstance(cards, int) or cards < 1:
        raise ReportError(f"cards must be a whole number >= 1, got {cards!r}")
    c = constants
    rate = c.interruptions_per_card_day
    incidents = rate * cards
    restore = p * c.checkpoint_bytes_per_param / c.restore_bytes_per_second / 3600.0 \
        if c.restore_bytes_per_second > 0 else math.inf
    rollback = c.checkpoint_interval_hours / 2.0
    manual = c.manual_detect_hours + rollback + restore
    tool = c.tool_detect_hours + rollback + restore
    saving = incidents * (c.manual_detect_hours - c.tool_detect_hours) * cards
    overhead = c.tool_overhead_fraction * HOURS_PER_DAY * cards
    break_even = c.tool_detect_hours + (c.tool_overhead_fraction * HOURS_PER_DAY / incidents if incidents > 0
                                        else math.inf)
    return Roi(params=p, cards=cards, constants=c, incidents_per_day=incidents, restore_hours=restore,
               rollback_hours=rollback, hours_lost_per_incident_manual=manual, hours_lost_per_incident_tool=tool,
               saving_card_hours_per_day=saving, overhead_card_hours_per_day=overhead,
               break_even_hours_to_detect=break_even)


@dataclass(frozen=True)
class ProblemCost:
    """What one diagnosed problem cost the run (see the module docstring)."""

    cards: int
    step_seconds: float
    onset_step: int
    detection_step: int
    last_step: int
    card_hour_price: float
    manual_detect_hours: float
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def _card_hours(self, steps: float) -> float:
        return max(steps, 0.0) * self.step_seconds * self.cards / 3600.0

    @property
    def lost_card_hours(self) -> float:
        """Card-hours spent from the onset to the last recorded step (the run went on broken)."""
        return self._card_hours(self.last_step - self.onset_step + 1)

    @property
    def detect_hours(self) -> float:
        """Wall-clock hours from the onset until the detectors flagged it."""
        return max(self.detection_step - self.onset_step, 0) * self.step_seconds / 3600.0

    @property
    def detect_card_hours(self) -> float:
        return self._card_hours(self.detection_step - self.onset_step)

    @property
    def saved_card_hours(self) -> float:
        """Card-hours that stopping the run at detection would have saved."""
        return max(self.lost_card_hours - self.detect_card_hours, 0.0)

    @property
    def run_hours(self) -> float:
        """Wall-clock hours the recorded run lasted (steps 0 to the last, at the typical step time)."""
        return (self.last_step + 1) * self.step_seconds / 3600.0

    @property
    def projection_applies(self) -> bool:
        """Whether a saving against detection by hand means something: only for a job that runs at least as
        long as a detection by hand takes (a five-second run is over before anyone could look)."""
        return self.run_hours >= self.manual_detect_hours

    @property
    def projected_saving_card_hours(self) -> float:
        """Card-hours saved per incident against a manual detection taking ``manual_detect_hours``."""
        return max(self.manual_detect_hours - self.detect_hours, 0.0) * self.cards

    def as_dict(self) -> dict[str, Any]:
        price = self.card_hour_price
        return {
            "cards": self.cards, "step_seconds": self.step_seconds, "onset_step": self.onset_step,
            "detection_step": self.detection_step, "last_step": self.last_step,
            "card_hour_price": price, "manual_detect_hours": self.manual_detect_hours, "currency": "USD",
            "lost_card_hours": self.lost_card_hours, "lost_cost": self.lost_card_hours * price,
            "detect_hours": self.detect_hours, "detect_card_hours": self.detect_card_hours,
            "saved_card_hours": self.saved_card_hours, "saved_cost": self.saved_card_hours * price,
            "run_hours": self.run_hours, "projection_applies": self.projection_applies,
            "projected_saving_card_hours": self.projected_saving_card_hours,
            "projected_saving_cost": self.projected_saving_card_hours * price,
            "sources": {k: list(v) for k, v in self.sources.items()}, "notes": list(self.notes),
        }


def problem_cost(*, cards: int, step_seconds: float, onset_step: int, detection_step: int | None, last_step: int,
                 constants: CostConstants, notes: tuple[str, ...] = ()) -> ProblemCost:
    """The cost of one problem from run metadata; a missing detection step is taken as the onset (noted)."""
    if isinstance(cards, bool) or not isinstance(cards, int) or cards < 1:
        raise ReportError(f"world size (cards) must be a whole number >= 1, got {cards!r}")
    step_s = check_number("step time (s)", step_seconds, strict=True)
    extra: tuple[str, ...] = ()
    if detection_step is None:
        detection_step = onset_step
        extra = ("the detectors recorded no detection step; the onset is taken as the detection",)
    keep = ("card_hour_price", "manual_detect_hours")
    return ProblemCost(cards=cards, step_seconds=step_s, onset_step=int(onset_step),
                       detection_step=int(max(detection_step, onset_step)), last_step=int(last_step),
                       card_hour_price=constants.card_hour_price, manual_detect_hours=constants.manual_detect_hours,
                       sources={k: v for k, v in constants.sources.items() if k in keep}, notes=notes + extra)
