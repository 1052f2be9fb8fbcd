"""JSON-lines metric logs: one JSON object per line with a step key (``step``, ``global_step``, ``iteration``…).

Every numeric field becomes a metric (names mapped by :mod:`names`); ``rank`` in a record sets its rank.
HF Trainer ``trainer_state.json`` (``log_history``) is read too. A line that is not a JSON object raises
with its line number; NaN/Infinity values are data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.names import is_step_key, metric_for
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import head_text, open_text

_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".json", ".log")


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if path.name == "trainer_state.json":
        try:
            with open_text(path) as fh:
                state = json.load(fh)
        except json.JSONDecodeError as err:
            raise ImportFormatError(path, f"malformed JSON: {err.msg}", line=err.lineno) from None
        history = state.get("log_history") if isinstance(state, dict) else None
        if not isinstance(history, list):
            raise ImportFormatError(path, "no 'log_history' list", field="log_history")
        return [(i + 1, rec) for i, rec in enumerate(history) if isinstance(rec, dict)]
    out = []
    with open_text(path) as fh:
        try:
            for line_no, line in enumerate(fh, 1):
                text = line.strip()
                if not text:
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as err:
                    raise ImportFormatError(path, f"not a JSON object: {err.msg}", line=line_no) from None
                if not isinstance(rec, dict):
                    raise ImportFormatError(path, f"expected a JSON object, found {type(rec).__name__}", line=line_no)
                out.append((line_no, rec))
        except (EOFError, OSError) as err:
            raise ImportFormatError(path, f"truncated or unreadable: {err}") from None
    return out


def _step_of(rec: dict[str, Any]) -> Any:
    for key, value in rec.items():
        if is_step_key(key):
            return key, value
    return None, None


def detect(path: Path) -> bool:
    if not path.is_file() or not path.name.lower().endswith(_SUFFIXES):
        return False
    if path.name == "trainer_state.json":
        return True
    first = head_text(path, 4096).lstrip().split("\n", 1)[0]
    try:
        rec = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(rec, dict) and _step_of(rec)[0] is not None


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    last_step = -1
    for line_no, rec in _records(path):
        key, step = _step_of(rec)
        if key is None:
            step = last_step + 1 if last_step >= 0 else 0
        elif not isinstance(step, int | float) or isinstance(step, bool) or not math.isfinite(step):
            raise ImportFormatError(path, f"step is not a number: {step!r}", line=line_no, field=key)
        step = int(step)
        last_step = step
        rank = rec.get("rank", 0)
        rank = int(rank) if isinstance(rank, int | float) and not isinstance(rank, bool) else 0
        for name, value in rec.items():
            if name == key or name == "rank" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            mapped = metric_for(name)
            if mapped is not None:
                sink.add(rank, step, mapped[0], float(value) * mapped[1])
