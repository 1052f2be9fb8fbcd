"""What Python's parsers raise on hostile input, turned into the project's one-line error (docs/import.md, "Errors").

Every reader of outside input (importers, lint readers, packages) runs inside `reading`, so a reader
that meets what it did not expect (nesting deeper than the recursion limit, a step of ``1e20`` or
``inf``, an integer of 5,000 digits, a corrupt gzip or zip stream, bytes that are not UTF-8) fails
like any other bad input: a `DebugtuneError` naming the file, the line and the field the reader was
at (taken from its ``path``/``line``/``field`` variables where it keeps them), never a traceback.
"""

from __future__ import annotations

import gzip
import lzma
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from types import TracebackType

from debugtune.kg.errors import DebugtuneError

_COMPRESSION = (zlib.error, gzip.BadGzipFile, EOFError, lzma.LZMAError, zipfile.BadZipFile)
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def failure_message(err: BaseException) -> str | None:
    """What ``err`` says about the input, or None when it is not an input failure (it is re-raised)."""
    text = str(err)
    if isinstance(err, RecursionError):
        return "nested too deeply to read"
    if isinstance(err, MemoryError):
        return "too large to read into memory"
    if isinstance(err, OverflowError):
        return f"a number out of range ({text})"
    if isinstance(err, ValueError) and "integer string conversion" in text:
        return "an integer with more than 4,300 digits"
    if isinstance(err, ValueError) and "NaN to integer" in text:
        return "NaN where a whole number is needed"
    if isinstance(err, _COMPRESSION):
        return f"corrupt or truncated compressed data ({type(err).__name__}: {text})"
    if isinstance(err, UnicodeError):
        return f"not valid UTF-8 text ({text})"
    if isinstance(err, (TypeError, KeyError, IndexError, AttributeError, ValueError)):
        return f"unexpected content ({type(err).__name__}: {text})"
    return None


def position(tb: TracebackType | None) -> tuple[str | None, int | None, str | None]:
    """The (path, line, field) the innermost debugtune frame of a traceback held, where it held them."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    path = line = field = None
    for frame in reversed(frames):
        filename = frame.f_code.co_filename
        if not filename.startswith(_PACKAGE_ROOT) or "site-packages" in filename:
            continue
        local = frame.f_locals
        if path is None and isinstance(local.get("path"), (str, PurePath)):
            path = str(local["path"])
        for name in ("line", "lineno", "line_no"):
            if line is None and isinstance(local.get(name), int) and not isinstance(local.get(name), bool):
                line = local[name]
        if field is None and isinstance(local.get("field"), str):
            field = local["field"]
        if path is not None:
            break
    return path, line, field


@contextmanager
def reading(source: str | PurePath, error: Callable[[str, str, int | None, str | None], DebugtuneError],
            ) -> Iterator[None]:
    """Run a reader of ``source``; an input failure (`failure_message`) is raised as ``error(path, message,
    line, field)``, with the file, line and field the reader was at when it knows them."""
    try:
        yield
    except DebugtuneError:
        raise
    except Exception as err:  # noqa: BLE001 - classified; anything that is not an input failure is re-raised
        message = failure_message(err)
        if message is None:
            raise
        path, line, field = position(err.__traceback__)
        if line is None and "4,300 digits" in message:
            line = _long_number_line(Path(path or source))
        raise error(path or str(source), message, line, field) from err


def _long_number_line(path: Path) -> int | None:
    """The line of the first run of more than 4,300 digits in a (not too large) file, if there is one."""
    try:
        if not path.is_file() or path.stat().st_size > 64 * 2**20:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    m = re.search(rb"[0-9]{4301,}", data)
    return data.count(b"\n", 0, m.start()) + 1 if m else None
