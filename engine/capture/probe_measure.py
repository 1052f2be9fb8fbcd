"""The probe's two per-step measurements, each started in one call and finished later:

- gradient statistics: started in the optimizer's step pre-hook, they run on a native thread while
  ``optimizer.step()`` runs (which reads the gradients and writes only parameters and optimizer state)
  and are finished in the post-hook; the log2 histogram only on detail steps;
- parameter updates (detail steps only): the parameters are copied before the step; ``||after - before||``
  and ``||after||`` run on a native thread from the post-hook until the next pre-hook, before anything
  writes the parameters or the copies again.

CPU tensors in float32/16, bfloat16 or float64 go to the native kernel (one call per measurement); other
tensors (accelerator memory) are measured with torch operations in the start call. A background
measurement starts one native helper thread, so it takes a free core instead of competing with the
training's; finishing it takes over whatever chunks the helper has not started, so on a machine with no
free core the hook does the remaining work itself instead of waiting for the scheduler to run the helper.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from debugtune.engine.capture.probe_layout import ParamLayout, aggregate
from debugtune.engine.capture.torch_stats import torch_stats_many, torch_update_norms
from debugtune.engine.telemetry import TelemetryWriter
from debugtune.native import HIST_LABELS, STAT_FIELDS, Pending
from debugtune.native import copy_into as native_copy_into
from debugtune.native import tensor_stats_many as native_stats_many
from debugtune.native import tensor_stats_start as native_stats_start
from debugtune.native import update_norms_start as native_updates_start

GRADIENT_METRICS = ("grad_norm", "grad_absmax", "grad_zero_frac", "grad_tiny_frac", "grad_nan", "grad_inf")
_COL = {name: i for i, name in enumerate(STAT_FIELDS)}


def native_ok(t: Any) -> bool:
    """Whether the native kernel can read ``t`` in place."""
    import torch

    return t.device.type == "cpu" and t.layout == torch.strided and t.dtype in _native_dtypes(torch)


@cache
def _native_dtypes(torch: Any) -> frozenset[Any]:
    return frozenset((torch.float32, torch.float16, torch.bfloat16, torch.float64))


class StepRows:
    """Telemetry rows of one step gathered column-wise and handed to the writer in one call."""

    def __init__(self) -> None:
        self.dims: list[str] = []
        self.metrics: list[str] = []
        self.entities: list[str] = []
        self.values: list[np.ndarray] = []

    def add(self, dim: str, metric: str, entities: Sequence[str] | np.ndarray, values: Any) -> None:
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        n = len(vals)
        self.dims += [dim] * n
        self.metrics += [metric] * n
        self.entities += list(entities)
        self.values.append(vals)

    def write(self, writer: TelemetryWriter, step: int) -> None:
        if self.values:
            values = np.concatenate(self.values)
            writer.add_columns(np.full(len(values), step, dtype=np.int64), self.dims, self.metrics, self.entities,
                               values)


@dataclass
class _Split:
    """Rows of a measurement: the native part (pending) and the torch part (done)."""

    rows: np.ndarray
    native_rows: list[int]
    pending: Pending | _Done | None
    hist: np.ndarray | None = None

    def finish(self) -> tuple[np.ndarray, np.ndarray | None]:
        if self.pending is not None:
            got = self.pending.result()
            self.pending = None
            if not hasattr(got, "values"):
                self.rows[self.native_rows] = got
            elif len(self.native_rows) == len(self.rows):  # the usual case: everything on CPU
                self.rows, self.hist = got.values, got.hist
            else:
                self.rows[self.native_rows] = got.values
                if self.hist is not None:
                    self.hist[self.native_rows] = got.hist
        return self.rows, self.hist


def start_stats(tensors: list[Any], eps: float, large: float, hist: bool = False, background: bool = True) -> _Split:
    """Statistics rows of ``tensors`` in order (native part on a thread; ``finish()`` waits); the log2
    histogram only with ``hist``. ``background=False`` runs the native part in the call (for results needed at
    once: no thread to start)."""
    flags = [native_ok(t) for t in tensors]
    native = [i for i, ok in enumerate(flags) if ok]
    other = [i for i, ok in enumerate(flags) if not ok]
    rows = np.full((len(tensors), len(STAT_FIELDS)), np.nan)
    counts = np.zeros((len(tensors), len(HIST_LABELS)), dtype=np.int64) if hist else None
    if other:
        rows[other], got = torch_stats_many([tensors[i] for i in other], eps, large=large, hist=hist)
        if counts is not None and got is not None:
            counts[other] = got
    if not native:
        return _Split(rows, native, None, counts)
    start = native_stats_start if background else _Done.stats
    return _Split(rows, native, start([tensors[i] for i in native], eps, large=large, threads=1, hist=hist), counts)


class _Done:
    """A finished native computation with the interface of ``Pending``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value

    @classmethod
    def stats(cls, tensors: list[Any], eps: float, **kwargs: Any) -> _Done:
        return cls(native_stats_many(tensors, eps, **kwargs))


@dataclass
class GradJob:
    """Gradient statistics of one step in flight."""

    step: int
    positions: np.ndarray
    split: _Split
    skipped: bool = False


def start_grads(step: int, pending: dict[int, Any], eps: float | None, skip: Any, skipped: bool = False,
                hist: bool = False) -> GradJob | None:
    """Start the statistics of the gradients gathered by the hooks (position → gradient tensor)."""
    import torch

    kept, grads = [], []
    strided = torch.strided
    for p in sorted(pending):
        g = pending[p]
        if g.layout != strided or not g.is_floating_point():
            skip(f"gradient layout/dtype {g.layout}/{g.dtype}")
            continue
        kept.append(p)
        grads.append(g)
    if not grads:
        return None
    split = start_stats(grads, eps or 0.0, float("inf"), hist=hist)
    return GradJob(step, np.array(kept, dtype=np.int64), split, skipped)


