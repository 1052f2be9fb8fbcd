"""CSV metric logs with a step column (``step``, ``global_step``, ``iteration``…; Lightning's CSVLogger
``metrics.csv``, exported TensorBoard scalars ``Wall time,Step,Value``).

Every other numeric column becomes a metric (names mapped by :mod:`names`); empty cells are skipped (loggers
leave them blank for metrics not logged at that step); non-numeric text in a metric column raises with the
line and column.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.names import is_step_key, metric_for
from debugtune.engine.capture.importers.sink import RunSink
from debugtune.engine.capture.importers.textio import MISSING, CsvTable, clean, head_text, to_float

_TEXT_COLUMNS = {"wall time", "wall_time", "timestamp", "time", "date", "rank", "name", "tag"}


def detect(path: Path) -> bool:
    if not path.is_file() or not re.search(r"\.csv(\.gz)?$", path.name.lower()):
        return False
    header = head_text(path, 4096).split("\n", 1)[0]
    return any(is_step_key(h.strip().strip('"')) for h in header.split(","))


def load(path: Path, sink: RunSink) -> None:
    sink.source(path)
    with CsvTable(path) as table:
        i_step = next((i for i, h in enumerate(table.header) if is_step_key(h)), None)
        if i_step is None:
            raise ImportFormatError(path, "no step column (step, global_step, iteration)", line=1, field="step")
        i_rank = table.column("rank", required=False)
        value_only = [h.lower() for h in table.header] in (["wall time", "step", "value"], ["step", "value"])
        name = path.name.rsplit(".csv", 1)[0]
        cols = []
        for i, header in enumerate(table.header):
            if i in (i_step, i_rank) or header.lower() in _TEXT_COLUMNS:
                continue
            mapped = metric_for(name if value_only else header)
            if mapped is not None:
                cols.append((i, header, *mapped))
        for line, row in table.rows():
            step_value = to_float(row[i_step], path, line, table.header[i_step])
            if not math.isfinite(step_value):
                raise ImportFormatError(path, "step is not finite", line=line, field=table.header[i_step])
            rank = int(to_float(row[i_rank], path, line, "rank")) if i_rank is not None else 0
            for i, header, metric, scale in cols:
                if clean(row[i]).lower() in MISSING:
                    continue
                sink.add(rank, int(step_value), metric, to_float(row[i], path, line, header) * scale)
