"""``run.json``: the metadata of one run (framework, world size, parallel sizes, source, environment)."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from debugtune.engine.telemetry.atomic import atomic_write_bytes
from debugtune.engine.telemetry.errors import TelemetryError

RUN_JSON = "run.json"
SCHEMA_VERSION = 1

# Distributions whose versions matter for a diagnosis (reported only when installed).
_PACKAGES = (
    "debugtune", "torch", "torch_npu", "numpy", "pyarrow", "transformers", "accelerate", "deepspeed",
    "megatron-core", "mindspeed", "lightning", "pytorch-lightning", "apex", "triton", "nvidia-nccl-cu12",
    "nvidia-nccl-cu13", "mindstudio-probe", "tensorboard", "jax", "flash-attn",
)


def _jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as strings ('nan', 'inf') so run.json stays strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj


def write_run_json(run_dir: str | Path, meta: dict[str, Any]) -> Path:
    """Write ``<run_dir>/run.json`` atomically; adds ``schema_version`` when absent. Returns the path."""
    if not isinstance(meta, dict):
        raise TelemetryError(Path(run_dir) / RUN_JSON, f"run metadata must be a dict, got {type(meta).__name__}")
    body = {"schema_version": SCHEMA_VERSION, **meta}
    path = Path(run_dir) / RUN_JSON
    try:
        text = json.dumps(_jsonable(body), indent=2, sort_keys=False, default=str, allow_nan=False)
        atomic_write_bytes(path, (text + "\n").encode())
    except OSError as err:
        raise TelemetryError(path, f"cannot write run metadata: {err}") from err
    return path


def read_run_json(run_dir: str | Path) -> dict[str, Any]:
    """The contents of ``<run_dir>/run.json``; a missing or malformed file raises TelemetryError."""
    path = Path(run_dir) / RUN_JSON
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TelemetryError(path, "run.json not found (not a debugtune run directory?)") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TelemetryError(path, f"cannot read run metadata: {err}") from err
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as err:
        raise TelemetryError(f"{path}:{err.lineno}:{err.colno}", f"malformed JSON: {err.msg}") from None
    if not isinstance(meta, dict):
        raise TelemetryError(path, f"run.json must hold a JSON object, found {type(meta).__name__}")
    return meta


def update_run_json(run_dir: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into run.json (created when absent) atomically; returns the new contents."""
    path = Path(run_dir) / RUN_JSON
    meta = read_run_json(run_dir) if path.exists() else {}
    meta.update(fields)
    write_run_json(run_dir, meta)
    return meta


def _device_kind() -> dict[str, Any]:
    """The accelerator kind without importing torch: from torch when already imported, else device files."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if hasattr(torch, "npu") and torch.npu.is_available():
                return {"device_kind": "npu", "device_count": int(torch.npu.device_count())}
            if torch.cuda.is_available():
                return {"device_kind": "cuda", "device_count": int(torch.cuda.device_count()),
                        "device_name": torch.cuda.get_device_name(0), "cuda": torch.version.cuda}
        except Exception:  # noqa: BLE001 — a broken driver must not stop a run from being recorded
            pass
        return {"device_kind": "cpu"}
    dev = Path("/dev")
    for kind, pattern in (("cuda", "nvidia[0-9]*"), ("npu", "davinci[0-9]*")):
        found = sorted(dev.glob(pattern)) if dev.is_dir() else []
        if found:
            return {"device_kind": kind, "device_count": len(found)}
    return {"device_kind": "cpu"}


def environment_snapshot() -> dict[str, Any]:
    """Versions and machine kind of this process: no paths, host names or user names."""
    packages = {}
    for name in _PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine()},
        "packages": packages,
        "cpu_count": os.cpu_count(),
        **_device_kind(),
    }
