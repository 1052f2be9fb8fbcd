"""msprobe monitor CSV output (``TrainerMon`` with ``format: csv``).

Files ``{prefix}_{start}-{end}.csv`` in ``<dir>/<time>-rank<r>-<uid>/``; header ``vpp_stage,name,step[,micro_step],
<ops>`` with ops among min, max, norm, mean, zeros (fraction |x| < eps), nans (count); NaN is written "nan".
Prefixes map to metrics per parameter / module (entity = msprobe's name, ``<vpp>:`` prefixed when vpp > 0):

- grad_reduced (else grad_unreduced): norm → grad_norm, max(|min|, |max|) → grad_absmax, zeros → grad_tiny_frac,
  nans → grad_nan, and the global grad_norm (entity '') = sqrt(Σ norm²) per step;
- param_updated (else param_origin): norm → weight_norm;  exp_avg / exp_avg_sq: norm → exp_avg_norm / exp_avg_sq_norm;
- actv: norm → act_norm, zeros → act_zero_frac, nans → act_nan;  actv_grad: norm → act_grad_norm
  (micro steps averaged per step).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import CsvTable, clean, head_text, to_float

_FILE = re.compile(r"^(actv_grad|actv|grad_unreduced|grad_reduced|exp_avg_sq|exp_avg|param_origin|param_updated)"
                   r"_(\d+)-(\d+)\.csv$")
_RANK_DIR = re.compile(r"-rank(\d{1,5})-")
_OPS = {  # prefix → {op: metric}
    "grad": {"norm": "grad_norm", "zeros": "grad_tiny_frac", "nans": "grad_nan"},
    "param": {"norm": "weight_norm"},
    "exp_avg": {"norm": "exp_avg_norm"},
    "exp_avg_sq": {"norm": "exp_avg_sq_norm"},
    "actv": {"norm": "act_norm", "zeros": "act_zero_frac", "nans": "act_nan"},
    "actv_grad": {"norm": "act_grad_norm"},
}


def monitor_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if _FILE.match(path.name) or head_text(path, 200).startswith("vpp_stage,name,step") else []
    return sorted(p for p in path.rglob("*.csv") if _FILE.match(p.name))


def detect(path: Path) -> bool:
    return bool(monitor_files(path))


def _family(name: str) -> tuple[str, int]:
    """(metric family, preference) of a file prefix; the lower preference wins where both exist."""
    m = _FILE.match(name)
    prefix = m.group(1) if m else "grad_reduced"
    return {"grad_reduced": ("grad", 0), "grad_unreduced": ("grad", 1), "param_updated": ("param", 0),
            "param_origin": ("param", 1)}.get(prefix, (prefix, 0))


def _rank(path: Path) -> int:
    for part in reversed(path.parts):
        if m := _RANK_DIR.search(part):
            return int(m.group(1))
    return 0


def _read(path: Path, family: str, acc: dict[tuple[int, str, str], list[float]]) -> None:
    ops = _OPS[family]
    with CsvTable(path) as table:
        i_vpp = table.column("vpp_stage")
        i_name = table.column("name")
        i_step = table.column("step")
        wanted = {op: table.column(op, required=False) for op in ("min", "max", *ops)}
        if not any(wanted[op] is not None for op in ops) and wanted["max"] is None:
            raise ImportFormatError(path, f"none of the statistics {', '.join(ops)} is a column", line=1,
                                    field="norm")
        for line, row in table.rows():
            step = int(to_float(row[i_step], path, line, "step"))
            vpp = clean(row[i_vpp])
            name = clean(row[i_name])
            entity = name if vpp in ("", "0", "-1") else f"{vpp}:{name}"
            values = {op: to_float(row[i], path, line, op, required=False) for op, i in wanted.items() if i is not None}
            for op, metric in ops.items():
                if op in values:
                    acc[(step, metric, entity)].append(values[op])
            if family == "grad" and "min" in values and "max" in values:
                acc[(step, "grad_absmax", entity)].append(max(abs(values["min"]), abs(values["max"])))


def load(path: Path, sink: RunSink) -> None:
    files = monitor_files(path)
    if not files:
        raise ImportFormatError(path, "no msprobe monitor CSV files found")
    chosen: dict[tuple[int, str], int] = {}
    for f in files:
        family, pref = _family(f.name)
        key = (_rank(f), family)
        chosen[key] = min(chosen.get(key, pref), pref)
    for rank in sorted({r for r, _ in chosen}):
        acc: dict[tuple[int, str, str], list[float]] = defaultdict(list)
        for f in files:
            family, pref = _family(f.name)
            if _rank(f) == rank and chosen[(rank, family)] == pref:
                sink.source(f)
                _read(f, family, acc)
        global_sq: dict[int, float] = defaultdict(float)
        for (step, metric, entity), values in sorted(acc.items()):
            value = sum(values) / len(values)  # micro steps of one step → their mean
            sink.add(rank, step, metric, value, entity)
            if metric == "grad_norm":
                global_sq[step] += value * value
        for step, sq in sorted(global_sq.items()):
            sink.add(rank, step, "grad_norm", math.sqrt(sq), "")
    sink.meta.setdefault("source", {})["msprobe_prefixes"] = sorted({m.group(1) for f in files
                                                                      if (m := _FILE.match(f.name))})