_HIST_METRICS = np.array([f"grad_log2_hist:{label}" for label in HIST_LABELS], dtype=object)


def write_grads(job: GradJob, layout: ParamLayout, writer: TelemetryWriter, routers: list[Any],
                tiny: bool) -> float:
    """Wait for a gradient job and write its telemetry (one writer call); returns the global gradient norm."""
    values, hist = job.split.finish()
    pos, rows = job.positions, StepRows()
    metrics = [m for m in GRADIENT_METRICS if tiny or m != "grad_tiny_frac"]
    for group, names in ((layout.layer_of[pos], layout.layer_names), (layout.expert_of[pos], layout.expert_names)):
        if not len(names) or not (group >= 0).any():
            continue
        per = aggregate(values, group, len(names))
        present = per["numel"] > 0
        entities = names[present]
        for m in metrics:
            rows.add("gradient", m, entities, per[m][present])
    total = aggregate(values, np.zeros(len(pos), dtype=np.int64), 1)
    for m in metrics:
        rows.add("gradient", m, ("",), total[m])
    if hist is not None:
        counts = hist.sum(axis=0)
        nz = np.flatnonzero(counts)
        for k in nz:
            rows.add("gradient", _HIST_METRICS[k], ("",), counts[k])
    for r in routers:
        hit = np.isin(pos, r.params)
        if hit.any():
            rows.add("gradient", "router_grad_norm", (r.name,), np.sqrt(values[hit, _COL["sumsq"]].sum()))
    if job.skipped:
        rows.add("convergence", "skipped_iterations", ("",), 1.0)
    rows.write(writer, job.step)
    return float(total["grad_norm"][0])


@dataclass
class Snapshots:
    """Copies of the parameters the optimizer updates, taken before a step."""

    buffers: dict[int, Any] = field(default_factory=dict)
    step: int | None = None

    def take(self, layout: ParamLayout, step: int, positions: Sequence[int] | None = None) -> None:
        """Copy the parameters at ``positions`` (default: those the optimizer updates)."""
        import torch

        dst, src = [], []
        with torch.no_grad():
            for i in layout.optimized if positions is None else positions:
                p = layout.params[i].detach()
                buf = self.buffers.get(i)
                if buf is None or buf.shape != p.shape or buf.dtype != p.dtype or buf.device != p.device:
                    buf = self.buffers[i] = torch.empty_like(p, memory_format=torch.preserve_format)
                if p.device.type == "cpu" and p.layout == torch.strided:
                    dst.append(buf)
                    src.append(p)
                else:
                    buf.copy_(p)
        if src:
            native_copy_into(dst, src)  # one native call: no torch intra-op threads for a plain copy
        self.step = step


@dataclass
class UpdateJob:
    """Update and weight norms of one step in flight."""

    step: int
    positions: np.ndarray
    split: _Split


def start_updates(layout: ParamLayout, snaps: Snapshots, positions: Sequence[int] | None = None) -> UpdateJob:
    positions = [i for i in (layout.optimized if positions is None else positions) if i in snaps.buffers]
    after = [layout.params[i].detach() for i in positions]
    before = [snaps.buffers[i] for i in positions]
    native = [k for k, t in enumerate(after) if native_ok(t) and t.dtype == before[k].dtype]
    other = [k for k in range(len(after)) if k not in set(native)]
    norms = np.zeros((len(positions), 2))
    if other:
        norms[other] = torch_update_norms([after[k] for k in other], [before[k] for k in other])
    pending = (native_updates_start([after[k] for k in native], [before[k] for k in native], threads=1)
               if native else None)
    if snaps.step is None:
        raise ValueError("start_updates needs the snapshot of the step (Snapshots.take)")
    job = UpdateJob(snaps.step, np.array(positions, dtype=np.int64), _Split(norms, native, pending))
    snaps.step = None
    return job


_WHOLE = np.array([""], dtype=object)


def write_updates(job: UpdateJob, layout: ParamLayout, writer: TelemetryWriter,
                  layers: np.ndarray | None = None) -> None:
    """Wait for an update job and write update_norm, weight_norm and update_ratio per layer, expert and '';
    with ``layers`` (layer ids), per those layers only."""
    norms, _ = job.split.finish()
    pos, rows = job.positions, StepRows()
    groups = ((layout.layer_of[pos], layout.layer_names), (layout.expert_of[pos], layout.expert_names),
              (np.zeros(len(pos), dtype=np.int64), _WHOLE))
    for group, names in groups if layers is None else groups[:1]:
        keep = group >= 0 if layers is None else np.isin(group, layers)
        if not keep.any():
            continue
        g = group[keep]
        upd = np.sqrt(np.bincount(g, weights=norms[keep, 0] ** 2, minlength=len(names)))
        wgt = np.sqrt(np.bincount(g, weights=norms[keep, 1] ** 2, minlength=len(names)))
        used = np.bincount(g, minlength=len(names)) > 0
        entities = names[used]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(wgt > 0, upd / wgt, np.nan)
        rows.add("gradient", "update_norm", entities, upd[used])
        rows.add("gradient", "weight_norm", entities, wgt[used])
        rows.add("gradient", "update_ratio", entities, ratio[used])
    rows.write(writer, job.step)
