"""Megatron-LM text logs: the per-interval line and the validation line.

``[...] iteration      100/  500000 | consumed samples: 51200 | elapsed time per iteration (ms): 1234.5 |
learning rate: 1.500000E-04 | global batch size: 512 | lm loss: 6.543210E+00 | loss scale: 65536.0 |
grad norm: 1.234 | number of skipped iterations: 0 | number of nan iterations: 0 |``
and `` validation loss at iteration 100 | lm loss value: 5.432100E+00 | lm loss PPL: 2.28E+02 |``.
Fields map to metrics through :mod:`names`; a field of a known metric whose value is not a number raises with the
line number and field name (``nan``/``inf`` are numbers: data).
"""

from __future__ import annotations

import re
from pathlib import Path

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.names import metric_for
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import head_text, open_text

_TRAIN = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
_VALID = re.compile(r"validation loss at iteration\s+(\d+)\s*(?:on [\w ]+ set)?\s*\|(.*)$")
_FIELD = re.compile(r"^\s*([^:|]+?)\s*:\s*(\S+)\s*$")
_SKIP = {"consumed samples", "consumed tokens", "global batch size"}
_KNOWN_FIELDS = {"lm loss", "learning rate", "grad norm", "loss scale", "params norm",
                 "elapsed time per iteration (ms)", "load_balancing_loss", "z_loss", "lm loss value"}


def detect(path: Path) -> bool:
    if not path.is_file():
        return False
    head = head_text(path, 1 << 16)
    return bool(re.search(r"\biteration\s+\d+\s*/\s*\d+\s*\|", head))


def _fields(text: str, path: Path, line_no: int) -> list[tuple[str, str, float | None]]:
    out = []
    for part in text.split("|"):
        m = _FIELD.match(part)
        if not m:
            continue
        key, raw = m.group(1).strip(), m.group(2)
        try:
            value: float | None = float(raw)
        except ValueError:
            if key.lower() in _KNOWN_FIELDS:
                raise ImportFormatError(path, f"not a number: {raw!r}", line=line_no, field=key) from None
            value = None
        out.append((key, raw, value))
    return out


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    total = None
    try:
        with open_text(path) as fh:
            for line_no, line in enumerate(fh, 1):
                if (m := _TRAIN.search(line)) is not None:
                    step, total = int(m.group(1)), int(m.group(2))
                elif (m := _VALID.search(line)) is not None:
                    step = int(m.group(1))
                else:
                    continue
                for key, _, value in _fields(m.group(m.lastindex), path, line_no):
                    if value is None or key.lower() in _SKIP or key.lower().endswith("ppl"):
                        continue
                    if (mapped := metric_for(key)) is not None:
                        sink.add(0, step, mapped[0], value * mapped[1])
    except (EOFError, OSError) as err:
        raise ImportFormatError(path, f"truncated or unreadable: {err}") from None
    sink.meta.update({"framework": "megatron", "train_iters": total})
