"""The live probe: ``attach(model, optimizer, run_dir)`` records telemetry from inside a PyTorch training loop.

What it records (long-form telemetry, see docs/probe.md):

- gradient flow per layer, per MoE expert and for the whole model ("" entity), on every recorded step:
  ``grad_norm``, ``grad_absmax``, ``grad_zero_frac``, ``grad_tiny_frac``, ``grad_nan``, ``grad_inf``;
  ``router_grad_norm`` of watched routers; ``act_zero_frac`` / ``act_sat_frac`` per bounded activation module
  (Sigmoid, Tanh, …: saturation is their failure) by default, per activation module with ``activations=True``,
  and a bounded one's mean slope ``act_slope`` on detail steps;
- on detail steps only (every ``detail_every``-th recorded step: the knowledge base's cadence
  ``probe.detail_every``, after Cockpit's cheap-every-step / expensive-on-a-schedule split): the global
  log2 magnitude histogram ``grad_log2_hist:<bin>`` and per layer ``weight_norm``, ``update_norm`` and
  ``update_ratio`` (these need a parameter snapshot and a second pass);
- convergence: whatever ``probe.log`` is given (loss, lr, ...); ``lr`` from the optimizer's parameter groups
  when the loop logs none; ``expert_tokens`` of watched routers,
  live alarms ``<series>_alarm_<kind>`` of the streaming detectors on loss and gradient norm;
- communication: ``step_time_ms``, and with torch.distributed initialised ``collective_ms``,
  ``collective_bytes``, ``collective_count`` per kind, ``comm_ms``, ``alltoall_bytes``;
- hardware: the native sampler's host and device counters.

Guarantees: hooks never raise into the training loop (errors are counted by kind and reported in
run.json) and never change numerics (no in-place writes to parameters or gradients, no dtype casts of
live tensors, no random numbers).

Steps: the probe's step is the number of completed ``optimizer.step()`` calls when the iteration began
(a forward of the model or its first gradient). ``log`` calls before or after ``optimizer.step()`` in the
same iteration land on the same step.
"""

from __future__ import annotations

import atexit
import math
import os
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from debugtune.engine.capture.frozen_init import KEYS as FROZEN_INIT_KEYS
from debugtune.engine.capture.frozen_init import frozen_init, normal_stds
from debugtune.engine.capture.hooks_activations import ActivationStats, activation_modules
from debugtune.engine.capture.hooks_comm import CollectiveTimer
from debugtune.engine.capture.hooks_router import RouterWatch
from debugtune.engine.capture.probe_errors import ProbeErrors
from debugtune.engine.capture.probe_evidence import Evidence
from debugtune.engine.capture.probe_layout import ParamLayout
from debugtune.engine.capture.probe_measure import (
    GradJob,
    Snapshots,
    UpdateJob,
    start_grads,
    start_stats,
    start_updates,
    write_grads,
    write_updates,
)
from debugtune.engine.telemetry import TelemetryWriter, dimension_of, environment_snapshot, write_run_json
from debugtune.engine.telemetry.aliases import canonical
from debugtune.kg.knowledge import Thresholds
from debugtune.native import STAT_FIELDS, DetectorParams, HardwareSampler, StreamDetectors

TINY_EPS_KEY = "probe.grad_tiny_eps"
SAT_PREACT_KEY = "probe.act_sat_preact"
DETAIL_EVERY_KEY = "probe.detail_every"
SAMPLE_INTERVAL_KEY = "hardware.sample_interval_s"
_COL = {name: i for i, name in enumerate(STAT_FIELDS)}


def knowledge_thresholds() -> Thresholds:
    """Every threshold of the shipped knowledge base (loaded into an in-memory store)."""
    from debugtune.kg.knowledge import load_knowledge, thresholds
    from debugtune.kg.open import open_store

    store = open_store(None)
    load_knowledge(store)
    return thresholds(store)


