"""DeepSpeed JSON (or YAML) configurations: nested sections flattened to dotted keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc, KeyIssue
from debugtune.engine.prevent.readers.structured import flatten


def read(data: dict[str, Any], lines: dict[str, int], path: str, env: dict[str, str], source_kind: str,
         duplicates: Sequence[KeyIssue] = ()) -> ConfigDoc:
    """``{"zero_optimization": {"stage": 3}}`` → ``zero_optimization.stage = 3``; duplicates kept as issues."""
    doc = ConfigDoc(path, "deepspeed", source_kind, env=dict(env))
    for key, value in flatten(data):
        doc.set(key, value, lines.get(key) or lines.get(key.rsplit(".", 1)[-1]))
    for d in duplicates:
        doc.issues.append(KeyIssue(d.kind, d.key, d.raw, line=lines.get(d.key)))
    return doc
