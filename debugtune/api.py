"""The Python API behind ``debugtune.diagnose`` and ``debugtune.query`` (front door; imports every stage)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from debugtune import settings
from debugtune.engine.diagnose import DiagnoseError, Thresholds, diagnose_run
from debugtune.engine.infer import DiagnosisReport, infer
from debugtune.engine.telemetry.runmeta import RUN_JSON
from debugtune.engine.telemetry.writer import TELEMETRY_DIR
from debugtune.kg import Store, open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import check_run_id
from debugtune.query import DslResult

if TYPE_CHECKING:
    from debugtune.engine.capture.probe import Probe
    from debugtune.engine.diagnose.follow import Pass
    from debugtune.engine.prevent import LintResult
    from debugtune.engine.prevent.preflight import PreflightResult
    from debugtune.engine.tune.auto import AutoResult
    from debugtune.engine.tune.replay import Checkpoint

__all__ = ["attach", "check_model", "checkpoint", "diagnose", "follow", "lint", "query", "resolve_run", "tune"]

IMPORTED_DIR = ".debugtune-run"
"""Where a raw profiler or log folder is imported before it is diagnosed (inside it, or under home())."""


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a debugtune run directory (has run.json or telemetry/)."""
    return (path / RUN_JSON).is_file() or (path / TELEMETRY_DIR).is_dir()


def _import_raw(path: Path) -> tuple[Path, str]:
    """Import a raw profiler or log folder (format autodetected) into a run directory; returns (dir, format)."""
    from debugtune.engine.capture.importers import ImportFormatError, detect_format, import_path

    try:
        fmt = detect_format(path)
    except ImportFormatError as err:
        raise DiagnoseError(f"nothing diagnosed: {path} is neither a debugtune run directory (no run.json, no "
                            f"telemetry/) nor a profiler or log folder debugtune can import ({err})") from None
    target = path / IMPORTED_DIR if path.is_dir() and os.access(path, os.W_OK) else \
        settings.home() / "imports" / hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    run_id = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.resolve().name)[:100] or "imported"
    import_path(path, target, fmt=fmt, run_id=run_id if run_id[0].isalnum() else "run-" + run_id, replace=True)
    return target, fmt


def _hardware(run_dir: Path, device: str | None, interconnect: str | None) -> dict[str, Any] | None:
    """run.json's device and link facts with the user's overrides, or None without overrides."""
    if not (device or interconnect):
        return None
    from debugtune.engine.capture.importers.registry import hardware_overrides
    from debugtune.engine.telemetry import read_run_json

    return hardware_overrides(read_run_json(run_dir), device=device, interconnect=interconnect)


def resolve_run(run_dir_or_id: str | os.PathLike[str], store: Store) -> tuple[Path, str | None]:
    """The run directory to diagnose and, for a raw folder, the format it was imported from.

    A path that exists is used (imported first when it is a raw profiler or log folder); otherwise the
    argument is taken as a run id whose directory the store remembers.
    """
    path = Path(run_dir_or_id)
    if path.exists():
        if not path.is_dir():
            path_dir, fmt = _import_raw(path)
            return path_dir, fmt
        if is_run_dir(path):
            return path, None
        if not any(path.iterdir()):
            raise DiagnoseError(f"nothing diagnosed: {path} is empty (no run.json, no telemetry/)")
        return _import_raw(path)
    run_id = str(run_dir_or_id)
    try:
        check_run_id(run_id)
    except ValueError:
        raise DiagnoseError(f"nothing diagnosed: {run_id} is neither an existing directory nor a run id") from None
    rows = store.select(f"""SELECT ?dir WHERE {{ ?r a dt:TrainingRun ; dt:runId "{run_id}" ; dt:runDir ?dir }}""")
    for d in rows.column("dir"):
        if d and Path(d).is_dir():
            return Path(d), None
    raise DiagnoseError(f"nothing diagnosed: {run_id} is not a directory, and the store {store.target} knows no "
                        f"run directory for a run with that id")


