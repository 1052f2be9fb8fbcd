"""Reading and writing package archives (zip) safely: names, types, sizes, counts and compression ratio.

A package is a zip of a few small text files. Reading refuses, before anything is extracted or
parsed, any entry that could escape a folder or exhaust memory: absolute names, ``..``, backslashes,
symbolic links, encrypted or duplicate entries, file types outside the package layout, and sizes,
counts or compression ratios beyond `ArchiveLimits`. The declared sizes are checked first and the
real ones again while decompressing, so a forged header does not help. `archive_bytes` writes
deterministically (sorted names, fixed timestamps); callers publish the bytes atomically.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from debugtune.kg.errors import DebugtuneError

METADATA = "ro-crate-metadata.json"
"""The RO-Crate metadata file at the root of every package."""

TOP_LEVEL_SUFFIXES = (".json", ".ttl", ".trig", ".md")
"""File types allowed at the top level of a package (and in any folder other than sandbox/)."""

SANDBOX_DIR = "sandbox"
SANDBOX_SUFFIXES = (".py", ".json", ".md")
"""File types allowed in the sandbox folder (the only place a script may be)."""

MAX_DEPTH = 2
"""Names have at most two parts (``sandbox/validate.py``)."""

_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


class PackageError(DebugtuneError):
    """A package that cannot be written, read or imported; the message names the file and the reason."""

    def __init__(self, source: str, reason: str):
        self.source, self.reason = source, reason
        super().__init__(f"{source}: {reason}")


@dataclass(frozen=True)
class ArchiveLimits:
    """Caps on what an archive may hold (uncompressed sizes in bytes)."""

    max_files: int = 64
    max_file_bytes: int = 16 * 2**20
    max_total_bytes: int = 64 * 2**20
    max_ratio: float = 200.0
    """Largest uncompressed/compressed size ratio of one entry (entries under 64 KiB are exempt)."""


def _check_path(name: str, source: str) -> tuple[str, ...]:
    """The parts of ``name`` if it is a relative POSIX path that stays inside the package folder."""
    if not name or any(ord(c) < 32 for c in name):
        raise PackageError(source, f"entry {name!r}: control characters in the name")
    if "\\" in name:
        raise PackageError(source, f"entry {name!r}: backslash in the name (only '/' separates folders)")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise PackageError(source, f"entry {name!r}: absolute path")
    if any(p in ("..", ".") for p in name.rstrip("/").split("/")):
        raise PackageError(source, f"entry {name!r}: '..' or '.' in the path (zip-slip)")
    parts = PurePosixPath(name).parts
    if len(parts) > MAX_DEPTH:
        raise PackageError(source, f"entry {name!r}: nested deeper than {MAX_DEPTH} levels")
    return parts


def check_name(name: str, source: str = "archive") -> str:
    """``name`` if it is a safe relative POSIX path of an allowed file type; PackageError otherwise."""
    parts = _check_path(name, source)
    suffix = PurePosixPath(name).suffix.lower()
    in_sandbox = parts[0] == SANDBOX_DIR and len(parts) == 2
    allowed = SANDBOX_SUFFIXES if in_sandbox else TOP_LEVEL_SUFFIXES
    if suffix not in allowed:
        where = "in sandbox/" if in_sandbox else "outside sandbox/"
        raise PackageError(source, f"entry {name!r}: file type {suffix or '(none)'!r} is not allowed {where} "
                                   f"(allowed: {', '.join(allowed)}); packages never hold weights, data or telemetry")
    return name


def _check_entry(info: zipfile.ZipInfo, limits: ArchiveLimits, source: str) -> None:
    kind = stat.S_IFMT(info.external_attr >> 16)
    if kind == stat.S_IFLNK:
        raise PackageError(source, f"entry {info.filename!r}: symbolic link")
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise PackageError(source, f"entry {info.filename!r}: not a regular file")
    if info.flag_bits & 0x1:
        raise PackageError(source, f"entry {info.filename!r}: encrypted")
    if info.file_size > limits.max_file_bytes:
        raise PackageError(source, f"entry {info.filename!r}: {info.file_size} bytes uncompressed, over the "
                                   f"limit of {limits.max_file_bytes} bytes per file (oversized archive)")
    if info.file_size > 65536 and info.file_size > limits.max_ratio * max(1, info.compress_size):
        raise PackageError(source, f"entry {info.filename!r}: compression ratio "
                                   f"{info.file_size / max(1, info.compress_size):.0f}:1 over the limit of "
                                   f"{limits.max_ratio:.0f}:1 (zip bomb)")


def _read_capped(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int, source: str) -> bytes:
    out = io.BytesIO()
    with zf.open(info) as fh:
        while chunk := fh.read(65536):
            out.write(chunk)
            if out.tell() > cap:
                raise PackageError(source, f"entry {info.filename!r}: decompresses beyond its limit of {cap} bytes")
    return out.getvalue()


def read_archive(path: str | os.PathLike[str], limits: ArchiveLimits = ArchiveLimits()) -> dict[str, bytes]:
    """The files of a package archive by name, after every safety check (see the module docstring)."""
    source = str(path)
    if not Path(path).is_file():
        raise PackageError(source, "no such file")
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, NotImplementedError, ValueError, EOFError) as err:
        raise PackageError(source, f"not a zip archive ({err})") from None
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        for i in zf.infolist():
            if i.is_dir():
                _check_path(i.filename, source)
        if len(infos) > limits.max_files:
            raise PackageError(source, f"{len(infos)} files, over the limit of {limits.max_files}")
        seen: set[str] = set()
        for info in infos:
            _check_path(info.filename, source)
            _check_entry(info, limits, source)
            check_name(info.filename, source)
            if info.filename in seen:
                raise PackageError(source, f"entry {info.filename!r} appears twice")
            seen.add(info.filename)
        declared = sum(i.file_size for i in infos)
        if declared > limits.max_total_bytes:
            raise PackageError(source, f"{declared} bytes uncompressed in all, over the limit of "
                                       f"{limits.max_total_bytes} bytes (oversized archive)")
        files: dict[str, bytes] = {}
        total = 0
        for info in infos:
            try:
                data = _read_capped(zf, info, min(limits.max_file_bytes, info.file_size), source)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, RuntimeError, NotImplementedError,
                    zlib.error) as err:
                raise PackageError(source, f"entry {info.filename!r}: cannot be read ({err})") from None
            total += len(data)
            if total > limits.max_total_bytes:
                raise PackageError(source, f"decompresses beyond {limits.max_total_bytes} bytes in all")
            files[info.filename] = data
    if METADATA not in files:
        raise PackageError(source, f"no {METADATA} at the top level: not an RO-Crate package")
    return files


def content_hash(files: Mapping[str, bytes]) -> str:
    """sha256 over the sorted (name, sha256 of content) pairs: the same files give the same hash."""
    listing = [[name, hashlib.sha256(files[name]).hexdigest()] for name in sorted(files)]
    return hashlib.sha256(json.dumps(listing, separators=(",", ":")).encode()).hexdigest()


def archive_bytes(files: Mapping[str, bytes]) -> bytes:
    """A deterministic zip of ``files`` (names checked, sorted, fixed timestamps, deflated)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(check_name(name, "package"), date_time=_FIXED_TIME)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    return buf.getvalue()

