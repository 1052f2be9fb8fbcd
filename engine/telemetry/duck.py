"""A run's telemetry in DuckDB: the Parquet parts queried in place, filters and aggregations pushed down.

DuckDB streams the parts (only the row groups whose statistics can match a filter are read), aggregates in its
own threads and spills to a temporary directory past its memory limit, so what reaches Python is a window of
rows or an aggregate, never the run. Files are listed in rank order and insertion order is preserved, so the rows
of one rank come together and in step order (``engine.diagnose.frame.pivot`` then reshapes instead of scattering).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from debugtune.engine.telemetry.errors import TelemetryError


@dataclass(frozen=True)
class DuckSpec:
    """What a DuckDB connection to one run needs (picklable: a Ray task opens its own)."""

    run_dir: str
    files: tuple[str, ...]
    threads: int = 0
    memory_mb: int = 768


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _in(column: str, values: Sequence[Any]) -> str:
    if len(values) == 1:
        return f"{column} = {_literal(values[0])}"
    return f"{column} IN ({', '.join(_literal(v) for v in values)})"


def _literal(v: Any) -> str:
    return str(int(v)) if isinstance(v, int) else _quote(str(v))


@dataclass(frozen=True)
class Where:
    """A row filter: stored metric names, one entity (None: all), dimensions (None: all), a half-open step range,
    ranks."""

    metrics: tuple[str, ...]
    entity: str | None = None
    dimensions: tuple[str, ...] | None = None
    steps: tuple[int, int] | None = None
    ranks: tuple[int, ...] | None = None

    def sql(self) -> str:
        parts = [_in("metric", self.metrics)]
        if self.entity is not None:
            parts.append(f"entity = {_quote(self.entity)}")
        if self.dimensions is not None:
            parts.append(_in("dimension", self.dimensions))
        if self.steps is not None:
            parts.append(f"step >= {int(self.steps[0])} AND step < {int(self.steps[1])}")
        if self.ranks is not None:
            parts.append(_in("rank", [int(r) for r in self.ranks]))
        return " AND ".join(parts)


class DuckSource:
    """One DuckDB connection over a run's parts (view ``t``). Close it (or use ``with``) to drop its spill
    directory."""

    def __init__(self, spec: DuckSpec):
        import duckdb  # not at import: only the out-of-core path needs it

        self.spec = spec
        # DuckDB creates its spill directory on the first spill only: a name, not a folder, so that a source never
        # closed (a Ray worker killed at shutdown) leaves nothing behind unless it spilled
        self._tmp = os.path.join(tempfile.gettempdir(), f"debugtune-duckdb-{os.getpid()}-{id(self):x}")
        try:
            self.con = duckdb.connect(config={
                "threads": spec.threads or (os.cpu_count() or 1), "memory_limit": f"{spec.memory_mb}MB",
                "temp_directory": self._tmp, "preserve_insertion_order": True})
            self.con.execute("SET parquet_metadata_cache = true")
            files = ", ".join(_quote(f) for f in spec.files)
            self.con.execute(f"CREATE VIEW t AS SELECT rank, step, dimension, metric, entity, value FROM "
                             f"read_parquet([{files}], hive_partitioning = true, hive_types = {{'rank': INTEGER}})")
        except Exception as err:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise self._error(err) from None

    def _error(self, err: Exception) -> TelemetryError:
        text = str(err)
        where = next((f for f in self.spec.files if f in text), self.spec.run_dir)
        return TelemetryError(where, f"cannot read telemetry: {text.splitlines()[0] if text else err}")

    def query(self, sql: str) -> pa.Table:
        """The result of ``sql`` (over view ``t``) as an Arrow table; errors name the part when DuckDB does."""
        import duckdb

        try:
            table: pa.Table = self.con.sql(sql).to_arrow_table()
            return table
        except duckdb.Error as err:
            raise self._error(err) from None

    def batches(self, where: Where, columns: Iterable[str] = ("rank", "step", "value"),
                rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """The rows matching ``where``, streamed in record batches (a window never sits in Arrow whole)."""
        import duckdb

        try:
            reader = self.con.sql(f"SELECT {', '.join(columns)} FROM t WHERE {where.sql()}").to_arrow_reader(rows)
            yield from reader
        except duckdb.Error as err:
            raise self._error(err) from None

    def rows(self, where: Where, columns: Iterable[str] = ("rank", "step", "value")) -> pa.Table:
        """The rows matching ``where`` (rank-major, step order within a part)."""
        return self.query(f"SELECT {', '.join(columns)} FROM t WHERE {where.sql()}")

    def by_step(self, where: Where, keys: Sequence[str], value: str) -> pa.Table:
        """``value`` (an aggregate expression of ``value``) per ``keys`` + step, ordered by them."""
        group = ", ".join([*keys, "step"])
        return self.query(f"SELECT {group}, {value} AS value FROM t WHERE {where.sql()} GROUP BY {group} "
                          f"ORDER BY {group}")

    def cursor(self) -> DuckSource:
        """A second handle on the same database, for another thread (a DuckDB connection runs one query at a
        time); closing it leaves this one open."""
        other = object.__new__(DuckSource)
        other.spec, other._tmp, other.con = self.spec, "", self.con.cursor()
        return other

    def close(self) -> None:
        try:
            self.con.close()
        finally:
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> DuckSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