def diagnose(run_dir_or_id: str | os.PathLike[str], *, store: Store | None = None,
             dimensions: Iterable[str] | None = None, save: bool = True,
             progress: Callable[[str], None] | None = None, device: str | None = None,
             interconnect: str | None = None, engine: str = "auto") -> DiagnosisReport:
    """Diagnose a run: detectors over its telemetry, then root-cause inference over the knowledge graph.

    ``store=None`` uses an in-memory store with the knowledge base loaded; otherwise the knowledge base
    is loaded into ``store`` if it changed. The findings and hypotheses are asserted into the run's
    named graph and the report is saved to ``<run_dir>/diagnosis.json`` (unless ``save=False``).
    ``progress`` is called with the name of each stage as it starts. ``device`` / ``interconnect`` override
    the accelerator and the link run.json names (resolved against the knowledge base, docs/import.md).
    ``engine``: ``auto`` (out of core above ``diagnose.out_of_core.rows`` rows), ``memory``, ``duckdb`` (out of
    core) or ``ray`` (out of core, windows as Ray tasks); the findings do not depend on it (docs/diagnose.md).
    """
    say = progress or (lambda _stage: None)
    own = store is None
    st = open_store(None) if store is None else store
    try:
        say("loading the knowledge base")
        load_knowledge(st)
        say("reading telemetry")
        run_dir, fmt = resolve_run(run_dir_or_id, st)
        th = Thresholds.from_store(st)
        say("running detectors")
        result = diagnose_run(run_dir, th, dimensions, meta=_hardware(run_dir, device, interconnect), engine=engine)
        say("inferring the root cause")
        report = infer(st, result, th, run_dir=str(Path(run_dir).resolve()))
        if fmt:
            report.notes.insert(0, f"imported {fmt} data from {run_dir_or_id} into {run_dir}")
        if save:
            report.save(run_dir)
        return report
    finally:
        if own:
            st.close()