class Probe:
    """A probe attached to one model and optimizer; see the module docstring and ``attach``."""

    def __init__(self, model: Any, optimizer: Any, run_dir: str | Path, *, run_id: str | None = None,
                 rank: int | None = None, every: int = 1, detail_every: int | None = None,
                 activations: bool | None = None, hardware: bool = True,
                 thresholds: Mapping[str, float] | None = None, updates: bool = True,
                 detectors: bool = True, hardware_interval: float | None = None, flush_rows: int = 65536,
                 flush_seconds: float = 5.0) -> None:
        import torch

        self._torch = torch
        self.run_dir = Path(run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the writer warns and keeps the telemetry in memory (docs/probe.md, "Flushing")
        self.run_id = run_id or self.run_dir.name
        dist = torch.distributed
        self._dist_on = dist.is_available() and dist.is_initialized()
        env_rank = os.environ.get("RANK", 0)
        self.rank = int(rank if rank is not None else (dist.get_rank() if self._dist_on else env_rank))
        self.world_size = dist.get_world_size() if self._dist_on else int(os.environ.get("WORLD_SIZE", 1))
        self.every = max(1, int(every))
        self.updates = updates
        self.errors = ProbeErrors()
        self.disabled: dict[str, str] = {}
        self.alarms: list[tuple[int, str, tuple[str, ...]]] = []
        self.meta: dict[str, Any] = {}
        self.closed = False
        # by rows or every flush_seconds; a failing disk drops with a counted error, never raises into training
        self.writer = TelemetryWriter(self.run_dir, self.run_id, rank=self.rank, flush_rows=flush_rows,
                                      flush_seconds=flush_seconds, on_error="drop")

        th = Thresholds(thresholds) if thresholds is not None else self._load_thresholds()
        self.detail_every, self.detail_from = self._cadence(detail_every, th)
        self.tiny_eps = th.get(TINY_EPS_KEY)
        if self.tiny_eps is None:
            self.disabled["grad_tiny_frac"] = f"no threshold {TINY_EPS_KEY!r}"
        self.detectors = self._make_detectors(th) if detectors else None

        self._model = model
        self.layout = ParamLayout(model, optimizer)
        self._frozen_init = self._test_frozen(th)
        self._completed = 0  # optimizer steps done
        self._logs_lr = False  # the loop logs its own learning rate (the probe then records none)
        self._step = 0  # the step (iteration) in progress
        self._pending: dict[int, Any] = {}  # position → gradient tensor of this step
        self._snapshots = Snapshots()
        self._grad_job: GradJob | None = None
        self._update_job: UpdateJob | None = None
        self._last_post: float | None = None
        self._last_drain = time.monotonic()
        self._routers: list[RouterWatch] = []
        self._acts: list[ActivationStats] = []
        self._handles: list[Any] = []
        self._log_names: dict[str, str] = {}  # key given to log → metric written

        self._comm = CollectiveTimer(self.errors) if self._dist_on else None
        self.sampler: HardwareSampler | None = None
        try:
            for i in self.layout.trainable:
                hook = partial(self._on_grad, i)
                self._handles.append(self.layout.params[i].register_post_accumulate_grad_hook(hook))
            self._handles.append(optimizer.register_step_pre_hook(self._before_step))
            self._handles.append(optimizer.register_step_post_hook(self._after_step))
            self._handles.append(model.register_forward_pre_hook(self._on_forward))
            self._evidence = Evidence(model, self.layout, self.writer, self.errors, self.disabled, th, self._clock,
                                      updates)
            self._evidence.install(self._handles)
            if activations is not False:
                self._watch_activations(model, th.get(SAT_PREACT_KEY), bounded_only=activations is None)
            if self._comm is not None:
                self._comm.install()
        except BaseException:  # attach fails whole: no hook is left behind
            self._detach()
            raise
        if hardware_interval is None:  # the knowledge base's cadence; a caller's table without it: the sampler's
            hardware_interval = th.get(SAMPLE_INTERVAL_KEY)
            if hardware_interval is None:
                hardware_interval = HardwareSampler.DEFAULT_INTERVAL_S
        self.sampler = self._start_sampler(float(hardware_interval)) if hardware else None
        atexit.register(self.close)  # a probe never closed still flushes its telemetry at exit
        self.set_meta()

    # -- setup helpers ---------------------------------------------------------------------------
    @staticmethod
    def _cadence(detail_every: int | None, th: Mapping[str, float]) -> tuple[int, str]:
        """Detail cadence (in recorded steps) and where it came from."""
        if detail_every is not None:
            return max(1, int(detail_every)), "argument"
        if th.get(DETAIL_EVERY_KEY) is not None:
            return max(1, round(th[DETAIL_EVERY_KEY])), "knowledge base"
        return 1, f"no threshold {DETAIL_EVERY_KEY!r}: every recorded step"

    def _load_thresholds(self) -> Thresholds:
        try:
            return knowledge_thresholds()
        except Exception as exc:  # noqa: BLE001 — a broken knowledge base disables features, not training
            self.errors.add("thresholds", exc)
            return Thresholds({})

    def _test_frozen(self, th: Mapping[str, float]) -> dict[str, Any]:
        """Whether the frozen tensors are as constructed (engine.capture.frozen_init), read once at attach."""
        lay = self.layout
        if not lay.frozen:
            return {}
        try:
            out = frozen_init(lay.names, lay.params, lay.frozen, th, normal_stds(self._model, th))
        except Exception as exc:  # noqa: BLE001 — a test that fails disables itself, never the training
            self.errors.add("frozen_init", exc)
            return {}
        if not out:
            self.disabled["frozen_init"] = f"no thresholds {', '.join(FROZEN_INIT_KEYS)}"
        return out

    def _make_detectors(self, th: Mapping[str, float]) -> StreamDetectors | None:
        try:
            return StreamDetectors(DetectorParams.from_thresholds(th))
        except (KeyError, ValueError) as exc:
            self.disabled["detectors"] = str(exc).strip("'\"")
            return None

    def _start_sampler(self, interval: float) -> HardwareSampler | None:
        try:
            sampler = HardwareSampler(interval)
            sampler.start()
            return sampler
        except Exception as exc:  # noqa: BLE001
            self.errors.add("sampler", exc)
            self.disabled["hardware"] = str(exc)
            return None

    def _watch_activations(self, model: Any, preact: float | None, *, bounded_only: bool) -> None:
        if preact is None:
            self.disabled["act_sat_frac"] = f"no threshold {SAT_PREACT_KEY!r} (bounded clips still measured)"
        for name, module in activation_modules(model, bounded_only=bounded_only):
            stats = ActivationStats(name, module, preact)
            self._acts.append(stats)
            self._handles.append(module.register_forward_hook(partial(self._on_activation, stats)))

    # -- public API ------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The step (iteration) in progress."""
        return self._step

    def watch_router(self, module: Any, num_experts: int, top_k: int, *, name: str | None = None) -> None:
        """Record tokens per expert (``expert_tokens``, entity ``<name>/expert:<i>``) from ``module``'s output and
        the L2 norm of its parameters' gradient (``router_grad_norm``). Accepted outputs: see ``hooks_router``."""
        try:
            path = name or next((n for n, m in self._named_modules() if m is module), None) or type(module).__name__
            watch = RouterWatch(path, num_experts, top_k, self.layout.indices_of(module))
            self._routers.append(watch)
            self._handles.append(module.register_forward_hook(partial(self._on_router, watch)))
            self._evidence.watch_router(path, module, num_experts, self._handles, self._step)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("watch_router", exc)

    def log(self, step: int | None = None, **metrics: Any) -> None:
        """Record scalars (loss, lr, grad_norm, any name) at the step in progress (or ``step``).

        A spelling of the knowledge base's alias table (``lm loss``, ``train/loss``, ``learning_rate``,
        ``moe_dropped_token_fraction``, ...) is stored under its canonical name, unless another key already
        took that name in this run; known names go to their dimension (telemetry schema), unknown ones to
        "convergence" under the name given. A logged grad norm is stored as ``grad_norm`` on steps the probe
        does not measure gradients itself, else as ``grad_norm_logged``.
        """
        try:
            at = self._step if step is None else int(step)
            detect: dict[str, float] = {}
            for key, raw in metrics.items():
                value = float(raw.item() if hasattr(raw, "item") else raw)
                metric = self._log_names.get(key) or self._log_name(key)
                self._logs_lr = self._logs_lr or metric == "lr"
                if metric == "grad_norm":
                    metric = "grad_norm_logged" if self._recording(at) else "grad_norm"
                dim = dimension_of(metric) or "convergence"
                self.writer.add(at, dim, metric, "", value)
                if metric == "loss":
                    detect["loss"] = value
            if detect:
                self._detect(at, detect)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("log", exc)

    def _log_name(self, key: str) -> str:
        """The canonical name of a logged key, claimed by the first key that maps to it."""
        try:
            name = canonical(key)
        except Exception as exc:  # noqa: BLE001 — an unreadable alias table keeps names as given
            self.errors.add("aliases", exc)
            name = key
        if name != key and name in self._log_names.values():
            name = key
        self._log_names[key] = name
        return name

    def set_meta(self, **meta: Any) -> None:
        """Descriptive metadata for run.json (program, model size, ...)."""
        self.meta.update(meta)
        try:
            self._write_run_json(status="running")
        except Exception as exc:  # noqa: BLE001
            self.errors.add("run_json", exc)

    def close(self) -> None:
        """Remove every hook, flush telemetry and write run.json. Idempotent; never raises."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        self._detach()
        try:
            self._finish_updates()
            self._finish_grads()
            if self._pending:
                self._start_grads()
                self._finish_grads()
            self._evidence.close(self._step)
            self._write_step_extras(self._step)
            if self.sampler is not None:
                self.sampler.stop()
                self.sampler.sample_now()
                self._drain_hardware(self._step)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("close", exc)
        try:
            self.writer.close()
        except Exception as exc:  # noqa: BLE001
            self.errors.add("writer", exc)
        try:
            self._write_run_json(status="closed")
        except Exception as exc:  # noqa: BLE001
            self.errors.add("run_json", exc)

    def _detach(self) -> None:
        """Remove every hook and restore the collectives."""
        for handle in self._handles:
            try:
                handle.remove()
            except Exception as exc:  # noqa: BLE001
                self.errors.add("close", exc)
        self._handles.clear()
        if self._comm is not None:
            self._comm.uninstall()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hooks -----------------------------------------------------------------------------------
    def _named_modules(self) -> list[tuple[str, Any]]:
        return list(self._model.named_modules())

    def _recording(self, step: int) -> bool:
        return step % self.every == 0

    def _detail(self, step: int) -> bool:
        """Whether ``step`` is a detail step (histogram, update ratios): every ``detail_every``-th recorded step."""
        return step % (self.every * self.detail_every) == 0

    def _advance(self) -> None:
        if self._completed > self._step:
            self._step = self._completed

    def _clock(self) -> tuple[int, bool, bool]:
        """(step in progress, recording, detail) for a hook that runs now."""
        self._advance()
        step = self._step
        return step, self._recording(step), self._detail(step)

    def _on_forward(self, module: Any, args: Any) -> None:
        self._advance()

    def _on_grad(self, position: int, param: Any) -> None:
        try:
            self._advance()
            if not self._recording(self._step):
                return
            grad = param.grad
            if grad is None:
                return
            previous = self._pending.get(position)
            if previous is not None and previous is not grad:
                # A new backward replaced gradients that no optimizer step consumed (e.g. a step skipped by
                # GradScaler): record them at this step as a skipped iteration.
                self._start_grads(skipped=True)
                self._finish_grads()
            self._pending[position] = grad
        except Exception as exc:  # noqa: BLE001
            self.errors.add("grad_hook", exc)

    def _before_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self._finish_updates()  # the optimizer is about to write the parameters it reads
            self._finish_grads()
            self._step = self._completed
            self._evidence.before_step(self._step, self._recording(self._step), self._detail(self._step))
            if not self._recording(self._step):
                return
            self._write_lr(optimizer)
            if self.updates and self._detail(self._step):  # before the background pass: no competing for memory
                self._snapshots.take(self.layout, self._step)
            self._start_grads()  # runs alongside optimizer.step(), which only reads the gradients
        except Exception as exc:  # noqa: BLE001
            self.errors.add("step_pre_hook", exc)

    def _after_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            step = self._completed
            self._completed += 1
            now = time.perf_counter()
            if self._last_post is not None:
                self.writer.add(step, "communication", "step_time_ms", "", (now - self._last_post) * 1e3)
            self._last_post = now
            self._finish_grads()
            if self._snapshots.step == step:
                self._update_job = start_updates(self.layout, self._snapshots)  # finished by the next pre-hook
            self._evidence.after_step(step)
            self._write_step_extras(step)
            if self.sampler is not None and time.monotonic() - self._last_drain >= self.sampler.interval:
                self._drain_hardware(step)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("step_post_hook", exc)

    def _on_activation(self, stats: ActivationStats, module: Any, inputs: Any, output: Any) -> None:
        try:
            if not self._recording(self._step) or not isinstance(output, self._torch.Tensor):
                return
            eps, large = stats.bounds if stats.bounds is not None else (0.0, math.inf)
            values, _ = start_stats([output], eps, large, background=False).finish()
            row = values[0]
            stats.add(row[_COL["zeros"]], row[_COL["tiny"]], row[_COL["large"]], row[_COL["numel"]])
            if self._detail(self._step):
                stats.add_slope(output)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("activation_hook", exc)

    def _on_router(self, watch: RouterWatch, module: Any, inputs: Any, output: Any) -> None:
        try:
            if self._recording(self._step):
                watch.observe(output)
        except Exception as exc:  # noqa: BLE001
            self.errors.add("router_hook", exc)

    # -- measurement -----------------------------------------------------------------------------
    def _start_grads(self, skipped: bool = False) -> None:
        pending, self._pending = self._pending, {}
        self._grad_job = start_grads(self._step, pending, self.tiny_eps, self.errors.skip, skipped,
                                     hist=self._detail(self._step))

    def _finish_grads(self) -> None:
        job, self._grad_job = self._grad_job, None
        if job is not None:
            try:
                norm = write_grads(job, self.layout, self.writer, self._routers, self.tiny_eps is not None)
            except Exception as exc:  # noqa: BLE001
                self.errors.add("grad_stats", exc)
                return
            self._detect(job.step, {"grad_norm": norm})

    def _finish_updates(self) -> None:
        job, self._update_job = self._update_job, None
        if job is not None:
            try:
                write_updates(job, self.layout, self.writer)
            except Exception as exc:  # noqa: BLE001
                self.errors.add("update_norms", exc)

    def _write_lr(self, optimizer: Any) -> None:
        """The learning rate the step is about to use (the largest of the parameter groups'), unless the loop logs
        its own: detectors read schedules and values from it whether or not the loop logs it."""
        if self._logs_lr:
            return
        rates = [float(g["lr"]) for g in getattr(optimizer, "param_groups", ()) if isinstance(g.get("lr"), int | float)]
        if rates:
            self.writer.add(self._step, "convergence", "lr", "", max(rates))

    def _write_step_extras(self, step: int) -> None:
        """Activation fractions, router tokens and collective timings gathered during ``step``."""
        w = self.writer
        for a in self._acts:
            fracs = a.take()
            if fracs is not None:
                w.add(step, "gradient", "act_zero_frac", a.name, fracs[0])
                if fracs[1] is not None:
                    w.add(step, "gradient", "act_sat_frac", a.name, fracs[1])
            slope = a.take_slope()
            if slope is not None:
                w.add(step, "gradient", "act_slope", a.name, slope)
        for r in self._routers:
            counts = r.take()
            if counts is not None:
                w.add_many(step, "convergence", "expert_tokens", r.entities, counts)
        if self._comm is not None:
            totals = self._comm.take()
            for kind, (ms, nbytes, calls) in totals.items():
                w.add(step, "communication", "collective_ms", kind, ms)
                w.add(step, "communication", "collective_bytes", kind, nbytes)
                w.add(step, "communication", "collective_count", kind, calls)
                if kind == "alltoall":
                    w.add(step, "communication", "alltoall_bytes", "", nbytes)
            if totals:
                w.add(step, "communication", "comm_ms", "", sum(v[0] for v in totals.values()))

    def _drain_hardware(self, step: int) -> None:
        self._last_drain = time.monotonic()
        if self.sampler is None:
            return
        samples = self.sampler.drain()
        if len(samples):
            from debugtune.native.sampler import METRICS

            names = np.array(METRICS, dtype=object)[samples.metric]
            ents = np.array(samples.entities, dtype=object)[samples.entity]
            self.writer.add_columns(np.full(len(samples), step), "hardware", names, ents, samples.value)

    def _detect(self, step: int, values: dict[str, float]) -> None:
        if self.detectors is None:
            return
        for d in self.detectors.update(values):
            alarms = tuple(a for a in d.alarms if a != "nonfinite")
            for a in alarms:
                self.writer.add(step, dimension_of(d.series) or "convergence", f"{d.series}_alarm_{a}", "", 1.0)
            if alarms:
                self.alarms.append((step, d.series, alarms))

    # -- run.json --------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """The probe's own account: settings, errors, sampler backend, what was disabled and why."""
        lay = self.layout
        sampler = None
        if self.sampler is not None:
            sampler = {"backend": self.sampler.backend, "unavailable": self.sampler.reasons,
                       "dropped": self.sampler.dropped, "interval_s": self.sampler.interval}
        return {
            "every": self.every, "detail_every": self.detail_every, "detail_every_from": self.detail_from,
            "updates": self.updates, "steps_completed": self._completed,
            "params": {"watched": len(lay.trainable), "frozen": len(lay.frozen), "optimized": len(lay.optimized),
                       "unnamed_in_optimizer": lay.unnamed_in_optimizer,
                       "frozen_names": [lay.names[i] for i in lay.frozen][:100], **self._frozen_init,
                       **self._evidence.outside.report()},
            "routers": [r.name for r in self._routers], "activation_modules": len(self._acts),
            "collectives_timed": self._comm is not None, "sampler": sampler, "disabled": dict(self.disabled),
            "errors": self.errors.report(), "alarms": len(self.alarms), "writer": self.writer.stats(),
            **self._evidence.report(),
        }

    def _write_run_json(self, status: str) -> None:
        torch = self._torch
        meta = {
            "run_id": self.run_id, "framework": "pytorch", "framework_version": torch.__version__,
            "world_size": self.world_size, "parallel": {},
            "steps": {"count": self._completed, "first": 0, "last": self._completed - 1} if self._completed else {},
            "source": {"format": "probe", "status": status}, **self.meta,
            **({"layers": self._evidence.order} if self._evidence.order else {}),  # measured: wins over set_meta
            "environment": environment_snapshot(), "probe": self.report(),
        }
        if self.rank == 0:
            write_run_json(self.run_dir, meta)
        else:  # one writer of run.json per run; other ranks keep their probe report beside it
            import json

            path = self.run_dir / f"probe-rank{self.rank}.json"
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(meta, default=str, indent=2))
            os.replace(tmp, path)


def attach(model: Any, optimizer: Any, run_dir: str | Path, *, run_id: str | None = None, rank: int | None = None,
           every: int = 1, detail_every: int | None = None, activations: bool | None = None, hardware: bool = True,
           **options: Any) -> Probe:
    """Attach the live probe to ``model`` and ``optimizer``, writing telemetry into ``run_dir``.

    ``every``: gradient statistics, activations and router counts on every N-th step.
    ``detail_every``: the log2 histogram and update/weight ratios on every N-th of those recorded steps
    (default: the knowledge base's ``probe.detail_every``; 1 = on every recorded step).
    ``activations``: forward hooks on every activation module (True), on none (False), or by default (None) on
    the bounded ones only (Sigmoid, Tanh, Softsign, Hardtanh, ReLU6, Hardsigmoid), whose failure is saturation
    and which are few in most models. ``hardware``: the native hardware sampler.
    ``options``: ``thresholds`` (a key → value map instead of the knowledge base), ``updates`` (update/
    weight ratios; needs a parameter snapshot), ``detectors`` (live alarms), ``hardware_interval`` (s),
    ``flush_rows`` / ``flush_seconds`` (telemetry is written every 65,536 rows or 5 s, whichever first).
    Use as a context manager or call ``close()``.
    """
    return Probe(model, optimizer, run_dir, run_id=run_id, rank=rank, every=every, detail_every=detail_every,
                 activations=activations, hardware=hardware, **options)
