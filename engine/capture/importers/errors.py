"""The error every importer raises for a malformed input: it names the file and the line and/or field."""

from __future__ import annotations

from pathlib import Path

from debugtune.kg.errors import DebugtuneError


class ImportFormatError(DebugtuneError):
    """A truncated or malformed input file (or an input no importer recognises)."""

    def __init__(self, path: str | Path, message: str, *, line: int | None = None, field: str | None = None):
        self.path, self.line, self.field, self.detail = str(path), line, field, message
        where = self.path if line is None else f"{self.path}:{line}"
        if field is not None:
            where += f" (field {field!r})"
        super().__init__(f"{where}: {message}")
