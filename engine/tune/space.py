"""The search space of a remedy's tuning parameters, encoded for the GP and mapped back.

Every numeric parameter is encoded in [0, 1] (a log-scale one on the log of its value, so the GP and
the acquisition optimiser work in log space); a numeric parameter with ``choices`` (a grid of allowed
values) and a small integer range become emukit ``DiscreteParameter``s over those encoded positions;
a categorical parameter is one-hot encoded (emukit ``CategoricalParameter``). ``decode`` snaps any
point to a valid configuration, and ``round`` = ``encode(decode(x))`` is what the loop records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from emukit.core import CategoricalParameter, ContinuousParameter, DiscreteParameter, OneHotEncoding, ParameterSpace

from debugtune.engine.tune.errors import SearchSpaceError
from debugtune.kg.records import TuningParameter

KINDS = ("continuous", "integer", "categorical")
SCALES = ("linear", "log")
MAX_DISCRETE_INTEGERS = 256
"""Integer ranges up to this many values are searched as a discrete grid; wider ones are rounded."""


@dataclass(frozen=True)
class _Dim:
    """One parameter with its encoded columns and, for grids, the allowed values and their positions."""

    param: TuningParameter
    start: int
    width: int
    values: tuple[Any, ...] = ()
    positions: tuple[float, ...] = ()


class SearchSpace:
    """Tuning parameters ↔ points of an emukit ``ParameterSpace`` (see the module doc)."""

    def __init__(self, parameters: Sequence[TuningParameter]):
        if not parameters:
            raise SearchSpaceError("the remedy has no tuning parameters: nothing to tune")
        seen: set[str] = set()
        dims: list[_Dim] = []
        start = 0
        for p in parameters:
            _check(p)
            if p.name in seen:
                raise SearchSpaceError(f"tuning parameter {p.name!r} is declared twice")
            seen.add(p.name)
            dim = self._dimension(p, start)
            dims.append(dim)
            start += dim.width
        self._dims = tuple(dims)
        self.dim = start
        self.emukit = ParameterSpace([self._emukit_parameter(d) for d in dims])

    # -- construction --------------------------------------------------------------------------------
    def _dimension(self, p: TuningParameter, start: int) -> _Dim:
        if p.kind == "categorical":
            return _Dim(p, start, len(p.choices), tuple(p.choices))
        lo, hi = _bounds(p)
        if p.choices:
            values = tuple(sorted({_number(p, c, "choices") for c in p.choices}))
        elif p.kind == "integer" and hi - lo + 1 <= MAX_DISCRETE_INTEGERS:
            values = tuple(range(int(lo), int(hi) + 1))
        else:
            return _Dim(p, start, 1)
        return _Dim(p, start, 1, values, tuple(_unit(p, lo, hi, v) for v in values))

    @staticmethod
    def _emukit_parameter(d: _Dim):
        name = d.param.name
        if d.param.kind == "categorical":
            return CategoricalParameter(name, OneHotEncoding(list(d.values)))
        if d.positions:
            return DiscreteParameter(name, list(d.positions))
        return ContinuousParameter(name, 0.0, 1.0)

    # -- what it holds -------------------------------------------------------------------------------
    @property
    def parameters(self) -> tuple[TuningParameter, ...]:
        return tuple(d.param for d in self._dims)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.param.name for d in self._dims)

    @property
    def is_finite(self) -> bool:
        """True when every parameter has a finite set of values (a grid or categories)."""
        return all(d.values for d in self._dims)

    def all_moved(self, configs: Sequence[Mapping[str, Any]]) -> bool:
        """Whether ``configs`` hold at least two points and every parameter that can take more than one value
        takes two among them (compared encoded: 2 and 2.0 are one value; a one-value grid cannot move)."""
        X = np.round(self.encode_many(configs), 12)
        return len(np.unique(X, axis=0)) > 1 and all(
            len(np.unique(X[:, d.start:d.start + d.width], axis=0)) > 1
            for d in self._dims if not d.values or len(d.values) > 1)

    def defaults(self) -> dict[str, Any]:
        """The parameters' default values (snapped into the space)."""
        return self.decode(self.encode({d.param.name: d.param.default for d in self._dims}))

    # -- encode / decode -----------------------------------------------------------------------------
    def encode(self, params: Mapping[str, Any]) -> np.ndarray:
        """A configuration as a point (1-D); a value outside the space raises SearchSpaceError."""
        x = np.zeros(self.dim)
        for d in self._dims:
            p = d.param
            if p.name not in params:
                raise SearchSpaceError(f"configuration has no value for tuning parameter {p.name!r}")
            value = params[p.name]
            if p.kind == "categorical":
                if str(value) not in d.values:
                    raise SearchSpaceError(f"{p.name}={value!r} is not one of {list(d.values)}")
                x[d.start + d.values.index(str(value))] = 1.0
                continue
            lo, hi = _bounds(p)
            v = _number(p, value, "value")
            if not lo - 1e-9 * abs(hi - lo) <= v <= hi + 1e-9 * abs(hi - lo):
                raise SearchSpaceError(f"{p.name}={value!r} is outside [{lo:g}, {hi:g}]")
            x[d.start] = min(max(_unit(p, lo, hi, v), 0.0), 1.0)
        return x

    def encode_many(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        return np.array([self.encode(c) for c in configs]).reshape(len(configs), self.dim)

    def contains(self, params: Mapping[str, Any]) -> bool:
        """Whether ``encode(params)`` would succeed."""
        try:
            self.encode(params)
        except SearchSpaceError:
            return False
        return True

    def decode(self, x: np.ndarray) -> dict[str, Any]:
        """The valid configuration nearest to point ``x`` (grid values and integers snapped)."""
        x = np.asarray(x, dtype=float).reshape(-1)
        if x.shape[0] != self.dim:
            raise SearchSpaceError(f"point has {x.shape[0]} coordinates, the space has {self.dim}")
        out: dict[str, Any] = {}
        for d in self._dims:
            p, cols = d.param, x[d.start:d.start + d.width]
            if p.kind == "categorical":
                out[p.name] = d.values[int(np.argmax(cols))]
            elif d.positions:
                out[p.name] = d.values[int(np.argmin(np.abs(np.array(d.positions) - cols[0])))]
            else:
                lo, hi = _bounds(p)
                v = _from_unit(p, lo, hi, float(np.clip(cols[0], 0.0, 1.0)))
                out[p.name] = int(min(max(round(v), math.ceil(lo)), math.floor(hi))) if p.kind == "integer" else v
        return out

    def round(self, X: np.ndarray) -> np.ndarray:
        """Each row snapped to the encoding of a valid configuration."""
        X = np.atleast_2d(X)
        return np.array([self.encode(self.decode(row)) for row in X]).reshape(len(X), self.dim)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` points uniform in the encoded space (so log-uniform on a log scale), snapped."""
        X = np.zeros((n, self.dim))
        for d in self._dims:
            if d.param.kind == "categorical":
                X[np.arange(n), d.start + rng.integers(len(d.values), size=n)] = 1.0
            elif d.positions:
                X[:, d.start] = np.array(d.positions)[rng.integers(len(d.positions), size=n)]
            else:
                X[:, d.start] = rng.uniform(0.0, 1.0, size=n)
        return self.round(X)


def _check(p: TuningParameter) -> None:
    where = f"tuning parameter {p.name!r}"
    if not isinstance(p.name, str) or not p.name.isidentifier():
        raise SearchSpaceError(f"{where}: name must be an identifier (it is used in trial templates)")
    if p.kind not in KINDS:
        raise SearchSpaceError(f"{where}: kind {p.kind!r} is not one of {KINDS}")
    if p.scale not in SCALES:
        raise SearchSpaceError(f"{where}: scale {p.scale!r} is not one of {SCALES}")
    if p.kind == "categorical":
        if not p.choices:
            raise SearchSpaceError(f"{where}: a categorical parameter needs choices")
        if len(set(p.choices)) != len(p.choices):
            raise SearchSpaceError(f"{where}: choices repeat a value")
        return
    lo, hi = _bounds(p)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise SearchSpaceError(f"{where}: range [{lo}, {hi}] is empty or not finite")
    if p.scale == "log" and lo <= 0:
        raise SearchSpaceError(f"{where}: a log-scale range must be positive, got low={lo}")
    if p.kind == "integer" and math.floor(hi) < math.ceil(lo):
        raise SearchSpaceError(f"{where}: no integer in [{lo}, {hi}]")


def _bounds(p: TuningParameter) -> tuple[float, float]:
    if p.choices:
        values = [_number(p, c, "choices") for c in p.choices]
        lo, hi = min(values), max(values)
        if lo == hi:
            hi = lo + 1.0  # a one-value grid: any unit interval works
        return lo, hi
    if p.low is None or p.high is None:
        raise SearchSpaceError(f"tuning parameter {p.name!r}: a numeric parameter needs low and high (or choices)")
    return float(p.low), float(p.high)


def _number(p: TuningParameter, value: Any, field: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SearchSpaceError(f"tuning parameter {p.name!r}: {field} {value!r} is not a number") from None
    if not math.isfinite(v):
        raise SearchSpaceError(f"tuning parameter {p.name!r}: {field} {value!r} is not finite")
    if p.kind == "integer" and v != int(v):
        raise SearchSpaceError(f"tuning parameter {p.name!r}: {field} {value!r} is not an integer")
    return int(v) if p.kind == "integer" else v


def _unit(p: TuningParameter, lo: float, hi: float, v: float) -> float:
    if p.scale == "log":
        return (math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if v > 0 else -1.0
    return (v - lo) / (hi - lo)


def _from_unit(p: TuningParameter, lo: float, hi: float, u: float) -> float:
    if p.scale == "log":
        return float(math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))))
    return float(lo + u * (hi - lo))
