"""Reading a configuration file (or text) into a ``ConfigDoc`` of its framework.

Formats: Megatron-LM launch scripts and argument lists, Megatron YAML (``MODEL_ARGS`` or ``--yaml-cfg``
form), DeepSpeed JSON/YAML, Hugging Face TrainingArguments JSON/YAML (with an optional model config), and
our own YAML (readers/native.py). ``framework="auto"`` tells the framework from the content.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc
from debugtune.engine.prevent.errors import LintInputError
from debugtune.engine.prevent.keys import FrameworkKeys
from debugtune.engine.prevent.readers import deepspeed, hf, megatron, native
from debugtune.engine.prevent.readers.structured import flatten, key_lines, load_json, load_yaml
from debugtune.engine.prevent.schema import infer_version
from debugtune.engine.prevent.vocab import FRAMEWORKS

_YAML_START = re.compile(r"^\s*(framework|MODEL_ARGS|ENV_VARS|language_model|model_parallel)\s*:", re.M)


def read_config(path: str, *, keys_for: Callable[[str], FrameworkKeys], framework: str = "auto",
                env: dict[str, str] | None = None, text: str | None = None, version: str | None = None) -> ConfigDoc:
    """Read one configuration; ``text`` (when given) is used instead of the file's content. A configuration
    that names no version but pins its framework's package (``pip install megatron-core==0.12.0``,
    ``"transformers_version": "4.46.3"``) is linted for that version."""
    if text is None:
        text = _read_text(path)
    doc = _read(path, keys_for=keys_for, framework=framework, env=env, text=text, version=version)
    if version is not None:
        return doc
    if doc.version is None:
        doc.version = pinned_version(text, doc.framework)
    if doc.version is None and doc.framework == "megatron":
        inferred = infer_version(doc, keys_for("megatron"))
        if inferred is not None:
            version, why = inferred
            if doc.ci_model_args and megatron.ci_semantics(version) != megatron.ci_semantics(None):
                doc = _read(path, keys_for=keys_for, framework=framework, env=env, text=text, version=version)
            doc.version = version
            doc.version_inferred = True
            doc.notes.append(why)
    return doc


_PINS = {
    "megatron": re.compile(r"(?:megatron[-_]core|megatron-lm)\s*==\s*v?(\d+\.\d+(?:\.\d+)?)|"
                           r"git\s+checkout\s+(?:core_)?v(\d+\.\d+(?:\.\d+)?)", re.I),
    "deepspeed": re.compile(r"deepspeed\s*==\s*(\d+\.\d+(?:\.\d+)?)", re.I),
    "hf": re.compile(r"transformers\s*==\s*(\d+\.\d+(?:\.\d+)?)|\"transformers_version\"\s*:\s*\"(\d+\.\d+(?:\.\d+)?)",
                     re.I),
}


def pinned_version(text: str, framework: str) -> str | None:
    """The release of ``framework`` the file pins, if it pins one (the last pin wins)."""
    pattern = _PINS.get(framework)
    found = [next(g for g in m.groups() if g) for m in pattern.finditer(text)] if pattern else []
    return found[-1] if found else None


def _read(path: str, *, keys_for: Callable[[str], FrameworkKeys], framework: str,
          env: dict[str, str] | None, text: str, version: str | None = None) -> ConfigDoc:
    env = dict(env or {})
    if framework != "auto" and framework not in FRAMEWORKS:
        raise LintInputError(path, f"unknown framework {framework!r}: use auto, {', '.join(FRAMEWORKS)}")
    kind = _format(path, text)
    if kind == "script":
        if framework not in ("auto", "megatron"):
            raise LintInputError(path, f"a launch script or argument list is read as megatron, not {framework}")
        return megatron.read_script(text, path, keys_for("megatron"), env)
    data, duplicates = load_json(text, path) if kind == "json" else (load_yaml(text, path), [])
    if not isinstance(data, dict):
        raise LintInputError(path, f"expected a mapping at the top of the {kind.upper()} file, "
                                   f"got {type(data).__name__}", 1)
    lines = key_lines(text)

    def again(target: str, framework: str, env: dict[str, str]) -> ConfigDoc:
        return read_config(target, keys_for=keys_for, framework=framework, env=env)

    if native.is_native(data):
        declared = str(data.get("framework"))
        if framework not in ("auto", declared):
            raise LintInputError(path, f"the file declares framework {declared!r}, not {framework!r}",
                                 lines.get("framework"))
        return native.read(data, lines, path, env, keys_for, again)
    fw = framework if framework != "auto" else detect_framework(data, keys_for, path)
    source_kind = "json" if kind == "json" else "yaml"
    if fw == "megatron":
        return megatron.read_yaml(data, lines, path, keys_for("megatron"), env, version)
    if fw == "deepspeed":
        return deepspeed.read(data, lines, path, env, source_kind, duplicates)
    return hf.read(data, lines, path, env, source_kind, duplicates)


def detect_framework(data: dict[str, Any], keys_for: Callable[[str], FrameworkKeys], path: str) -> str:
    """megatron, deepspeed or hf, from markers and from how many keys each framework knows."""
    if "MODEL_ARGS" in data or "language_model" in data or "model_parallel" in data:
        return "megatron"
    if hf.is_model_config(data) or "per_device_train_batch_size" in data or "output_dir" in data:
        return "hf"
    if any(k in data for k in ("train_micro_batch_size_per_gpu", "train_batch_size", "zero_optimization")):
        return "deepspeed"
    flat = [k for k, _ in flatten(data)]
    scores = {fw: sum(keys_for(fw).lookup(k) is not None for k in flat) for fw in FRAMEWORKS}
    best = max(scores.values())
    winners = [fw for fw, s in scores.items() if s == best]
    if best == 0 or len(winners) > 1:
        raise LintInputError(path, "cannot tell the framework of this file; pass --framework megatron|deepspeed|hf")
    return winners[0]


def _read_text(path: str) -> str:
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LintInputError(path, "no such file") from None
    except IsADirectoryError:
        raise LintInputError(path, "is a directory, not a configuration file") from None
    except UnicodeDecodeError as err:
        line = p.read_bytes()[:err.start].count(b"\n") + 1
        raise LintInputError(path, "not a UTF-8 text file", line) from None


def _format(path: str, text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    head = text.lstrip()
    if head.startswith("{"):
        return "json"
    if _YAML_START.search(text):
        return "yaml"
    return "script"
