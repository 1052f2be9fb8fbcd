"""TelemetryWriter: buffers long-form rows in column buffers and writes Parquet parts per rank atomically.

Layout: ``<run_dir>/telemetry/rank=<r>/part-<seq>.parquet`` (hive partitioning on rank). Each part is
written under a hidden temporary name (ignored by Arrow dataset readers) and renamed into place, so a
crash loses at most the rows still in the buffer. Rows of a part are sorted by metric, entity and step so
that Parquet row-group statistics let readers skip what a filter excludes.

The buffer is flushed when it holds ``flush_rows`` rows or, with ``flush_seconds``, when its oldest row
is that old (checked on every add): a live run killed with SIGKILL loses at most the last
``flush_seconds`` of rows (docs/probe.md, "Flushing"). With ``on_error="drop"`` (the probe's choice:
never disturb the training) a write that fails drops the buffer with a counted error and backs off
(1 s, doubling to 60 s) instead of retrying an ever larger buffer; rows arriving meanwhile are counted
as dropped. A directory that cannot be created or written keeps the rows in an in-memory ring instead
(`recent`), with a warning.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from debugtune.engine.telemetry.errors import TelemetryError
from debugtune.engine.telemetry.schema import METRICS, SCHEMA

TELEMETRY_DIR = "telemetry"
ROW_GROUP_ROWS = 8192
_PART = re.compile(r"^part-(\d+)\.parquet$")
_DIMENSIONS = frozenset(METRICS)
_STRING_COLUMNS = ("dimension", "metric", "entity")


def rank_dir(run_dir: str | Path, rank: int) -> Path:
    """The partition directory of ``rank`` inside a run directory."""
    return Path(run_dir) / TELEMETRY_DIR / f"rank={int(rank)}"


class _Vocab:
    """Strings of one column mapped to dense int32 codes (a per-writer dictionary)."""

    __slots__ = ("codes", "words")

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.words: list[str] = []

    def code(self, word: str) -> int:
        code = self.codes.get(word)
        if code is None:
            code = self.codes[word] = len(self.words)
            self.words.append(word)
        return code

    def encode(self, words: Any, n: int) -> np.ndarray:
        """Codes of ``words`` (one string broadcast to ``n`` rows, or a sequence/array of ``n`` strings)."""
        if isinstance(words, str):
            return np.full(n, self.code(words), dtype=np.int32)
        if isinstance(words, pa.DictionaryArray | pa.ChunkedArray | pa.Array):
            arr = words.combine_chunks() if isinstance(words, pa.ChunkedArray) else words
        elif len(words) <= 64:
            return np.fromiter((self.code(str(w)) for w in words), dtype=np.int32, count=len(words))
        else:
            arr = pa.array(np.asarray(words, dtype=object) if isinstance(words, np.ndarray) else words,
                           type=pa.string())
        if len(arr) != n:
            raise ValueError(f"{len(arr)} entities for {n} values")
        if not pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_encode()
        if arr.null_count:
            raise ValueError("entity/metric names must not be null")
        local = np.fromiter((self.code(str(w)) for w in arr.dictionary.to_pylist()), dtype=np.int32,
                            count=len(arr.dictionary))
        codes: np.ndarray = local[arr.indices.to_numpy(zero_copy_only=False)]
        return codes

    def sort_rank(self) -> np.ndarray:
        """For each code, its position in sorted string order."""
        order = np.argsort(np.array(self.words, dtype=object), kind="stable")
        ranks = np.empty(len(order), dtype=np.int64)
        ranks[order] = np.arange(len(order))
        return ranks


class TelemetryWriter:
    """Write the telemetry of one rank of one run. Cheap ``add``; Parquet parts of ``flush_rows`` rows.

    >>> with TelemetryWriter(run_dir, "run-1", rank=0) as w:      # doctest: +SKIP
    ...     w.add(3, "convergence", "loss", "", 2.31)
    """

    def __init__(self, run_dir: str | Path, run_id: str, rank: int = 0, flush_rows: int = 65536, *,
                 flush_seconds: float | None = None, on_error: str = "raise", ring_rows: int = 1_000_000):
        if not run_id or not isinstance(run_id, str):
            raise TelemetryError(run_dir, "run_id must be a non-empty string")
        if int(rank) < 0:
            raise TelemetryError(run_dir, f"rank must be >= 0, got {rank}")
        if on_error not in ("raise", "drop"):
            raise TelemetryError(run_dir, f"on_error is 'raise' or 'drop', not {on_error!r}")
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.rank = int(rank)
        self.flush_rows = max(1, int(flush_rows))
        self.flush_seconds = flush_seconds if flush_seconds and flush_seconds > 0 else None
        self.on_error = on_error
        self.directory = rank_dir(run_dir, rank)
        self._vocab = {c: _Vocab() for c in _STRING_COLUMNS}
        # step, dim, metric, entity, value
        self._rows: tuple[list[Any], list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [], [])
        self._chunks: list[tuple[np.ndarray, ...]] = []
        self._pending = 0
        self._oldest = 0.0  # monotonic time of the oldest buffered row
        self.rows_written = 0
        self.parts: list[Path] = []
        self.closed = False
        self.write_errors = 0
        self.dropped_rows = 0
        self.last_error: str | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self.degraded: str | None = None
        """Why rows go to the in-memory ring instead of the directory (None: they are written)."""
        self._ring: deque[pa.Table] = deque()
        self._ring_rows, self.ring_rows = 0, max(1, int(ring_rows))
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._seq = self._next_seq()
            if on_error == "drop" and not os.access(self.directory, os.W_OK | os.X_OK):
                raise PermissionError(f"{self.directory} is not writable")
        except OSError as err:
            if on_error == "raise":
                raise TelemetryError(self.directory, f"cannot create telemetry directory: {err}") from err
            self._seq = 0
            self._degrade(f"cannot write {self.directory}: {err}")

    # -- adding rows -------------------------------------------------------------------------------
    def add(self, step: int, dimension: str, metric: str, entity: str, value: float) -> None:
        """Buffer one row (``entity`` '' or None = the whole rank)."""
        if self.closed:
            raise TelemetryError(self.directory, "writer is closed")
        if dimension not in _DIMENSIONS:
            raise TelemetryError(self.directory, f"unknown dimension {dimension!r} (one of {sorted(_DIMENSIONS)})")
        v = self._vocab
        rows = self._rows
        rows[0].append(int(step))
        rows[1].append(v["dimension"].code(dimension))
        rows[2].append(v["metric"].code(metric))
        rows[3].append(v["entity"].code(entity or ""))
        rows[4].append(float(value))
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending += 1
        self._maybe_flush()

    def add_many(self, step: int, dimension: str, metric: str, entities: Sequence[str] | np.ndarray,
                 values: Sequence[float] | np.ndarray) -> None:
        """Buffer one row per entity, all of the same step and metric."""
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        self.add_columns(np.full(len(vals), int(step), dtype=np.int64), dimension, metric, entities, vals)

    def add_columns(self, steps: Sequence[int] | np.ndarray, dimension: str | Sequence[str],
                    metric: str | Sequence[str], entities: str | Sequence[str] | np.ndarray,
                    values: Sequence[float] | np.ndarray) -> None:
        """Buffer rows given column-wise: equal-length arrays; a plain string is broadcast to every row."""
        if self.closed:
            raise TelemetryError(self.directory, "writer is closed")
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        n = len(vals)
        stp = np.asarray(steps).reshape(-1)
        if len(stp) != n:
            raise TelemetryError(self.directory, f"{len(stp)} steps for {n} values")
        if n == 0:
            return
        if not np.issubdtype(stp.dtype, np.integer):
            if not np.all(np.isfinite(stp)) or np.any(stp != np.floor(stp)):
                raise TelemetryError(self.directory, "steps must be integers")
        dims = [dimension] if isinstance(dimension, str) else set(dimension)
        unknown = [d for d in dims if d not in _DIMENSIONS]
        if unknown:
            raise TelemetryError(self.directory, f"unknown dimension {unknown[0]!r} (one of {sorted(_DIMENSIONS)})")
        try:
            cols = tuple(self._vocab[c].encode(x, n) for c, x in zip(_STRING_COLUMNS, (dimension, metric, entities),
                                                                      strict=True))
        except (ValueError, TypeError, pa.ArrowException) as err:
            raise TelemetryError(self.directory, f"bad names: {err}") from err
        self._chunks.append((stp.astype(np.int64, copy=False), *cols, vals))
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending += n
        self._maybe_flush()

    # -- writing -------------------------------------------------------------------------------------
    def _maybe_flush(self) -> None:
        due = self._pending >= self.flush_rows or (
            self.flush_seconds is not None and time.monotonic() - self._oldest >= self.flush_seconds)
        if not due:
            return
        if self.on_error == "drop" and self.degraded is None and time.monotonic() < self._retry_at:
            self._drop_buffer()  # backing off after a failed write: count the rows, do not retry them
            return
        self.flush()

    def _drop_buffer(self) -> None:
        self.dropped_rows += self._pending
        self._rows = ([], [], [], [], [])
        self._chunks = []
        self._pending = 0

    def _degrade(self, reason: str) -> None:
        self.degraded = reason
        warnings.warn(f"telemetry of rank {self.rank} is kept in memory only (the last {self.ring_rows} rows): "
                      f"{reason}", RuntimeWarning, stacklevel=3)

    def _to_ring(self, table: pa.Table) -> None:
        self._ring.append(table)
        self._ring_rows += table.num_rows
        while self._ring_rows > self.ring_rows and len(self._ring) > 1:
            gone = self._ring.popleft()
            self._ring_rows -= gone.num_rows
            self.dropped_rows += gone.num_rows

    def recent(self) -> pa.Table:
        """The rows kept in memory while the directory could not be written (`degraded`), oldest first."""
        return pa.concat_tables(self._ring) if self._ring else SCHEMA.empty_table()

    def stats(self) -> dict[str, Any]:
        """Rows written, dropped and why (for run.json's probe report)."""
        return {"rows_written": self.rows_written, "parts": len(self.parts), "write_errors": self.write_errors,
                "dropped_rows": self.dropped_rows, "last_error": self.last_error, "degraded": self.degraded,
                "in_memory_rows": self._ring_rows, "flush_rows": self.flush_rows,
                "flush_seconds": self.flush_seconds}

    def _next_seq(self) -> int:
        seqs = [int(m.group(1)) for p in self.directory.iterdir() if (m := _PART.match(p.name))]
        return max(seqs, default=-1) + 1

    def _columns(self) -> tuple[np.ndarray, ...]:
        parts = list(self._chunks)
        rows = self._rows
        if rows[0]:
            parts.append((np.array(rows[0], dtype=np.int64), *(np.array(r, dtype=np.int32) for r in rows[1:4]),
                          np.array(rows[4], dtype=np.float64)))
        return tuple(np.concatenate(col) for col in zip(*parts, strict=True))

    def _table(self, cols: tuple[np.ndarray, ...]) -> pa.Table:
        step, dim, metric, entity, value = cols
        order = np.lexsort((step, self._vocab["entity"].sort_rank()[entity],
                            self._vocab["metric"].sort_rank()[metric]))
        n = len(step)

        def dictionary(codes: np.ndarray, words: list[str]) -> pa.DictionaryArray:
            return pa.DictionaryArray.from_arrays(pa.array(codes[order], pa.int32()), pa.array(words, pa.string()))

        arrays = {
            "run": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([self.run_id])),
            "rank": pa.array(np.full(n, self.rank, np.int32)),
            "step": pa.array(step[order]),
            "dimension": dictionary(dim, self._vocab["dimension"].words),
            "metric": dictionary(metric, self._vocab["metric"].words),
            "entity": dictionary(entity, self._vocab["entity"].words),
            "value": pa.array(value[order]),
        }
        return pa.table([arrays[name] for name in SCHEMA.names], names=SCHEMA.names)

    def flush(self) -> Path | None:
        """Write the buffered rows as one new part (temp + rename). Returns its path, or None if empty.

        With ``on_error="drop"`` a failed write drops the buffer (counted in `stats`) and backs off.
        """
        if self._pending == 0:
            return None
        table = self._table(self._columns())
        if self.degraded is not None:
            self._to_ring(table)
            self._rows, self._chunks, self._pending = ([], [], [], [], []), [], 0
            return None
        try:
            final = self._write(table)
        except TelemetryError as err:
            if self.on_error == "raise":
                raise
            self.write_errors += 1
            self.last_error = str(err)[:300]
            self._backoff = min(60.0, max(1.0, 2 * self._backoff))
            self._retry_at = time.monotonic() + self._backoff
            self._drop_buffer()
            return None
        self._backoff = 0.0
        self._rows = ([], [], [], [], [])
        self._chunks = []
        self.rows_written += self._pending
        self._pending = 0
        self._seq += 1
        self.parts.append(final)
        return final

    def _write(self, table: pa.Table) -> Path:
        while (final := self.directory / f"part-{self._seq:06d}.parquet").exists():
            self._seq += 1
        tmp = self.directory / f".{final.name}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                # store_schema=False: names read back as plain strings (dictionary-encoded on disk), so
                # row-group min/max statistics on metric/entity are usable for predicate pushdown.
                pq.write_table(table, fh, row_group_size=ROW_GROUP_ROWS, store_schema=False, compression="zstd")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException as err:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            if isinstance(err, OSError | pa.ArrowException):
                raise TelemetryError(final, f"cannot write telemetry part: {err}") from err
            raise
        return final

    def close(self) -> None:
        """Flush what is buffered; later ``add`` calls raise."""
        if not self.closed:
            try:
                self.flush()
            finally:
                self.closed = True

    @property
    def pending_rows(self) -> int:
        """Rows buffered and not yet written."""
        return self._pending

    def __enter__(self) -> TelemetryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
