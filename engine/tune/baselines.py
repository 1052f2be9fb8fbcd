"""The "manual" baselines a tuning is compared with: the grids a person would try, one parameter at a time.

* `remedy_grid`: the remedy's own parameters, each over its documented range (the knowledge base's
  ``dt:minValue`` … ``dt:maxValue``, evenly spaced, on the log of the value for a log-scale parameter; a
  categorical one over its choices), from the low end up, the other parameters at their defaults.
  ``order="outward"`` is the other order a person defends: the documented default (``dt:defaultValue``)
  first, then the grid's values nearest to it first (on the log for a log-scale parameter); the issue's
  words ("one parameter at a time over the remedy's documented range") fix the values, not the order.
* `symptom_grid`: what a person does who sees the symptoms but not the cause — the parameters of every
  remedy the knowledge base gives for a cause that can produce one of the run's symptoms, that the trial can
  set, one at a time over their documented ranges, in an order they pick (seeded shuffle: no order is
  privileged).

`experiments_to_target` walks a grid with a trial and counts experiments until the first objective first
reaches the target, as `TuningResult.experiments_to_target` counts them for the tuner.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from debugtune.engine.suggest import remedy_details, run_signature
from debugtune.engine.tune.data import Objective
from debugtune.kg.namespaces import KB, local_name
from debugtune.kg.records import TuningParameter
from debugtune.kg.sparql import iri
from debugtune.kg.store import Store

GRID_POINTS = 5
"""Values per parameter: both ends of the documented range and three between them."""


ORDERS = ("low", "outward")
"""`grid_values` orders: low end first; the documented default first, then outward from it."""


def grid_values(p: TuningParameter, points: int = GRID_POINTS, order: str = "low") -> list[Any]:
    """The values a person tries for one parameter, low end first or outward from the default (module doc)."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: expected one of {', '.join(ORDERS)}")
    values: list[Any]
    if p.kind == "categorical":
        values = list(p.choices)
    elif p.low is None or p.high is None:
        return [p.default]
    else:
        lo, hi = float(p.low), float(p.high)
        log = p.scale == "log" and lo > 0
        raw = [math.exp(x) for x in np.linspace(math.log(lo), math.log(hi), points)] if log else \
            list(np.linspace(lo, hi, points))
        values = sorted({int(round(v)) for v in raw}) if p.kind == "integer" else [float(f"{v:.6g}") for v in raw]
    if order == "low" or p.default is None:
        return values
    if p.kind == "categorical":
        return [p.default, *(v for v in values if v != p.default)]

    def distance(v: Any) -> float:
        a, b = float(v), float(p.default)
        return abs(math.log(a) - math.log(b)) if p.scale == "log" and a > 0 and b > 0 else abs(a - b)

    return [p.default, *sorted((v for v in values if v != p.default), key=distance)]


def remedy_grid(parameters: Sequence[TuningParameter], points: int = GRID_POINTS,
                order: str = "low") -> list[dict[str, Any]]:
    """One parameter at a time over its range, the others at their defaults, in the remedy's parameter order."""
    defaults = {p.name: p.default for p in parameters}
    out = []
    for p in parameters:
        for v in grid_values(p, points, order):
            config = {**defaults, p.name: v}
            if config not in out:
                out.append(config)
    return out


def symptom_parameters(store: Store, run_id: str, settable: Iterable[str]) -> list[TuningParameter]:
    """Parameters (one per name, the first remedy's definition) of the remedies for every cause linked to one of
    the run's symptoms, that the trial can set; sorted by name (shuffle them for a person's order)."""
    symptoms = sorted({item.symptom for item in run_signature(store, run_id)})
    if not symptoms:
        return []
    values = " ".join(iri(KB + s) for s in symptoms)
    rows = store.select(f"""SELECT DISTINCT ?remedy WHERE {{ VALUES ?symptom {{ {values} }}
        ?link a dt:CausalLink ; dt:from ?cause ; dt:to ?symptom . ?cause a dt:Cause .
        ?remedy a dt:Remedy ; dt:addresses ?cause ; dt:tuningParameter ?p }} ORDER BY ?remedy""").column("remedy")
    can = set(settable)
    found: dict[str, TuningParameter] = {}
    for remedy in rows:
        for p in remedy_details(store, local_name(remedy)).parameters:
            if p.name in can:
                found.setdefault(p.name, p)
    return [found[k] for k in sorted(found)]


def symptom_grid(parameters: Sequence[TuningParameter], seed: int, points: int = GRID_POINTS) -> list[dict[str, Any]]:
    """The parameters in a seeded random order, each over its range on its own (the run's other settings
    unchanged)."""
    order = list(parameters)
    np.random.default_rng(seed).shuffle(order)
    return [{p.name: v} for p in order for v in grid_values(p, points)]


@dataclass(frozen=True)
class GridResult:
    """How many experiments a grid needed to reach the target (None: never), and what each returned."""

    experiments: int | None
    tried: tuple[tuple[dict[str, Any], dict[str, float]], ...]
    cost: float

    def as_dict(self) -> dict[str, Any]:
        return {"experiments": self.experiments, "tried": len(self.tried), "cost_card_hours": self.cost}


