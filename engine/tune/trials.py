"""Trials: a Python callable or a command template, run in-process, in local processes or on Ray.

A trial is ``fn(params) -> {objective: value, ..., "cost": card_hours}`` (it may also accept ``seed=``
and ``checkpoint=`` keywords), or a command template such as
``python train.py --init-std {init_std} --aux {aux_coef}`` whose process prints one JSON object on
its last line of output. The template is split with ``shlex`` *before* the values are filled in and
run without a shell, so a value can never inject a command; ``{seed}``, ``{index}`` and
``{checkpoint}`` are available besides the parameters. A trial that raises, exits non-zero, prints
no JSON, dies or runs past the timeout comes back with status ``failed`` and the reason.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import multiprocessing as mp
import os
import shlex
import signal
import string
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from debugtune.engine.tune.data import TrialOutcome, TrialRequest, finite
from debugtune.engine.tune.errors import TrialSpecError

RESERVED = ("seed", "index", "checkpoint")
"""Template fields filled by the tuner rather than by the search space."""
EXECUTORS = ("process", "inline", "ray")


class TrialFunction(Protocol):
    def __call__(self, request: TrialRequest) -> dict[str, Any]: ...


# -- trial kinds ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommandTrial:
    """A command template (see module doc); picklable so that any executor can run it."""

    template: str
    timeout_s: float | None = None
    cwd: str | None = None

    def fields(self) -> list[str]:
        """The placeholder names, in order; a malformed template raises TrialSpecError."""
        try:
            parsed = list(string.Formatter().parse(self.template))
        except ValueError as err:
            raise TrialSpecError(f"trial template {self.template!r}: {err}") from None
        names = []
        for _text, name, _spec, _conv in parsed:
            if name is None:
                continue
            if not name.isidentifier():
                raise TrialSpecError(f"trial template field {{{name}}}: use a plain parameter name such as {{lr}}")
            names.append(name)
        return names

    def check(self, parameters: Sequence[str], *, checkpoint: bool) -> None:
        """Every placeholder must be a parameter or a reserved field; ``{checkpoint}`` needs a checkpoint."""
        try:
            argv = shlex.split(self.template)
        except ValueError as err:
            raise TrialSpecError(f"trial template {self.template!r}: {err}") from None
        if not argv:
            raise TrialSpecError("the trial template is empty")
        allowed = set(parameters) | set(RESERVED)
        for name in self.fields():
            if name not in allowed:
                raise TrialSpecError(f"trial template field {{{name}}} is not a tuning parameter "
                                     f"(parameters: {', '.join(parameters)}; also {', '.join(RESERVED)})")
            if name == "checkpoint" and not checkpoint:
                raise TrialSpecError("trial template uses {checkpoint} but no --deterministic-replay checkpoint "
                                     "was given")

    def argv(self, request: TrialRequest) -> list[str]:
        """The argument vector with the values filled in (each value stays inside its own argument)."""
        values = {**request.params, "seed": request.seed, "index": request.index,
                  "checkpoint": request.checkpoint or ""}
        try:
            return [_FILL.vformat(tok, (), values) for tok in shlex.split(self.template)]
        except (KeyError, ValueError, IndexError) as err:
            raise TrialSpecError(f"trial template {self.template!r}: cannot fill {err}") from None

    def display(self, request: TrialRequest) -> str:
        return shlex.join(self.argv(request))

    def __call__(self, request: TrialRequest) -> dict[str, Any]:
        argv = self.argv(request)
        env = {**os.environ, "DEBUGTUNE_TRIAL_SEED": str(request.seed), "DEBUGTUNE_TRIAL_INDEX": str(request.index),
               "DEBUGTUNE_TRIAL_PARAMS": json.dumps(request.params, sort_keys=True)}
        if request.checkpoint:
            env["DEBUGTUNE_CHECKPOINT"] = request.checkpoint
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                        cwd=self.cwd, start_new_session=True)
            except OSError as e:
                raise TrialFailure(f"cannot start {argv[0]!r}: {e.strerror or e}") from None
            try:
                code = proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                raise TrialFailure(f"timed out after {self.timeout_s:g} s") from None
            except BaseException:
                _kill_group(proc)
                raise
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace")
        if code != 0:
            tail = stderr.strip().splitlines()[-1:] or stdout.strip().splitlines()[-1:] or [""]
            raise TrialFailure(f"exit code {code}: {tail[0][:300]}")
        return parse_last_json(stdout)


class _Filler(string.Formatter):
    """``{name}`` gives a float's shortest exact text (repr), ``{name:.3g}`` applies the format spec."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if not format_spec:
            return repr(value) if isinstance(value, float) else str(value)
        return format(value, format_spec)


