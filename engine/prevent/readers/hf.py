"""Hugging Face configurations: a TrainingArguments JSON (or YAML), optionally with the model's config
under ``model_config`` (keys become ``model.<name>``); a model ``config.json`` on its own is read the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc, KeyIssue
from debugtune.engine.prevent.readers.structured import flatten

MODEL_SECTIONS = ("model_config", "model")


def is_model_config(data: dict[str, Any]) -> bool:
    """A transformers model config.json (it names its model type and architectures)."""
    return "model_type" in data and "architectures" in data


def read(data: dict[str, Any], lines: dict[str, int], path: str, env: dict[str, str], source_kind: str,
         duplicates: Sequence[KeyIssue] = ()) -> ConfigDoc:
    doc = ConfigDoc(path, "hf", source_kind, env=dict(env))
    if is_model_config(data):
        data = {"model": data}
    for key, value in data.items():
        if value is None:
            continue
        if key in MODEL_SECTIONS and isinstance(value, dict):
            for sub, v in flatten(value, "model."):
                doc.set(sub, v, lines.get(f"{key}.{sub[len('model.'):]}") or lines.get(key))
            continue
        doc.set(key, value, lines.get(key))
    for d in duplicates:
        doc.issues.append(KeyIssue(d.kind, d.key, d.raw, line=lines.get(d.key)))
    return doc
