"""TensorBoard event files (``events.out.tfevents.*``) → scalar metrics, without TensorFlow or tensorboard.

An event file is a TFRecord stream: per record ``uint64 length | uint32 masked-crc32c(length) | data |
uint32 masked-crc32c(data)``; ``data`` is an ``Event`` protobuf (wall_time = 1, step = 2, summary = 5) whose
``Summary.Value`` (tag = 1, simple_value = 2, tensor = 8, metadata = 9) holds the scalar — as ``simple_value``
(torch / tensorboardX ``add_scalar``) or as a 0-d ``TensorProto`` (TF2 style, plugin "scalars"). Tags of HF
Trainer (``train/loss``), Megatron (``lm loss``, ``learning-rate``, ``grad-norm``) and Lightning (``train_loss``,
``lr-AdamW``) map through :mod:`names`. A truncated record or a length whose checksum is wrong raises with the
record's byte offset (reported as the field).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from debugtune.engine.capture.importers.errors import ImportFormatError
from debugtune.engine.capture.importers.names import metric_for
from debugtune.engine.capture.importers.sink import RunSink

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data`` (used on the 8-byte record lengths only)."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path: Path) -> Iterator[tuple[int, bytes]]:
    """(byte offset, payload) of each TFRecord in the file."""
    with open(path, "rb") as fh:
        offset = 0
        while True:
            header = fh.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ImportFormatError(path, "truncated record header", field=f"byte {offset}")
            length_bytes, crc = header[:8], struct.unpack("<I", header[8:])[0]
            if masked_crc(length_bytes) != crc:
                raise ImportFormatError(path, "corrupt record (length checksum mismatch)", field=f"byte {offset}")
            (length,) = struct.unpack("<Q", length_bytes)
            data = fh.read(length)
            footer = fh.read(4)
            if len(data) < length or len(footer) < 4:
                raise ImportFormatError(path, "truncated record", field=f"byte {offset}")
            yield offset, data
            offset += 16 + length


# -- a minimal protobuf wire-format reader --------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message; length-delimited values as bytes.

    The value is an int for wire type 0 and bytes for the others (Any: the wire type, not the type system,
    says which)."""
    pos, n = 0, len(buf)
    value: int | bytes
    while pos < n:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


_DTYPES = {1: ("<f", 4, 5), 2: ("<d", 8, 6), 3: (None, 0, 7), 9: (None, 0, 10), 19: ("<e", 2, 13)}


def _tensor_scalar(buf: bytes) -> float | None:
    """The value of a 0-d (or 1-element) TensorProto of a float/int dtype."""
    dtype, content = 0, b""
    packed: dict[int, list[tuple[int, Any]]] = {}
    for number, wire, value in fields(buf):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif wire in (0, 2, 5, 1):
            packed.setdefault(number, []).append((wire, value))
    if dtype not in _DTYPES:
        return None
    fmt, size, field_no = _DTYPES[dtype]
    if content and fmt:
        return float(struct.unpack(fmt, content[:size])[0]) if len(content) >= size else None
    for wire, value in packed.get(field_no, []):
        if wire == 0:  # a single int value
            return float(value)
        if wire == 5 and fmt == "<f":
            return float(struct.unpack("<f", value)[0])
        if wire == 1 and fmt == "<d":
            return float(struct.unpack("<d", value)[0])
        if wire == 2 and value:  # packed repeated
            if fmt == "<f" and len(value) >= 4:
                return float(struct.unpack("<f", value[:4])[0])
            if fmt == "<d" and len(value) >= 8:
                return float(struct.unpack("<d", value[:8])[0])
            if fmt in (None, "<e"):
                v, _ = _varint(value, 0)
                return float(v) if fmt is None else float(struct.unpack("<e", struct.pack("<H", v & 0xFFFF))[0])
    return None


def _plugin(buf: bytes) -> str:
    for number, _, value in fields(buf):
        if number == 1:
            for n2, _, v2 in fields(value):
                if n2 == 1:
                    return str(v2.decode("utf-8", "replace"))
    return ""


def scalars(path: Path) -> Iterator[tuple[int, str, float]]:
    """(step, tag, value) of every scalar summary in an event file."""
    for offset, data in records(path):
        try:
            step, summary = 0, None
            for number, wire, value in fields(data):
                if number == 2 and wire == 0:
                    step = value - (1 << 64) if value >= 1 << 63 else value
                elif number == 5 and wire == 2:
                    summary = value
            if summary is None:
                continue
            for number, _, value in fields(summary):
                if number != 1:
                    continue
                tag, scalar, plugin, tensor = "", None, "", None
                for n2, w2, v2 in fields(value):
                    if n2 == 1:
                        tag = v2.decode("utf-8", "replace")
                    elif n2 == 2 and w2 == 5:
                        scalar = struct.unpack("<f", v2)[0]
                    elif n2 == 8:
                        tensor = v2
                    elif n2 == 9:
                        plugin = _plugin(v2)
                if scalar is None and tensor is not None and plugin in ("", "scalars"):
                    scalar = _tensor_scalar(tensor)
                if tag and scalar is not None:
                    yield step, tag, float(scalar)
        except (IndexError, ValueError, struct.error) as err:
            raise ImportFormatError(path, f"malformed Event protobuf: {err}", field=f"byte {offset}") from None


def event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if "tfevents" in path.name else []
    return sorted(p for p in path.rglob("*tfevents*") if p.is_file())


def detect(path: Path) -> bool:
    return bool(event_files(path))


def load(path: Path, sink: RunSink) -> None:
    files = event_files(path)
    if not files:
        raise ImportFormatError(path, "no TensorBoard event files (*tfevents*) found")
    for f in files:
        sink.source(f)
        for step, tag, value in scalars(f):
            mapped = metric_for(tag)
            if mapped is not None:
                sink.add(0, step, mapped[0], value * mapped[1])
