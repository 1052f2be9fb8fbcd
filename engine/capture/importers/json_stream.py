"""Stream the events of a Chrome-trace JSON file (plain or gzipped) in batches, never holding the whole file.

The file is a JSON object with a ``traceEvents`` array (Kineto) or a bare array of events (Ascend
``trace_view.json``). Text is read in chunks; each chunk is cut after the last ``}, {`` event boundary and
the run of events up to the cut is decoded in one call by msgspec into :class:`Event` structs that keep
only the fields the importers read (``args`` stays undecoded until asked for). A cut that falls inside a
string or a nested value makes that decode fail, and the chunk is then decoded event by event with the
standard library, which also pinpoints the line of a genuinely malformed event.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.textio import open_binary

CHUNK_CHARS = 1 << 22
_WS = " \t\r\n"
_JSON = json.JSONDecoder()


class Event(msgspec.Struct, gc=False):
    """The fields of a trace event that importers use; ``args`` is raw JSON (decode with :func:`args_of`)."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float | str = 0.0
    dur: float | str = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: msgspec.Raw = msgspec.Raw(b"{}")


_BATCH = msgspec.json.Decoder(list[Event])
_ONE = msgspec.json.Decoder(Event)
_ARGS = msgspec.json.Decoder(dict[str, Any])


def args_of(event: Event) -> dict[str, Any]:
    """The decoded ``args`` of an event ({} when absent or not an object)."""
    try:
        return _ARGS.decode(event.args)
    except msgspec.MsgspecError:
        return {}


class TraceStream:
    """Iterate ``for batch in TraceStream(path)``; top-level keys other than the events end up in ``header``."""

    def __init__(self, path: Path, *, chunk_chars: int = CHUNK_CHARS):
        self.path = path
        self.chunk_chars = chunk_chars
        self.header: dict[str, Any] = {}
        self.bytes_read = 0
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._lines_before = 0  # newlines in text already dropped from the buffer
        self._reader: io.TextIOWrapper | None = None

    # -- buffer management ----------------------------------------------------------------------------
    def _line(self, pos: int | None = None) -> int:
        return self._lines_before + self._buf.count("\n", 0, self._pos if pos is None else pos) + 1

    def _fail(self, message: str, pos: int | None = None) -> ImportFormatError:
        return ImportFormatError(self.path, message, line=self._line(pos))

    def _more(self) -> bool:
        """Append the next chunk to the buffer (dropping consumed text); False at end of file."""
        if self._eof:
            return False
        assert self._reader is not None, "read only while iterating"
        try:
            chunk = self._reader.read(self.chunk_chars)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as err:
            raise self._fail(f"truncated or corrupt compressed file ({err})", len(self._buf)) from None
        if not chunk:
            self._eof = True
            return False
        self.bytes_read += len(chunk)
        self._lines_before += self._buf.count("\n", 0, self._pos)
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _peek(self) -> str:
        """The next non-blank character (pos moved onto it), '' at end of file."""
        while True:
            buf, pos = self._buf, self._pos
            n = len(buf)
            while pos < n and buf[pos] in _WS:
                pos += 1
            self._pos = pos
            if pos < n:
                return buf[pos]
            if not self._more():
                return ""

    def _expect(self, chars: str) -> str:
        c = self._peek()
        if c == "" or c not in chars:
            found = "end of file" if c == "" else repr(c)
            raise self._fail(f"malformed JSON: expected {' or '.join(map(repr, chars))}, found {found}")
        self._pos += 1
        return c

    def _value_end(self) -> int:
        """End index of the JSON value at pos (reading more text as needed)."""
        while True:
            try:
                _, end = _JSON.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as err:
                if self._more():
                    continue
                raise self._fail(f"malformed or truncated JSON: {err.msg}", err.pos) from None
            if end >= len(self._buf) and not self._eof and self._more():
                continue  # a number may continue in the next chunk
            return end

    # -- structure ------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[list[Event]]:
        with open_binary(self.path) as raw:
            self._reader = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
            first = self._peek()
            if first == "[":
                self._pos += 1
                yield from self._array()
            elif first == "{":
                self._pos += 1
                yield from self._object()
            else:
                raise self._fail("not a Chrome trace: expected a JSON object or array"
                                 + ("" if first else " (file is empty)"))

    def _object(self) -> Iterator[list[Event]]:
        if self._peek() == "}":
            return
        while True:
            if self._peek() != '"':
                raise self._fail("malformed JSON: expected a key")
            end = self._value_end()
            key = json.loads(self._buf[self._pos:end])
            self._pos = end
            self._expect(":")
            if key == "traceEvents":
                self._expect("[")
                yield from self._array()
            else:
                self._peek()
                end = self._value_end()
                self.header[key] = json.loads(self._buf[self._pos:end])
                self._pos = end
            if self._expect(",}") == "}":
                return

    def _array(self) -> Iterator[list[Event]]:
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            self._peek()
            cut = self._cut()
            if cut is None and not self._eof:
                self._more()
                continue
            if cut is not None:
                try:
                    batch = _BATCH.decode("[" + self._buf[self._pos:cut + 1] + "]")
                except msgspec.MsgspecError:
                    batch = None
                if batch is not None:
                    yield batch
                    self._pos = cut + 1
                    if self._expect(",]") == "]":
                        return
                    continue
            batch, done = self._one_by_one(cut)
            if batch:
                yield batch
            if done:
                return

    def _cut(self) -> int | None:
        """Index of the '}' ending the last ``}, {`` boundary in the buffer after pos (None if none)."""
        buf, start = self._buf, self._pos
        j = len(buf)
        while True:
            j = buf.rfind("{", start + 1, j)
            if j < 0:
                return None
            k = j - 1
            while k > start and buf[k] in _WS:
                k -= 1
            if buf[k] == ",":
                k -= 1
                while k > start and buf[k] in _WS:
                    k -= 1
                if buf[k] == "}":
                    return k

    def _one_by_one(self, limit: int | None) -> tuple[list[Event], bool]:
        """Decode single events up to ``limit`` (or the array end); returns (events, array ended)."""
        batch: list[Event] = []
        while True:
            if self._peek() == "":
                raise self._fail("truncated JSON: the event array is not closed")
            start = self._pos
            end = self._value_end()
            try:
                batch.append(_ONE.decode(self._buf[start:end]))
            except msgspec.MsgspecError as err:
                raise self._fail(f"bad trace event: {err}", start) from None
            self._pos = end
            if self._expect(",]") == "]":
                return batch, True
            if limit is not None and self._pos > limit:
                return batch, False