def follow(run_dir: str | os.PathLike[str], *, store: Store | None = None, dimensions: Iterable[str] | None = None,
           interval: float = 30.0, passes: int | None = None, engine: str = "duckdb", device: str | None = None,
           interconnect: str | None = None,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[tuple[Pass, DiagnosisReport | None]]:
    """Watch a growing run: every ``interval`` seconds a pass re-judges only what was written since the last one
    (``engine.diagnose.follow``) and, when something was new, infers again. Yields each pass and its report (None
    when nothing was new or nothing could be diagnosed yet, the pass's ``note`` says why); ``passes=None`` runs
    until interrupted. ``engine``: ``duckdb`` or ``ray``."""
    from debugtune.engine.diagnose.follow import Follower
    from debugtune.engine.diagnose.run import ray_executor

    if engine not in ("duckdb", "ray"):
        raise DiagnoseError(f"--follow reads the run out of core: engine duckdb or ray, not {engine!r}")
    own = store is None
    st = open_store(None) if store is None else store
    try:
        load_knowledge(st)
        path = Path(run_dir)
        if not path.is_dir():
            raise DiagnoseError(f"nothing diagnosed: {path} is not a run directory")
        th = Thresholds.from_store(st)
        follower = Follower(path, th, dimensions, meta=_hardware(path, device, interconnect) if
                            is_run_dir(path) else None, executor=ray_executor() if engine == "ray" else None)
        done = 0
        while passes is None or done < passes:
            step = follower.step()
            done += 1
            report = None
            if step.diagnosis is not None:
                report = infer(st, step.diagnosis, th, run_dir=str(path.resolve()))
                report.save(path)
            yield step, report
            if passes is None or done < passes:
                sleep(interval)
    finally:
        if own:
            st.close()


def _with_store(store: Store | None, fn: Callable[[Store], Any]) -> Any:
    """``fn(store)``, or ``fn`` on the default store with the knowledge base loaded (closed afterwards)."""
    if store is not None:
        return fn(store)
    st = open_store(settings.default_store())
    try:
        load_knowledge(st)
        return fn(st)
    finally:
        st.close()


def query(text: str, *, store: Store | None = None) -> DslResult:
    """Run one tuning-DSL query (docs/query.md) and return its rows, the SPARQL it ran and any notes.

    ``store=None`` opens the default store (``$DEBUGTUNE_STORE`` or ``~/.debugtune/store``) with the
    knowledge base loaded. Problems with the query raise `debugtune.query.DslError` subclasses.
    """
    from debugtune.query import run_query

    return _with_store(store, lambda st: run_query(text, st))


def lint(*configs: str | os.PathLike[str], framework: str = "auto", version: str | None = None,
         env: Mapping[str, str] | None = None, store: Store | None = None) -> list[LintResult]:
    """Lint launch configurations (Megatron-LM scripts or YAML, DeepSpeed JSON, HF TrainingArguments JSON)
    against the prevention rules of the knowledge graph (docs/lint.md); one result per file, errors first
    in ``result.errors``. An unreadable file raises `debugtune.engine.prevent.LintInputError`."""
    from debugtune.engine.prevent import Linter

    linter = _with_store(store, Linter.from_store)
    return [linter.lint_path(str(c), framework=framework, version=version, env=dict(env or {})) for c in configs]


def tune(run_id: str, trial: Callable[..., Mapping[str, float]] | str | None = None, *, store: Store | None = None,
         **spec: Any) -> AutoResult:
    """One tuning session for a diagnosed run (docs/tune.md): ``trial`` is a Python callable
    ``fn(params, [seed=], [checkpoint=]) -> {objective: value}``, a command template that prints JSON
    metrics, or None for the trial the run's replay checkpoint declares (`checkpoint`); ``spec`` holds the
    fields of `debugtune.engine.tune.TuneSpec` (``remedy=`` or ``top_suggestion=True``, ``objectives``,
    ``max_experiments``, ``budget``, ...)."""
    from debugtune.engine.tune import CallableTrial, CommandTrial, Objective, TuneSpec, auto_tune

    if "objectives" in spec:
        spec["objectives"] = tuple(Objective.parse(o) if isinstance(o, str) else o for o in spec["objectives"])
    run: CallableTrial | CommandTrial | None
    if trial is None or isinstance(trial, CallableTrial | CommandTrial):
        run = trial
    elif isinstance(trial, str):
        run = CommandTrial(trial, timeout_s=spec.get("timeout_s"))
    else:
        run = CallableTrial(trial)
        spec.setdefault("executor", "inline")  # a local function or lambda cannot be pickled into a process pool
    return _with_store(store, lambda st: auto_tune(st, run_id, run, TuneSpec(**spec)))


def checkpoint(run_dir: str | os.PathLike[str], model: Any, optimizer: Any, scheduler: Any = None,
               sampler: Any = None, *, step: int, trial: str, parameters: Iterable[str],
               objectives: Iterable[str] = ("loss",), target: float | None = None,
               trial_dir: str | os.PathLike[str] | None = None, extra: Mapping[str, Any] | None = None) -> Checkpoint:
    """Save the replay checkpoint of a run (``<run_dir>/replay-checkpoint.pt``) from a training loop, before the
    problem shows: model, optimizer, scheduler, RNG states, the sampler's ``state_dict()`` and the step, with
    the trial that replays it (``trial``: ``module:function`` called as ``fn(params, checkpoint=path)``), the
    tuning parameters it sets and the metrics it reports (``name:min|max``, the first one optimised first).
    Then ``cann-tune auto RUN --top-suggestion`` needs no other flag (docs/tune.md)."""
    from debugtune.engine.tune.run_trial import save_run_checkpoint

    return save_run_checkpoint(Path(run_dir), model, optimizer, scheduler, sampler, step=step, trial=trial,
                               parameters=tuple(parameters), objectives=tuple(objectives), target=target,
                               trial_dir=None if trial_dir is None else Path(trial_dir), extra=extra)


_PREFLIGHT_STORE: list[Store] = []


def check_model(model: Any, *, store: Store | None = None) -> PreflightResult:
    """The knowledge base's initialisation checks on a live model (`engine.prevent.preflight`); ``store=None``
    reads them from the shipped knowledge base (loaded once per process, in memory)."""
    from debugtune.engine.prevent.preflight import preflight

    if store is None:
        if not _PREFLIGHT_STORE:
            st = open_store(None)
            load_knowledge(st)
            _PREFLIGHT_STORE.append(st)
        store = _PREFLIGHT_STORE[0]
    return preflight(model, store)


def attach(model: Any, optimizer: Any, run_dir: str | os.PathLike[str], *, preflight: bool | str = False,
           store: Store | None = None, **options: Any) -> Probe:
    """Attach the live probe (`engine.capture.probe.attach`: ``run_id``, ``rank``, ``every``, ``activations``,
    ``hardware``, ... as documented there and in docs/probe.md).

    ``preflight=True`` first checks the model against the knowledge base's initialisation checks
    (`check_model`; ``store`` gives the knowledge base) and raises `PreflightError` — before step 1, nothing
    attached or written — when one fails; ``preflight="warn"`` warns and attaches anyway."""
    if preflight not in (False, True, "warn"):
        raise ValueError(f"preflight must be True, False or 'warn', got {preflight!r}")
    if preflight:
        import warnings

        from debugtune.engine.prevent.preflight import PreflightError

        result = check_model(model, store=store)
        if not result.ok:
            if preflight != "warn":
                raise PreflightError(result)
            warnings.warn(str(PreflightError(result)), stacklevel=2)
    from debugtune.engine.capture.probe import attach as attach_probe

    return attach_probe(model, optimizer, Path(run_dir), **options)
