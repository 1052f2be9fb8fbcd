"""Megatron-LM text logs (and MindSpeed's, which print the same lines): the argument dump, the per-interval
training line, the timers after it and the validation line.

The training line (``training_log`` in ``megatron/training/training.py``)::

    [2024-04-06 02:59:36] iteration       43/     100 | consumed samples:         5504 | elapsed time per
    iteration (ms): 5444.9 | throughput per GPU (TFLOP/s/GPU): 239.8 | learning rate: 8.600000E-06 | global
    batch size:   128 | lm loss: 1.825991E+00 | load_balancing_loss: 1.019746E+00 | loss scale: 1.0 |
    grad norm: 1.426 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |

(the MoE losses ``load_balancing_loss``, ``seq_load_balancing_loss``, ``global_load_balancing_loss`` and
``z_loss`` print as losses; other MoE tracker metrics as ``name: 1.23``; per-layer values as
``<name>_layer_<i>`` where a fork prints them), then with ``--timing-log-level`` ≥ 1 the timers
``(min, max) time across ranks (ms):`` / ``    forward-backward ......: (1234.56, 1240.12)``, and
`` validation loss at iteration 100 | lm loss value: 5.432100E+00 | lm loss PPL: 2.28E+02 |``.

Fields map to metrics through :mod:`names` (and the table below for fields only Megatron prints); the
argument dump goes to run.json (:mod:`megatron_args`). A field of a known metric whose value is not a number
raises with the line number and field name (``nan``/``inf`` are numbers: data).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from debugtune.engine.capture.importers import megatron_args as margs
from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.names import metric_for
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import head_text, open_text

_TRAIN = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$")
_VALID = re.compile(r"validation loss at iteration\s+(\d+)\s*(?:on [\w ]+ set)?\s*\|(.*)$")
_FIELD = re.compile(r"^\s*([^:|]+?)\s*:\s*(\S+)\s*$")
_LAYER = re.compile(r"^(.+?)_layer_(\d+)$")
_TIMER_HEAD = re.compile(r"(?:\(min, max\)|max) time across ranks \(ms\):\s*$")
_TIMER = re.compile(r"^(?:.*?\]:)?\s+([\w\-]+) \.*:\s*\(?\s*([\d.]+)(?:\s*,\s*([\d.]+))?\s*\)?\s*$")
_SKIP = {"consumed samples", "consumed tokens", "global batch size", "skipped samples"}
_KNOWN_FIELDS = {"lm loss", "learning rate", "grad norm", "loss scale", "params norm",
                 "elapsed time per iteration (ms)", "load_balancing_loss", "z_loss", "lm loss value"}
# fields only Megatron prints → (metric, dimension)
_MEGATRON_FIELDS = {
    "throughput per gpu (tflop/s/gpu)": ("tflops_per_device", "hardware"),
    "power per gpu (w/gpu)": ("power_w", "hardware"),
    "energy per gpu (j/iter/gpu)": ("energy_j", "hardware"),
    "num zeros": ("grad_zeros", "gradient"),
    "seq_load_balancing_loss": ("aux_loss", "convergence"),
    "global_load_balancing_loss": ("global_aux_loss", "convergence"),
}
# timers (max over ranks, ms per iteration) → metric; several timers of one metric add up
_TIMERS = {
    "batch-generator": "dataloader_wait_ms", "forward-compute": "compute_ms", "backward-compute": "compute_ms",
    "all-grads-sync": "comm_ms", "params-all-gather": "comm_ms", "layernorm-grads-all-reduce": "comm_ms",
    "embedding-grads-all-reduce": "comm_ms", "optimizer": "optimizer_ms", "forward-backward": "forward_backward_ms",
}
_P2P = re.compile(r"^(forward|backward)(-backward)?-(send|recv)")  # pipeline send/recv timers → comm_ms


def detect(path: Path) -> bool:
    if not path.is_file():
        return False
    head = head_text(path, 1 << 16)
    if re.search(r"\biteration\s+\d+\s*/\s*\d+\s*\|", head):
        return True
    return bool(re.search(r"-{3,}\s*arguments\s*-{3,}", head) and "tensor_model_parallel_size" in head)


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


def _add_field(sink: RunSink, step: int, key: str, value: float) -> None:
    low = key.lower()
    entity = ""
    if (layer := _LAYER.match(low)) is not None:  # per-layer MoE metric: load_balancing_loss_layer_3
        low, entity = layer.group(1), f"layers.{layer.group(2)}"
    if low in _MEGATRON_FIELDS:
        metric, dim = _MEGATRON_FIELDS[low]
        sink.add(0, step, metric, value, entity, dimension=dim)
    elif (mapped := metric_for(low)) is not None:
        sink.add(0, step, mapped[0], value * mapped[1], entity)


class _Timers:
    """Timer blocks after a training line: summed per metric, written at the iteration they follow."""

    def __init__(self, sink: RunSink) -> None:
        self.sink = sink
        self.step: int | None = None
        self.values: dict[str, float] = {}

    def start(self, step: int | None) -> None:
        self.flush()
        self.step = step

    def add(self, name: str, value: float) -> None:
        metric = _TIMERS.get(name) or ("comm_ms" if _P2P.match(name) else None)
        if metric is not None and self.step is not None:
            self.values[metric] = self.values.get(metric, 0.0) + value

    def flush(self) -> None:
        for metric, value in self.values.items():  # values are kept only with a step (add)
            if self.step is not None:
                self.sink.add(0, self.step, metric, value, dimension="communication")
        self.values = {}


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    total, last_step = None, None
    args: dict[str, Any] = {}
    world: dict[str, int] = {}
    params: dict[str, int] = {}
    billions = None
    in_args = in_timers = False
    timers = _Timers(sink)
    try:
        with open_text(path) as fh:
            for line_no, raw in enumerate(fh, 1):
                line = raw.rstrip("\n")
                if in_args:
                    if margs.ARGS_END.search(line):
                        in_args = False
                    elif (a := margs.ARG.match(line)) is not None:
                        args[a.group(1)] = margs.parse_value(a.group(2))
                    continue
                if margs.ARGS_START.search(line):
                    in_args = True
                    continue
                if in_timers:
                    if (t := _TIMER.match(line)) is not None:
                        timers.add(t.group(1), float(t.group(3) or t.group(2)))  # the max over ranks
                        continue
                    in_timers = False
                if _TIMER_HEAD.search(line):
                    in_timers = True
                    timers.start(last_step)
                    continue
                if (m := _TRAIN.search(line)) is not None:
                    step, total = int(m.group(1)), int(m.group(2))
                    last_step = step
                elif (m := _VALID.search(line)) is not None:
                    step = int(m.group(1))
                else:
                    if "using world size" in line:
                        world = margs.world_line(line)
                    elif (p := margs.PARAMS.search(line)) is not None:
                        params[f"({p.group(2).replace(' ', '')})"] = int(p.group(3))
                    elif (b := margs.TOTAL_BILLIONS.search(line)) is not None:
                        billions = float(b.group(1))
                    continue
                for key, _, value in _fields(m.group(m.lastindex or 0), path, line_no):
                    if value is None or key.lower() in _SKIP or key.lower().endswith("ppl"):
                        continue
                    _add_field(sink, step, key, value)
    except (EOFError, OSError) as err:
        raise ImportFormatError(path, f"truncated or unreadable: {err}") from None
    timers.flush()
    meta = margs.run_meta({**world, **args}, params, billions)
    sink.meta.update({"framework": "megatron", "train_iters": total or args.get("train_iters"), **meta})
