"""Reading text inputs: transparent gzip, CSV with normalised headers and numbers that name file/line/field."""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Literal, cast, overload

from debugtune.engine.capture.importers.errors import ImportFormatError

MISSING = frozenset({"", "n/a", "na", "none", "null", "-", "nan(ind)"})


def open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic."""
    fh = open(path, "rb")  # noqa: SIM115 — returned to the caller
    if fh.read(2) == b"\x1f\x8b":
        fh.close()
        return cast(IO[bytes], gzip.open(path, "rb"))  # a GzipFile reads like a binary file
    fh.seek(0)
    return fh


def open_text(path: Path) -> IO[str]:
    """The file as text (UTF-8, BOM stripped, undecodable bytes replaced), gunzipped when needed."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors="replace", newline="")


def head_text(path: Path, size: int = 4096) -> str:
    """The first ``size`` characters of a (possibly gzipped) file, '' when unreadable."""
    try:
        with open_text(path) as fh:
            return fh.read(size)
    except (OSError, EOFError, gzip.BadGzipFile):
        return ""


def clean(cell: str) -> str:
    """A CSV cell without surrounding blanks and the trailing tab Ascend adds against spreadsheet rounding."""
    return cell.strip().strip("\t").strip()


def to_float(cell: str, path: Path, line: int, field: str, *, required: bool = True) -> float:
    """Parse a number; missing markers ('', 'N/A', ...) give NaN unless ``required``; garbage raises."""
    text = clean(cell)
    if text.lower() in MISSING:
        if required:
            raise ImportFormatError(path, "missing value", line=line, field=field)
        return math.nan
    try:
        return float(text.rstrip("%"))
    except ValueError:
        raise ImportFormatError(path, f"not a number: {text[:40]!r}", line=line, field=field) from None


class CsvTable:
    """A CSV file with a header: column lookup by any of several names, rows with their line numbers."""

    def __init__(self, path: Path, *, delimiter: str = ","):
        self.path = path
        self._fh = open_text(path)
        self._reader = csv.reader(self._fh, delimiter=delimiter)
        try:
            header = next(self._reader)
        except StopIteration:
            self._fh.close()
            raise ImportFormatError(path, "empty file (no CSV header)", line=1) from None
        except csv.Error as err:
            self._fh.close()
            raise ImportFormatError(path, f"malformed CSV: {err}", line=1) from None
        self.header = [clean(h) for h in header]
        self._index = {h.lower(): i for i, h in enumerate(self.header)}

    @overload
    def column(self, *names: str, required: Literal[True] = True) -> int: ...

    @overload
    def column(self, *names: str, required: bool) -> int | None: ...

    def column(self, *names: str, required: bool = True) -> int | None:
        """Index of the first of ``names`` present (case-insensitive); a missing required column raises."""
        for name in names:
            if (i := self._index.get(name.lower())) is not None:
                return i
        if required:
            raise ImportFormatError(self.path, f"required column missing (have: {', '.join(self.header)})", line=1,
                                    field=names[0])
        return None

    def rows(self) -> Iterator[tuple[int, list[str]]]:
        """(line number, cells) of each non-empty row; a row shorter than the header raises."""
        width = len(self.header)
        try:
            for cells in self._reader:
                line = self._reader.line_num
                if not cells or all(not c.strip() for c in cells):
                    continue
                if len(cells) < width:
                    raise ImportFormatError(self.path, f"row has {len(cells)} fields, header has {width}", line=line)
                yield line, cells
        except csv.Error as err:
            raise ImportFormatError(self.path, f"malformed CSV: {err}", line=self._reader.line_num) from None
        except (EOFError, gzip.BadGzipFile) as err:
            raise ImportFormatError(self.path, f"truncated or corrupt file: {err}",
                                    line=self._reader.line_num) from None
        finally:
            self._fh.close()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> CsvTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def first_present(row: Sequence[str], indices: Sequence[int | None]) -> str:
    """The first cell among ``indices`` that is present and not empty ('' if none)."""
    for i in indices:
        if i is not None and i < len(row) and clean(row[i]):
            return row[i]
    return ""
