"""Query worker processes: a query past its time limit is stopped by killing the process that runs it.

pyoxigraph cannot interrupt a running query and a thread cannot be killed, so a timed-out query on a
worker thread would keep its worker (and a core) until it finished. Here each of ``size`` threads
owns one worker process forked from the server; the thread sends the call (a module-level function
and its arguments, pickled) and waits at most what is left of the time limit. On timeout it kills the
process (SIGKILL) and the next call forks a fresh one (tens of milliseconds), so any number of
timed-out queries leaves the pool as it was. A query that crashes or exhausts its worker's memory
cap kills only that worker.

A fork copies the store as it is: an in-memory store is the process's own memory (copy-on-write),
an on-disk store is reopened read-only in the worker (`OxigraphStore.use_read_only`). Workers fork
under `store.WRITE_LOCK` and remember the process's write count (`store.write_generation`); a
worker older than the latest write is replaced before its next call, so a query sees every write
that finished before it was sent. Objects the calls refer to (stores, settings) are registered with
`QueryWorkers.share`; they travel by reference, as the worker's own copy of the object.

A worker also drops every inherited socket (so the server's client connections close when the
server closes them), ignores SIGINT, dies with the server, and, unless told otherwise, cannot open
network sockets (a seccomp filter on x86-64 and arm64 Linux): a SERVICE the text guard missed cannot
fetch anything.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import io
import os
import pickle
import platform
import resource
import signal
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any, TypeVar, cast

import pyoxigraph as ox

from debugtune.kg.store import WRITE_LOCK, OxigraphStore, write_generation

T = TypeVar("T")

_KEEP: list[Any] = []
"""In a worker: the store handles copied from the server, kept alive (never dropped, never used)."""


class WorkerError(Exception):
    """A call that did not complete on a worker; ``reason`` is "timeout", "busy" or "crashed"."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return WorkerError, (self.reason, str(self))


class _Pickler(pickle.Pickler):
    """Pickles the pool's shared objects, and the raw handle of a shared embedded store, by reference."""

    def __init__(self, file: io.BytesIO, shared: dict[int, Any]):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared

    def persistent_id(self, obj: Any) -> Any:
        if obj is not None and self.shared.get(id(obj)) is obj:
            return ("obj", id(obj))
        if isinstance(obj, ox.Store):
            owner = next((k for k, o in self.shared.items() if isinstance(o, OxigraphStore) and o.raw is obj), None)
            if owner is not None:
                return ("raw", owner)
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, shared: dict[int, Any]):
        super().__init__(file)
        self.shared = shared

    def persistent_load(self, pid: Any) -> Any:
        kind, key = pid
        return self.shared[key] if kind == "obj" else self.shared[key].raw


def _dumps(obj: Any, shared: dict[int, Any]) -> bytes:
    buf = io.BytesIO()
    _Pickler(buf, shared).dump(obj)
    return buf.getvalue()


def _loads(data: bytes, shared: dict[int, Any]) -> Any:
    return _Unpickler(io.BytesIO(data), shared).load()


# --- the worker side -------------------------------------------------------------------------------

_SECCOMP_ARCH = {"x86_64": (0xC000003E, 41), "amd64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198),
                 "arm64": (0xC00000B7, 198)}


