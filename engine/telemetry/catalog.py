"""What a run's telemetry holds, from the Parquet footers: per part, the rows, step range and rank of every
(metric, entity, dimension) it records.

Reading the rows of a 300-million-row run to learn which metrics it has would cost as much as the diagnosis.
The writer sorts every part by metric, entity and step, so most row groups hold one metric and one entity, and
their column statistics (min = max) say so; only a row group where a metric or an entity changes is read, and
only its name and step columns. Parts are immutable once written (temp file + rename), so a catalog is updated by
reading the new parts only (``previous``), which is what watching a live run needs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from debugtune.engine.telemetry.errors import TelemetryError
from debugtune.engine.telemetry.reader import check_part_schema
from debugtune.engine.telemetry.writer import TELEMETRY_DIR

_RANK_DIR = re.compile(r"^rank=(\d+)$")
_NAMES = ("metric", "entity", "dimension")


@dataclass(frozen=True)
class Part:
    """One Parquet part: where it is, whose rank, and what it records (one row per (metric, entity, dimension))."""

    path: str
    rank: int
    size: int
    mtime_ns: int
    keys: tuple[tuple[str, str, str], ...]
    rows: np.ndarray
    step_min: np.ndarray
    step_max: np.ndarray


@dataclass(frozen=True)
class Catalog:
    """Every part of a run's telemetry (sorted by rank, then name), and the flat entries of all of them."""

    run_dir: Path
    parts: tuple[Part, ...]

    @property
    def files(self) -> list[str]:
        return [p.path for p in self.parts]

    @property
    def rows(self) -> int:
        return int(sum(int(p.rows.sum()) for p in self.parts))

    def entries(self) -> dict[str, np.ndarray]:
        """Columns ``metric``, ``entity``, ``dimension`` (object arrays), ``rank``, ``rows``, ``step_min``,
        ``step_max``: one entry per part and (metric, entity, dimension)."""
        keys = [k for p in self.parts for k in p.keys]
        out: dict[str, np.ndarray] = {
            name: np.array([k[i] for k in keys], dtype=object) for i, name in enumerate(_NAMES)}
        out["rank"] = np.array([p.rank for p in self.parts for _ in p.keys], dtype=np.int64)
        for col in ("rows", "step_min", "step_max"):
            arrays = [getattr(p, col) for p in self.parts]
            out[col] = np.concatenate(arrays).astype(np.int64) if arrays else np.zeros(0, dtype=np.int64)
        return out


def _part_files(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / TELEMETRY_DIR
    if not root.is_dir():
        raise TelemetryError(root, "telemetry directory not found")
    out = []
    for sub in root.iterdir():
        m = _RANK_DIR.match(sub.name)
        if not m or not sub.is_dir():
            continue
        out += [(int(m.group(1)), f) for f in sub.iterdir() if f.suffix == ".parquet" and not f.name.startswith(".")]
    return sorted(out, key=lambda x: (x[0], x[1].name))


def _uniform(md: Any, rg: int, cols: dict[str, int]) -> tuple[tuple[str, str, str], int, int] | None:
    """(key, first step, last step) of a row group that holds one metric, entity and dimension, else None."""
    key = []
    group = md.row_group(rg)
    for name in _NAMES:
        st = group.column(cols[name]).statistics
        if st is None or not st.has_min_max or st.min != st.max:
            return None
        key.append(st.min.decode() if isinstance(st.min, bytes) else str(st.min))
    st = group.column(cols["step"]).statistics
    if st is None or not st.has_min_max:
        return None
    return (key[0], key[1], key[2]), int(st.min), int(st.max)


def read_part(path: Path, rank: int) -> Part:
    """The catalog entry of one part; TelemetryError naming it when it is corrupt or of the wrong schema."""
    try:
        stat = path.stat()
        pf = pq.ParquetFile(path)
        check_part_schema(str(path), pf.schema_arrow)
        md = pf.metadata
        cols = {md.schema.column(i).name: i for i in range(md.num_columns)}
        acc: dict[tuple[str, str, str], list[int]] = {}

        def add(key: tuple[str, str, str], rows: int, lo: int, hi: int) -> None:
            entry = acc.setdefault(key, [0, lo, hi])
            entry[0] += rows
            entry[1], entry[2] = min(entry[1], lo), max(entry[2], hi)

        mixed = []
        for rg in range(md.num_row_groups):
            found = _uniform(md, rg, cols)
            if found is None:
                mixed.append(rg)
            else:
                add(found[0], md.row_group(rg).num_rows, found[1], found[2])
        if mixed:
            table = pf.read_row_groups(mixed, columns=[*_NAMES, "step"])
            table = pa.table({n: pc.cast(table.column(n), pa.string()) for n in _NAMES} | {"step": table["step"]})
            agg = table.group_by(list(_NAMES)).aggregate([("step", "count"), ("step", "min"), ("step", "max")])
            for m, e, d, n, lo, hi in zip(*(agg.column(c).to_pylist() for c in (*_NAMES, "step_count", "step_min",
                                                                              "step_max")), strict=True):
                add((m, e or "", d), int(n), int(lo), int(hi))
    except TelemetryError:
        raise
    except (pa.ArrowException, OSError) as err:
        raise TelemetryError(str(path), f"corrupt Parquet part: {err}") from None
    keys = tuple(sorted(acc))
    def col(i: int) -> np.ndarray:
        return np.array([acc[k][i] for k in keys], dtype=np.int64)

    return Part(str(path), rank, stat.st_size, stat.st_mtime_ns, keys, col(0), col(1), col(2))


def read_catalog(run_dir: str | Path, previous: Catalog | None = None) -> Catalog:
    """The catalog of a run's telemetry; parts of ``previous`` whose size and modification time are unchanged are
    not read again."""
    run_dir = Path(run_dir)
    known = {p.path: p for p in previous.parts} if previous is not None else {}
    parts = []
    for rank, path in _part_files(run_dir):
        old = known.get(str(path))
        if old is not None:
            try:
                st = path.stat()
            except OSError:
                continue  # gone since it was listed
            if (st.st_size, st.st_mtime_ns) == (old.size, old.mtime_ns):
                parts.append(old)
                continue
        parts.append(read_part(path, rank))
    return Catalog(run_dir, tuple(parts))


def new_parts(catalog: Catalog, previous: Catalog | None) -> list[Part]:
    """The parts of ``catalog`` that ``previous`` did not have (all of them without one)."""
    seen: Iterable[str] = () if previous is None else (p.path for p in previous.parts)
    old = set(seen)
    return [p for p in catalog.parts if p.path not in old]


def count_rows(run_dir: str | Path) -> int:
    """Telemetry rows of a run from the Parquet footers alone (to choose how to read it)."""
    total = 0
    for _, path in _part_files(Path(run_dir)):
        try:
            total += pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError) as err:
            raise TelemetryError(str(path), f"corrupt Parquet part: {err}") from None
    return total