_FILL = _Filler()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


class TrialFailure(Exception):
    """A trial that did not produce a result (the message says why)."""


def parse_last_json(stdout: str) -> dict[str, Any]:
    """The JSON object on the last non-empty line of ``stdout``."""
    lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    if not lines:
        raise TrialFailure("printed nothing (expected a JSON object on its last line)")
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError as err:
        raise TrialFailure(f"last line is not JSON ({err.msg}): {lines[-1][:200]!r}") from None
    if not isinstance(obj, dict):
        raise TrialFailure(f"last line holds a JSON {type(obj).__name__}, expected an object")
    return obj


@dataclass(frozen=True)
class CallableTrial:
    """A Python callable ``fn(params, [seed=], [checkpoint=])``; ``module:function`` ones are picklable."""

    fn: Callable[..., Any]

    def __call__(self, request: TrialRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        accepted: Mapping[str, Any]
        try:
            accepted = inspect.signature(self.fn).parameters
        except (TypeError, ValueError):
            accepted = {}
        if "seed" in accepted:
            kwargs["seed"] = request.seed
        if "checkpoint" in accepted:
            kwargs["checkpoint"] = request.checkpoint
        result = self.fn(dict(request.params), **kwargs)
        if not isinstance(result, Mapping):
            raise TrialFailure(f"returned {type(result).__name__}, expected a dict of metrics")
        return dict(result)


def load_callable(spec: str) -> CallableTrial:
    """``package.module:function`` → a CallableTrial (the module is imported here to check it)."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise TrialSpecError(f"--trial-fn {spec!r}: expected module:function, e.g. mypkg.trials:run")
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise TrialSpecError(f"--trial-fn {spec!r}: cannot import {module!r}: {err}") from None
    fn: Any = mod
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise TrialSpecError(f"--trial-fn {spec!r}: {module!r} has no attribute {attr!r}")
    if not callable(fn):
        raise TrialSpecError(f"--trial-fn {spec!r}: {attr!r} is not callable")
    return CallableTrial(fn)


# -- one evaluation ------------------------------------------------------------------------------------------
def outcome(raw: Mapping[str, Any] | None, seconds: float, error: str | None = None) -> TrialOutcome:
    """Normalise what a trial returned: numeric metrics kept, ``cost`` taken out (default: wall hours)."""
    if raw is None:
        return TrialOutcome({}, seconds / 3600.0, "failed", error, seconds)
    values = {str(k): float(v) for k, v in raw.items() if k != "cost" and finite(v)}
    cost = raw.get("cost")
    if cost is not None and not (finite(cost) and cost >= 0):
        return TrialOutcome(values, seconds / 3600.0, "failed", f"cost {cost!r} is not a non-negative number",
                            seconds)
    bad = [k for k, v in raw.items() if k != "cost" and isinstance(v, float) and not math.isfinite(v)]
    status, error = ("failed", f"non-finite metric(s): {', '.join(bad)}") if bad else ("ok", None)
    return TrialOutcome(values, float(cost) if cost is not None else seconds / 3600.0, status, error, seconds)


def evaluate(trial: TrialFunction, request: TrialRequest) -> TrialOutcome:
    """Run one trial here, turning every failure into a failed outcome."""
    start = time.perf_counter()
    try:
        raw = trial(request)
    except TrialFailure as err:
        return outcome(None, time.perf_counter() - start, str(err))
    except Exception as err:  # noqa: BLE001 — a trial's own bug is the trial's failure, not the tuner's
        return outcome(None, time.perf_counter() - start, f"{type(err).__name__}: {err}")
    return outcome(raw, time.perf_counter() - start)


# -- executors -----------------------------------------------------------------------------------------------
class InlineExecutor:
    """Runs trials one after the other in this process (no timeout; for closures, tests, benchmarks)."""

    def __init__(self, trial: TrialFunction):
        self.trial = trial

    def __call__(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        return [evaluate(self.trial, r) for r in requests]

    def close(self) -> None:
        pass


def _child(trial: TrialFunction, request: TrialRequest, conn) -> None:
    conn.send(evaluate(trial, request))
    conn.close()


class ProcessExecutor:
    """Up to ``parallel`` trials at once, each in its own fresh process (spawned), killed on timeout.

    Command trials run their command directly; callables run in a spawned Python process, so they
    must be importable (``module:function``).
    """

    def __init__(self, trial: TrialFunction, parallel: int = 1, timeout_s: float | None = None):
        self.trial, self.parallel, self.timeout_s = trial, max(1, parallel), timeout_s
        self._ctx = mp.get_context("spawn")

    def __call__(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        results: dict[int, TrialOutcome] = {}
        pending = list(enumerate(requests))
        running: list[tuple[int, Any, Any, float]] = []
        try:
            while pending or running:
                while pending and len(running) < self.parallel:
                    i, req = pending.pop(0)
                    running.append((i, *self._start(req), time.perf_counter()))
                time.sleep(0.02)
                still = []
                for i, proc, conn, t0 in running:
                    done = self._poll(proc, conn, t0)
                    if done is None:
                        still.append((i, proc, conn, t0))
                    else:
                        results[i] = done
                running = still
        finally:
            for _i, proc, _conn, _t0 in running:
                proc.kill()
        return [results[i] for i in range(len(requests))]

    def _start(self, req: TrialRequest):
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child, args=(self.trial, req, send), daemon=True)
        proc.start()
        send.close()
        return proc, recv

    def _poll(self, proc, conn, t0: float) -> TrialOutcome | None:
        elapsed = time.perf_counter() - t0
        if conn.poll():
            try:
                res = conn.recv()
            except EOFError:
                res = None
            proc.join(5)
            if res is not None:
                return res
        if not proc.is_alive():
            proc.join()
            return outcome(None, elapsed, f"trial process died (exit code {proc.exitcode})")
        if self.timeout_s is not None and elapsed > self.timeout_s:
            proc.kill()
            proc.join()
            return outcome(None, elapsed, f"timed out after {self.timeout_s:g} s")
        return None

    def close(self) -> None:
        pass


class RayExecutor:
    """Trials as Ray tasks (``ray`` extra); starts a local Ray when none is connected, or joins ``address``."""

    def __init__(self, trial: TrialFunction, parallel: int = 1, timeout_s: float | None = None,
                 address: str | None = None):
        try:
            import ray
        except ImportError:
            raise TrialSpecError("the Ray executor needs the 'ray' extra: pip install 'debugtune[ray]'") from None
        self.ray, self.trial, self.parallel, self.timeout_s = ray, trial, max(1, parallel), timeout_s
        self._owned = not ray.is_initialized()
        if self._owned:
            ray.init(address=address, num_cpus=None if address else self.parallel, include_dashboard=False,
                     log_to_driver=False, configure_logging=False)
        self._remote = ray.remote(num_cpus=1, max_retries=0)(evaluate)

    def __call__(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        ray = self.ray
        results: dict[int, TrialOutcome] = {}
        pending = list(enumerate(requests))
        running: dict[Any, tuple[int, float]] = {}
        while pending or running:
            while pending and len(running) < self.parallel:
                i, req = pending.pop(0)
                running[self._remote.remote(self.trial, req)] = (i, time.perf_counter())
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.1)
            for ref in done:
                i, t0 = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as err:  # noqa: BLE001 — a lost worker is the trial's failure
                    results[i] = outcome(None, time.perf_counter() - t0, f"Ray task failed: {err}")
            now = time.perf_counter()
            for ref, (i, t0) in list(running.items()):
                if self.timeout_s is not None and now - t0 > self.timeout_s:
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    results[i] = outcome(None, now - t0, f"timed out after {self.timeout_s:g} s")
        return [results[i] for i in range(len(requests))]

    def close(self) -> None:
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()


def make_executor(trial: TrialFunction, kind: str = "process", *, parallel: int = 1, timeout_s: float | None = None,
                  address: str | None = None):
    """An executor by name: ``process`` (default), ``inline`` or ``ray``."""
    if kind == "process":
        return ProcessExecutor(trial, parallel, timeout_s)
    if kind == "inline":
        return InlineExecutor(trial)
    if kind == "ray":
        return RayExecutor(trial, parallel, timeout_s, address)
    raise TrialSpecError(f"executor {kind!r} is not one of {EXECUTORS}")