def deny_network() -> bool:
    """Forbid this process to open IPv4/IPv6 sockets (seccomp: ``socket()`` fails with EACCES); False if unsupported."""
    arch = _SECCOMP_ARCH.get(platform.machine().lower())
    if arch is None or not Path("/proc/self/status").exists():
        return False
    audit_arch, nr_socket = arch
    ld, jeq, ret = 0x20, 0x15, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EACCES
    program = [(ld, 0, 0, 4), (jeq, 1, 0, audit_arch), (ret, 0, 0, allow), (ld, 0, 0, 0),
               (jeq, 0, 3, nr_socket), (ld, 0, 0, 16), (jeq, 2, 0, 2), (jeq, 1, 0, 10),
               (ret, 0, 0, allow), (ret, 0, 0, deny)]
    code = b"".join(struct.pack("HBBI", *ins) for ins in program)
    buf = ctypes.create_string_buffer(code, len(code))

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    prog = Prog(len(program), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return bool(libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0)  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER


def _drop_inherited_sockets(keep: int) -> None:
    """Point every inherited socket but ``keep`` at /dev/null (same fd number, so nothing reuses it)."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd in (keep, null) or fd < 3:
            continue
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def _worker_main(conn: Connection, server: int, shared: dict[int, Any], memory_mb: int | None,
                 no_network: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the server
    except (OSError, AttributeError):
        pass
    _drop_inherited_sockets(conn.fileno())
    for obj in shared.values():
        if isinstance(obj, OxigraphStore) and obj.path is not None:
            _KEEP.append(obj.use_read_only())
    if no_network:
        deny_network()
    if memory_mb:
        with open("/proc/self/statm") as fh:
            vm = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = vm + memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    while True:
        if not conn.poll(1.0):
            if os.getppid() != server:
                return
            continue
        try:
            fn, args = _loads(conn.recv_bytes(), shared)
        except EOFError:
            return
        try:
            out: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - sent back to the server, which raises it
            out = (False, exc)
        try:
            data = _dumps(out, {})
            _loads(data, {})
        except Exception as err:  # noqa: BLE001 - an unpicklable result or error still gets an answer
            data = _dumps((False, WorkerError("crashed", f"the result could not be sent back: "
                                                         f"{type(out[1]).__name__}: {out[1]} ({err})")), {})
        conn.send_bytes(data)


# --- the server side -------------------------------------------------------------------------------

@dataclass(eq=False)
class _Worker:
    pid: int
    conn: Connection
    generation: int

    def stop(self) -> int | None:
        """Kill the process and reap it; its exit status (negative: the signal), None if already gone."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = None
        self.conn.close()
        if status is None:
            return None
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _stop_all(workers: set[_Worker]) -> None:
    for w in list(workers):
        w.stop()
    workers.clear()


class QueryWorkers:
    """``size`` worker processes behind ``size`` threads; `call` runs a function on one within ``timeout_s``."""

    def __init__(self, size: int, timeout_s: float, *, memory_mb: int | None = None, no_network: bool = True):
        self.size, self.timeout_s, self.memory_mb, self.no_network = max(1, size), timeout_s, memory_mb, no_network
        self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="query-worker")
        self._shared: dict[int, Any] = {}
        self._flushed = -1
        self._local = threading.local()
        self._live: set[_Worker] = set()
        self._finalizer = weakref.finalize(self, _stop_all, self._live)

    def share(self, *objs: Any) -> None:
        """Let calls pass these objects (stores, settings) by reference: a worker uses its own copy.

        A shared embedded store also lends its raw pyoxigraph handle; in a worker an on-disk store is
        opened read-only.
        """
        for obj in objs:
            self._shared[id(obj)] = obj

    def _fork(self) -> _Worker:
        parent, child = Pipe()
        with WRITE_LOCK:
            generation = write_generation()
            if generation != self._flushed:  # a read-only open replays what is not flushed: do it once here
                for obj in self._shared.values():
                    if isinstance(obj, OxigraphStore) and obj.path is not None and obj.raw is not None:
                        obj.raw.flush()
                self._flushed = generation
            pid = os.fork()
        if pid == 0:  # the worker: never returns into the server's code
            code = 0
            try:
                parent.close()
                _worker_main(child, os.getppid(), self._shared, self.memory_mb, self.no_network)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        child.close()
        worker = _Worker(pid, parent, generation)
        self._live.add(worker)
        return worker

    def _retire(self, worker: _Worker) -> int | None:
        self._live.discard(worker)
        if getattr(self._local, "worker", None) is worker:
            self._local.worker = None
        return worker.stop()

    def _run(self, submitted: float, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        deadline = submitted + self.timeout_s
        if time.monotonic() >= deadline:
            raise WorkerError("busy", "all query workers were busy; it was not started")
        worker: _Worker | None = getattr(self._local, "worker", None)
        if worker is not None and worker.generation != write_generation():
            self._retire(worker)
            worker = None
        if worker is None:
            worker = self._local.worker = self._fork()
            deadline = max(deadline, time.monotonic() + self.timeout_s)  # forking is not the query's time
        worker.conn.send_bytes(_dumps((fn, args), self._shared))
        if not worker.conn.poll(max(0.0, deadline - time.monotonic())):
            self._retire(worker)
            raise WorkerError("timeout", "it was stopped (its worker process was killed and replaced)")
        try:
            ok, value = _loads(worker.conn.recv_bytes(), {})
        except (EOFError, OSError):
            status = self._retire(worker)
            cause = (f"signal {-status}" if status is not None and status < 0 else f"exit status {status}")
            raise WorkerError("crashed", f"its worker process died ({cause}: out of memory, or a crash in the "
                                         "query engine) and was replaced") from None
        if ok:
            return cast(T, value)  # what fn returned, unpickled
        raise value

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on a worker and return its value or raise its error (blocking)."""
        return self._threads.submit(self._run, time.monotonic(), fn, args).result()

    async def call_async(self, fn: Callable[..., T], *args: Any) -> T:
        """`call` for an event loop: awaits the worker's thread without holding another thread."""
        return await asyncio.wrap_future(self._threads.submit(self._run, time.monotonic(), fn, args))

    def close(self) -> None:
        """Kill every worker process."""
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._finalizer()
