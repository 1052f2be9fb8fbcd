"""The importer registry, format autodetection and ``import_path`` (staged: nothing is left on failure)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

from debugtune.engine.capture.importers import devices
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.trace_kinds import describe
from debugtune.engine.telemetry import TelemetryError, environment_snapshot, write_run_json
from debugtune.engine.telemetry.atomic import staged_directory
from debugtune.engine.telemetry.runmeta import RUN_JSON
from debugtune.kg.input_errors import reading


@dataclass(frozen=True)
class Importer:
    """One input format: a cheap ``detect(path)`` sniff and ``load(path, sink)`` that fills the sink."""

    name: str
    description: str
    module: str  # module under debugtune.engine.capture.importers holding detect() and load()

    def _fn(self, attr: str) -> Callable[..., Any]:
        fn: Callable[..., Any] = getattr(import_module(f"debugtune.engine.capture.importers.{self.module}"), attr)
        return fn

    def detect(self, path: Path) -> bool:
        return bool(self._fn("detect")(path))

    def load(self, path: Path, sink: RunSink) -> None:
        self._fn("load")(path, sink)


# Most specific first: autodetection takes the first importer whose sniff accepts the path.
IMPORTERS: tuple[Importer, ...] = (
    Importer("ascend", "Ascend PyTorch profiler output (*_ascend_pt/ASCEND_PROFILER_OUTPUT) and cluster analysis "
             "files", "ascend"),
    Importer("worker-timeline", "Chrome/Perfetto JSON timeline whose tracks are workers (ph: X events per worker "
             "track, no Kineto ProfilerStep; ByteDance timeline-*.json.gz)", "worker_timeline"),
    Importer("pytorch-trace", "PyTorch profiler (Kineto) Chrome trace .json/.json.gz, one file per rank (also "
             "CUPTI range-profiler and CPU-only traces; a worker timeline is handed to worker-timeline)",
             "chrome_trace"),
    Importer("op-table", "per-operation timing table, Parquet or CSV (rank, step, optype, start_ts, duration; "
             "ByteDance straggler traces)", "op_table"),
    Importer("tensorboard", "TensorBoard event files (events.out.tfevents.*)", "tensorboard"),
    Importer("msprobe", "msprobe monitor CSV (vpp_stage,name,step,...)", "msprobe"),
    Importer("megatron-log", "Megatron-LM text log (' iteration N/ M | ... lm loss: ...')", "megatron_log"),
    Importer("nvidia-smi", "nvidia-smi --query-gpu=... --format=csv log", "smi"),
    Importer("npu-smi", "npu-smi info / npu-smi info watch log", "npu_smi"),
    Importer("jsonl", "JSON-lines metric log (one object per line with a step)", "metric_logs"),
    Importer("csv", "CSV metric log with a step/iteration column", "metric_logs_csv"),
)


def formats() -> list[str]:
    """Names of the supported formats, in autodetection order."""
    return [imp.name for imp in IMPORTERS]


def importer(name: str) -> Importer:
    """The importer called ``name``."""
    for imp in IMPORTERS:
        if imp.name == name:
            return imp
    raise ImportFormatError(name, f"unknown format (known: {', '.join(formats())})")


def _input_error(path: str, message: str, line: int | None, field: str | None) -> ImportFormatError:
    return ImportFormatError(path, message, line=line, field=field)


def detect_format(path: str | Path) -> str:
    """The name of the first importer that recognises ``path``; raises when none does."""
    path = Path(path)
    if not path.exists():
        raise ImportFormatError(path, "not found")
    for imp in IMPORTERS:
        with reading(path, _input_error):
            if imp.detect(path):
                return imp.name
    looks = describe(path)
    raise ImportFormatError(path, (f"format not recognised: it looks like {looks}" if looks else
                                   "format not recognised") + f"; name it explicitly (one of: {', '.join(formats())})")


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote."""

    run_dir: Path
    run_id: str
    format: str
    rows: int
    ranks: list[int]
    steps: list[int]
    metrics: list[str]
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-friendly summary (steps as count/first/last)."""
        return {"run_dir": str(self.run_dir), "run_id": self.run_id, "format": self.format, "rows": self.rows,
                "ranks": self.ranks, "steps": {"count": len(self.steps), "first": self.steps[0] if self.steps else None,
                                               "last": self.steps[-1] if self.steps else None},
                "metrics": self.metrics, "files": self.files, "notes": self.notes}


def import_path(path: str | Path, run_dir: str | Path, *, fmt: str | None = None, run_id: str | None = None,
                replace: bool = False, flush_rows: int = 262144, device: str | None = None,
                interconnect: str | None = None) -> ImportResult:
    """Import ``path`` (a file or directory) into the run directory ``run_dir``.

    ``device`` / ``interconnect`` name the accelerator and the link when the input does not (or names them
    wrongly); they are resolved against the knowledge base's models and interconnects (``devices``).

    Everything is written into a hidden staging directory that is renamed to ``run_dir`` only when the import
    succeeded, so a malformed input leaves nothing behind. An existing ``run_dir`` is an error unless ``replace``.
    """
    path, run_dir = Path(path), Path(run_dir)
    name = fmt or detect_format(path)
    imp = importer(name)
    if not path.exists():
        raise ImportFormatError(path, "not found")
    if run_dir.exists():
        empty = run_dir.is_dir() and not any(run_dir.iterdir())
        if empty:
            run_dir.rmdir()
        elif not replace:
            raise TelemetryError(run_dir, "run directory already exists (choose another --run-dir or use --replace)")
        elif not (run_dir.is_dir() and (run_dir / RUN_JSON).is_file()):
            raise TelemetryError(run_dir, f"not a run directory (no {RUN_JSON}): --replace only replaces a run "
                                          "directory or an empty one")
    rid = run_id or run_dir.name
    if device or interconnect:  # an unknown name fails before anything is read
        devices.resolve(None, None, None, device=device, interconnect=interconnect)
    try:
        with staged_directory(run_dir, replace=replace) as stage:
            sink = RunSink(stage, rid, root=path if path.is_dir() else path.parent, flush_rows=flush_rows)
            with reading(path, _input_error):  # whatever an importer meets fails as bad input (kg.input_errors)
                imp.load(path, sink)
                sink.close()
            if sink.rows == 0:
                looks = describe(path)
                raise ImportFormatError(path, f"no telemetry found for format {name!r}"
                                        + (f": it looks like {looks}" if looks else ""))
            meta = {"run_id": rid, "framework": None, "world_size": len(sink.ranks) or None,
                    "parallel": {}, "steps": {"count": len(sink.steps), "first": sink.steps[0], "last": sink.steps[-1]},
                    **sink.meta,
                    "source": {"format": name, "files": sink.files, **sink.meta.get("source", {})},
                    "environment": sink.meta.get("environment", {}), "imported_with": environment_snapshot()}
            if device or interconnect:
                meta = hardware_overrides(meta, device=device, interconnect=interconnect)
            write_run_json(stage, meta)
    except FileExistsError:  # a concurrent import created run_dir meanwhile
        raise TelemetryError(run_dir, "run directory already exists") from None
    except (OSError, EOFError) as err:
        raise ImportFormatError(path, f"cannot read input: {err}") from err
    return ImportResult(run_dir, rid, name, sink.rows, sink.ranks, sink.steps, sink.metrics, sink.files,
                        list(sink.meta.get("notes", [])))


def hardware_overrides(meta: dict[str, Any], *, device: str | None = None,
                       interconnect: str | None = None) -> dict[str, Any]:
    """run.json's device and link facts with the user's ``device`` / ``interconnect`` taking precedence."""
    out = {k: v for k, v in meta.items() if k not in ("accelerator_model", "interconnect", "interconnect_from")}
    return {**out, **devices.resolve(meta.get("accelerator"), meta.get("world_size"), None, device=device,
                                     interconnect=interconnect)}
