"""Fused tensor statistics (the C++ kernel in ``native/src/stats*.cpp``), typed.

One read of every element gives numel, sum, sum of squares (→ L2 norm), abs-max, min, max, zeros,
tiny (|x| < eps), large (|x| >= large), NaN and Inf counts and, unless ``hist=False``, a log2
magnitude histogram (the one part that cannot run at memory speed: leave it out when it is not
needed). Sums are
accumulated in float64; NaN and ±Inf are counted but left out of sum, sum of squares, min, max and
abs-max. Inputs are float32, float16, bfloat16 or float64 CPU arrays of any layout (numpy arrays, CPU
torch tensors, anything with ``__dlpack__`` or the buffer protocol); they are read in place, never
copied. ``eps`` and ``large`` are compared in float32 for 16/32-bit inputs.

Histogram bins (``HIST_LABELS``): ``zero`` (±0), ``under`` (0 < |x| < 2^HIST_LO, subnormals of
float32 included), one bin per exponent e in [HIST_LO, HIST_HI] holding 2^e <= |x| < 2^(e+1),
``over`` (finite |x| >= 2^(HIST_HI+1)) and ``inf``. NaN is never binned, so the bins sum to
numel - nan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast, overload

import numpy as np

from debugtune.native import _native

STAT_FIELDS: tuple[str, ...] = tuple(_native.STAT_FIELDS)
HIST_LO: int = _native.HIST_LO
HIST_HI: int = _native.HIST_HI
HIST_BINS: int = _native.HIST_BINS
HIST_LABELS: tuple[str, ...] = ("zero", "under", *(str(e) for e in range(HIST_LO, HIST_HI + 1)), "over", "inf")
_COUNTS = frozenset({"numel", "zeros", "tiny", "large", "nan", "inf"})
_REINTERPRET = {None: 0, "float16": 1, "bfloat16": 2}

Reinterpret = Literal["float16", "bfloat16"] | None


@dataclass(frozen=True)
class TensorStats:
    """Statistics of one tensor (counts as int, the rest as float; min/max/absmax are NaN without finite values;
    ``hist`` is None when it was not computed)."""

    numel: int
    sum: float
    sumsq: float
    norm: float
    absmax: float
    min: float
    max: float
    zeros: int
    tiny: int
    large: int
    nan: int
    inf: int
    hist: np.ndarray | None

    @property
    def zero_frac(self) -> float:
        return self.zeros / self.numel if self.numel else 0.0

    @property
    def tiny_frac(self) -> float:
        return self.tiny / self.numel if self.numel else 0.0


class StatsBatch:
    """Statistics of many tensors: ``values[i, STAT_FIELDS.index(f)]``, ``hist[i, bin]``, ``batch["norm"]`` a column."""

    def __init__(self, values: np.ndarray, hist: np.ndarray | None) -> None:
        self.values = values
        self.hist = hist

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, key: int) -> TensorStats: ...

    @overload
    def __getitem__(self, key: str) -> np.ndarray: ...

    def __getitem__(self, key: int | str) -> TensorStats | np.ndarray:
        if isinstance(key, str):
            return self.values[:, STAT_FIELDS.index(key)]
        row = self.values[key]
        fields: dict[str, Any] = {f: (int(v) if f in _COUNTS else float(v))
                                  for f, v in zip(STAT_FIELDS, row, strict=True)}
        return TensorStats(**fields, hist=None if self.hist is None else self.hist[key])


def _as_array(x: Any) -> tuple[Any, int | None]:
    """The object nanobind reads in place, and the reinterpretation a numpy bfloat16 (ml_dtypes) array needs."""
    if hasattr(x, "requires_grad") and hasattr(x, "detach"):  # torch.Tensor: DLPack refuses tensors needing grad
        if x.device.type != "cpu":
            raise ValueError(f"tensor on device {x.device}: the native kernel reads CPU memory only")
        return (x.detach() if x.requires_grad else x), None
    if isinstance(x, np.ndarray) and x.dtype.name == "bfloat16":
        return x.view(np.uint16), _REINTERPRET["bfloat16"]
    return x, None


def _arrays(tensors: Sequence[Any], reinterpret: Reinterpret) -> tuple[list[Any], int]:
    code = _REINTERPRET[reinterpret]
    arrays = []
    for x in tensors:
        arr, forced = _as_array(x)
        if forced is not None:
            if code not in (0, forced):
                raise ValueError("a bfloat16 numpy array cannot share a call with reinterpret='float16'")
            code = forced
        arrays.append(arr)
    return arrays, code


def tensor_stats_many(tensors: Sequence[Any], eps: float, *, large: float = math.inf, threads: int = 0,
                      reinterpret: Reinterpret = None, hist: bool = True) -> StatsBatch:
    """Statistics of every tensor in one call into C++ (GIL released; large inputs are split across threads).

    ``eps``: |x| < eps counts as tiny (zeros included). ``large``: |x| >= large counts as large (finite only).
    ``threads``: 0 = automatic. ``reinterpret``: how uint16/int16 arrays are read ("bfloat16" or "float16").
    ``hist``: False leaves the histogram out (``StatsBatch.hist`` is None); every other field is the same.
    The result does not depend on the number of threads (fixed chunking and merge order).
    """
    arrays, code = _arrays(tensors, reinterpret)
    values, h = cast("tuple[np.ndarray, np.ndarray | None]",  # the extension's documented return
                     _native.tensor_stats_many(arrays, float(eps), float(large), int(threads), code, bool(hist)))
    return StatsBatch(values, h)


class Pending:
    """A native computation running on background helper threads (idle priority); ``result()`` (GIL released)
    does the chunks no helper has started and waits for the others."""

    def __init__(self, job: Any, wrap: Any) -> None:
        self._job = job
        self._wrap = wrap

    @property
    def done(self) -> bool:
        return bool(self._job.done)

    def result(self) -> Any:
        """The result (once); re-raises what the computation raised."""
        return self._wrap(self._job.result())


def tensor_stats_start(tensors: Sequence[Any], eps: float, *, large: float = math.inf, threads: int = 0,
                       reinterpret: Reinterpret = None, hist: bool = True) -> Pending:
    """``tensor_stats_many`` on background native threads; ``.result()`` gives the ``StatsBatch``.

    The caller must not write the tensors before ``result()`` returns (reads would race with the writes).
    """
    arrays, code = _arrays(tensors, reinterpret)
    return Pending(_native.tensor_stats_start(arrays, float(eps), float(large), int(threads), code, bool(hist)),
                   lambda r: StatsBatch(*r))


def tensor_stats(x: Any, eps: float, *, large: float = math.inf, threads: int = 0,
                 reinterpret: Reinterpret = None, hist: bool = True) -> TensorStats:
    """Statistics of one tensor (see ``tensor_stats_many``)."""
    return tensor_stats_many([x], eps, large=large, threads=threads, reinterpret=reinterpret, hist=hist)[0]


def copy_into(dst: Sequence[Any], src: Sequence[Any]) -> None:
    """Copy each CPU tensor of ``src`` into the preallocated tensor of ``dst`` with the same shape and dtype
    (one native thread, GIL released; identical dense layouts are a single memcpy)."""
    _native.copy_into([_as_array(d)[0] for d in dst], [_as_array(s)[0] for s in src])


def update_norms(after: Sequence[Any], before: Sequence[Any], *, threads: int = 0) -> np.ndarray:
    """``[[||after_i - before_i||, ||after_i||], ...]`` as float64[n, 2], one read of each tensor, in float64."""
    return cast(np.ndarray, _native.update_norms([_as_array(x)[0] for x in after],  # float64[n, 2], as documented
                                                 [_as_array(x)[0] for x in before], int(threads)))


def update_norms_start(after: Sequence[Any], before: Sequence[Any], *, threads: int = 0) -> Pending:
    """``update_norms`` on background native threads; the tensors must not be written before ``result()``."""
    return Pending(_native.update_norms_start([_as_array(x)[0] for x in after], [_as_array(x)[0] for x in before],
                                              int(threads)), lambda r: r)