def experiments_to_target(trial: Callable[[Mapping[str, Any]], Mapping[str, float]], grid: Sequence[Mapping[str, Any]],
                          objective: Objective, target: float) -> GridResult:
    """Run ``trial`` over ``grid`` until ``objective`` reaches ``target`` (``cost`` summed as the trials report it)."""
    tried: list[tuple[dict[str, Any], dict[str, float]]] = []
    cost = 0.0
    for n, config in enumerate(grid, start=1):
        values = dict(trial(dict(config)))
        cost += float(values.pop("cost", 0.0))
        tried.append((dict(config), values))
        value = values.get(objective.name)
        if value is not None and math.isfinite(value) and objective.better(value, target):
            return GridResult(n, tuple(tried), cost)
    return GridResult(None, tuple(tried), cost)


def coordinate_search(trial: Callable[[Mapping[str, Any]], Mapping[str, float]],
                      parameters: Sequence[TuningParameter], objective: Objective, target: float, *,
                      start: Mapping[str, Any] | None = None, cap: int | None = None,
                      points: int = GRID_POINTS) -> GridResult:
    """The manual procedure: one knob at a time over its documented values (`grid_values`, low end first), in
    the order given (the knowledge base's ranking), keeping the best value of each knob before moving to the
    next; counts experiments until ``objective`` reaches ``target`` (``cap``: give up after that many)."""
    current = {p.name: p.default for p in parameters} | dict(start or {})
    tried: list[tuple[dict[str, Any], dict[str, float]]] = []
    cost = 0.0
    best_value = math.inf
    for p in parameters:
        best_here = current[p.name]
        for v in grid_values(p, points):
            config = {**current, p.name: v}
            if any(config == c for c, _ in tried):
                continue
            values = dict(trial(dict(config)))
            cost += float(values.pop("cost", 0.0))
            tried.append((config, values))
            value = values.get(objective.name)
            if value is not None and math.isfinite(value):
                if objective.better(value, target):
                    return GridResult(len(tried), tuple(tried), cost)
                if objective.sign * value < best_value:
                    best_value, best_here = objective.sign * value, v
            if cap is not None and len(tried) >= cap:
                return GridResult(None, tuple(tried), cost)
        current[p.name] = best_here
    return GridResult(None, tuple(tried), cost)


def single_remedy_grid(parameters: Sequence[TuningParameter], points: int = GRID_POINTS) -> list[dict[str, Any]]:
    """Every combination of one remedy's parameters over their documented values (`grid_values`): what "any
    experiment drawn from that remedy's range" means for the needs-a-search check."""
    grids = [[(p.name, v) for v in grid_values(p, points)] for p in parameters]
    return [dict(combo) for combo in itertools.product(*grids)]


@dataclass(frozen=True)
class OneShot:
    """An experiment of a single remedy that met every target alone (the scenario does not need a search)."""

    remedy: str
    params: dict[str, Any]
    values: dict[str, float]


def needs_search(trial: Callable[[Mapping[str, Any]], Mapping[str, float]],
                 remedies: Mapping[str, Sequence[TuningParameter]], met: Callable[[Mapping[str, float]], bool],
                 points: int = GRID_POINTS) -> tuple[int, list[OneShot]]:
    """Run each remedy alone over its whole documented grid (`single_remedy_grid`; the run's other settings
    unchanged) and return the experiments run and those that met every target (``met``): an empty list is a
    scenario that needs a search."""
    found, n = [], 0
    for remedy, params in remedies.items():
        for config in single_remedy_grid(params, points):
            values = dict(trial(dict(config)))
            n += 1
            if met(values):
                found.append(OneShot(remedy, dict(config), values))
    return n, found


def tpe_search(space: Any, objective: Callable[[dict[str, Any]], float], *, seed: int, cap: int,
               target: float) -> int | None:
    """Optuna's TPE sampler (the ``bench`` extra) minimising ``objective`` over ``space`` (a `SearchSpace`): the
    experiments until it first reaches ``target`` (None: not within ``cap``). A parameter with a grid of allowed
    values is searched over that grid; a non-finite value counts as the worst."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    for n in range(1, cap + 1):
        trial = study.ask()
        params: dict[str, Any] = {}
        for p in space.parameters:
            if p.kind == "categorical":
                params[p.name] = trial.suggest_categorical(p.name, list(p.choices))
            elif p.choices:
                values = sorted({float(c) if p.kind == "continuous" else int(float(c)) for c in p.choices})
                params[p.name] = trial.suggest_categorical(p.name, values)
            elif p.kind == "integer":
                params[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.scale == "log")
            else:
                params[p.name] = trial.suggest_float(p.name, p.low, p.high, log=p.scale == "log")
        value = objective(params)
        study.tell(trial, value if math.isfinite(value) else 1e300)
        if math.isfinite(value) and value <= target:
            return n
    return None
