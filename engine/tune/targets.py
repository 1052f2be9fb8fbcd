"""Joint targets: several metrics, each with a bound, met together or not at all.

A tuning whose fix must bring several findings back under their limits at once (the utilisation spread, the
cross-cabinet share and the loss, say) searches one scalar, the *violation*: the largest log-ratio of a metric to
its bound, ``max_i log(value_i / bound_i)`` for an upper bound (``metric<=bound``) and ``log(bound_i / value_i)`` for
a lower one. It is at most 0 exactly when every target is met, so "all targets reached" is the single-objective
target 0 that the tuner and the baselines already count experiments to, and a search that gets one figure under
its bound by pushing another over it sees no progress. On the log, a figure twice its bound weighs the same
whichever metric it is, and a trial that blows the loss up by orders of magnitude does not flatten, for the GP,
every difference among the configurations near the bounds. Bounds and values are positive (a value at or below
``FLOOR`` times its bound counts as that). A history that reports only some of the metrics (a paper's ablation
reports its quality, not our cross-cabinet share) gives the violation of what it reports: RGPE only uses the
ranking of a task's experiments, and weighs a task by how well that ranking agrees with the target's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from debugtune.engine.tune.data import Objective
from debugtune.engine.tune.errors import TuneError

FLOOR = 1e-6
"""The smallest value-to-bound ratio the violation reads (a metric at 0 counts as a millionth of its bound)."""
VIOLATION = "target_violation"
"""The name of the scalar the tuner minimises for joint targets (target 0: every target met)."""
_TARGET = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(<=|>=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Target:
    """``metric <= bound`` (``upper``) or ``metric >= bound``."""

    metric: str
    bound: float
    upper: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.bound) and self.bound > 0):
            raise TuneError(f"target {self.metric}: the bound must be a positive number, got {self.bound!r}")

    def excess(self, value: float) -> float:
        """How far ``value`` is beyond the bound, as the log of their ratio (<= 0: met)."""
        ratio = max(value / self.bound, FLOOR)
        return math.log(ratio) if self.upper else -math.log(ratio)

    def __str__(self) -> str:
        return f"{self.metric}{'<=' if self.upper else '>='}{self.bound:g}"


@dataclass(frozen=True)
class Targets:
    """Several targets met together (see module doc)."""

    items: tuple[Target, ...]

    def __post_init__(self) -> None:
        if not self.items:
            raise TuneError("joint targets need at least one metric<=bound")
        names = [t.metric for t in self.items]
        if len(set(names)) != len(names):
            raise TuneError(f"joint targets name a metric twice: {', '.join(names)}")

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Targets:
        """``["expert_util_std<=15", "cross_cabinet_share<=0.15"]`` (or one comma-separated string each)."""
        items = []
        for text in texts:
            for part in filter(None, (p.strip() for p in text.split(","))):
                m = _TARGET.match(part)
                if not m:
                    raise TuneError(f"target {part!r}: expected metric<=bound or metric>=bound, e.g. "
                                    "cross_cabinet_share<=0.15")
                items.append(Target(m.group(1), float(m.group(3)), m.group(2) == "<="))
        return cls(tuple(items))

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(t.metric for t in self.items)

    @property
    def objective(self) -> Objective:
        return Objective(VIOLATION)

    def violation(self, values: Mapping[str, float], *, partial: bool = False) -> float | None:
        """The largest excess over the bounds (`Target.excess`); None when a metric is missing or not finite (with
        ``partial``: over the metrics present, None when none is)."""
        excess = []
        for t in self.items:
            v = values.get(t.metric)
            if v is None or not math.isfinite(float(v)):
                if partial:
                    continue
                return None
            excess.append(t.excess(float(v)))
        return max(excess) if excess else None

    def with_violation(self, values: Mapping[str, float], *, partial: bool = False) -> dict[str, float]:
        """``values`` plus the violation (left out when it cannot be told)."""
        out = {k: v for k, v in values.items() if k != VIOLATION}
        vio = self.violation(out, partial=partial)
        if vio is not None:
            out[VIOLATION] = vio
        return out

    def met(self, values: Mapping[str, float]) -> bool:
        vio = self.violation(values)
        return vio is not None and vio <= 0

    def as_dict(self) -> list[dict[str, object]]:
        return [{"metric": t.metric, "bound": t.bound, "sense": "<=" if t.upper else ">="} for t in self.items]

    def __str__(self) -> str:
        return ", ".join(map(str, self.items))


def diagnosis_targets(store: Any, symptoms: Iterable[str]) -> Targets:
    """The joint targets a fix of the diagnosed ``symptoms`` must meet: each threshold with a ``dt:targetMetric``
    that applies to one of them bounds that metric at its value, and the knowledge base's loss margin
    (``tune.loss_margin``) bounds ``loss_ratio`` at 1 + margin (the loss against the healthy reference)."""
    from debugtune.kg.namespaces import KB
    from debugtune.kg.sparql import iri

    wanted = sorted(set(symptoms))
    listed = ", ".join(iri(KB + s) for s in wanted) or "<urn:debugtune:none>"
    rows = store.select(f"""SELECT ?key ?metric ?value WHERE {{
        ?t a dt:Threshold ; dt:thresholdKey ?key ; dt:targetMetric ?metric ; dt:value ?value .
        OPTIONAL {{ ?t dt:appliesTo ?s }}
        FILTER (!BOUND(?s) || ?s IN ({listed}))
    }} ORDER BY ?key""").dicts()
    items = []
    for r in rows:
        margin = str(r["key"]).endswith("margin")
        items.append(Target(str(r["metric"]), 1.0 + float(r["value"]) if margin else float(r["value"])))
    if not items:
        named = ", ".join(wanted) or "no symptom"
        raise TuneError(f"no threshold of the knowledge base names a target metric for {named}")
    return Targets(tuple(items))
