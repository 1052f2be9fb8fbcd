"""Errors of the linter: an unreadable configuration names the file and the position."""

from __future__ import annotations

from debugtune.kg.errors import DebugtuneError


class LintError(DebugtuneError):
    """Base class of the linter's errors."""


class LintInputError(LintError):
    """A configuration that cannot be read: names the file, the line (and column) and what is wrong."""

    def __init__(self, path: str, message: str, line: int | None = None, column: int | None = None):
        self.path, self.detail, self.line, self.column = path, message, line, column
        where = path if line is None else f"{path}:{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {message}")
