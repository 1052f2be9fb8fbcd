"""Our own YAML (or JSON): one file that names the framework and version and carries the launch context.

    framework: megatron          # megatron | deepspeed | hf
    version: "0.12.0"            # optional: the framework version to lint for
    env: {CUDA_DEVICE_MAX_CONNECTIONS: "1"}
    launch: {nnodes: 2, nproc_per_node: 8}   # or world_size: 16
    file: ds_config.json         # optional: a native config file, relative to this one
    args: "--use-distributed-optimizer --bf16"   # megatron only: argument words
    settings:                    # keys of the framework (sections nested or dotted); override file and args
      tensor_model_parallel_size: 2
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc
from debugtune.engine.prevent.errors import LintInputError
from debugtune.engine.prevent.keys import FrameworkKeys
from debugtune.engine.prevent.readers import deepspeed, hf, megatron
from debugtune.engine.prevent.readers.shell import Shell
from debugtune.engine.prevent.vocab import FRAMEWORKS

NATIVE_KEYS = ("framework", "version", "env", "launch", "file", "args", "settings")
LAUNCH_KEYS = ("nnodes", "nproc_per_node", "world_size", "node_rank")


def is_native(data: Any) -> bool:
    return isinstance(data, dict) and "framework" in data and set(data) <= set(NATIVE_KEYS) and len(data) > 1


def read(data: dict[str, Any], lines: dict[str, int], path: str, env: dict[str, str],
         keys_for: Callable[[str], FrameworkKeys], read_file: Callable[..., ConfigDoc]) -> ConfigDoc:
    framework = str(data.get("framework"))
    if framework not in FRAMEWORKS:
        raise LintInputError(path, f"framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}",
                             lines.get("framework"))
    env = {**env, **{str(k): _text(v) for k, v in _mapping(data, "env", path, lines).items()}}
    keys = keys_for(framework)
    if data.get("file"):
        target = Path(path).parent / str(data["file"])
        doc = read_file(str(target), framework=framework, env=env)
    else:
        doc = ConfigDoc(path, framework, "yaml", env=dict(env))
    if data.get("args"):
        if framework != "megatron":
            raise LintInputError(path, "args is only for megatron; use settings", lines.get("args"))
        words = Shell(path, env).words(str(data["args"]), lines.get("args", 1))
        part = ConfigDoc(path, framework, "yaml", env=dict(env))
        megatron.parse_args(words, keys, part)
        doc.overlay(part)
    settings = _mapping(data, "settings", path, lines)
    sub = {k[len("settings."):]: v for k, v in lines.items() if k.startswith("settings.")}
    if settings:
        reader = {"megatron": lambda: megatron.read_yaml(settings, sub, path, keys, env),
                  "deepspeed": lambda: deepspeed.read(settings, sub, path, env, "yaml"),
                  "hf": lambda: hf.read(settings, sub, path, env, "yaml")}[framework]
        doc.overlay(reader())
    for key, value in _mapping(data, "launch", path, lines).items():
        if key not in LAUNCH_KEYS:
            raise LintInputError(path, f"launch.{key}: unknown (use {', '.join(LAUNCH_KEYS)})",
                                 lines.get(f"launch.{key}"))
        doc.set(key, value, lines.get(f"launch.{key}"))
    doc.env.update(env)
    doc.path = path
    if data.get("version") is not None:
        doc.version = str(data["version"])
    return doc


def _mapping(data: dict[str, Any], name: str, path: str, lines: dict[str, int]) -> dict[str, Any]:
    value = data.get(name) or {}
    if not isinstance(value, dict):
        raise LintInputError(path, f"{name} must be a mapping", lines.get(name))
    return value


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
