"""Query worker processes: a query past its time limit is stopped by killing the process that runs it.

pyoxigraph cannot interrupt a running query and a thread cannot be killed, so a timed-out query on a
worker thread would keep its worker (and a core) until it finished. Here each of ``size`` threads
owns one worker process forked from the server; the thread sends the call (a module-level function
and its arguments, pickled) and waits at most what is left of the time limit. On timeout it kills the
process (SIGKILL) and the next call forks a fresh one (tens of milliseconds), so any number of
timed-out queries leaves the pool as it was. A query that crashes kills only its worker.

Memory is bounded by what a worker really holds, not by its address space: while it waits, the thread reads the
worker's resident anonymous memory (``/proc/<pid>/statm``: resident − file-backed) every ``WATCH_S`` seconds and
kills the worker once that exceeds what it inherited from the server by more than ``memory_mb``. (An
``RLIMIT_AS`` cap used to do this, and killed workers that used little memory: address space also holds thread
stacks and glibc's 64 MiB malloc arenas per thread.) Every worker that dies or is killed leaves one line in the
server's log (logger ``debugtune.query_workers``): the traceback it sent before exiting, the signal that killed
it, the memory limit it hit, or the time limit.

A fork copies the store as it is: an in-memory store is the process's own memory (copy-on-write),
an on-disk store is opened read-only in the worker on a checkpoint of it (`worker_checkpoints`, so the
server's compaction cannot delete the files under it; `OxigraphStore.use_read_only`). Workers fork
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
import faulthandler
import io
import logging
import os
import pickle
import platform
import signal
import stat
import struct
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import pyoxigraph as ox

from debugtune.kg.store import WRITE_LOCK, OxigraphStore, write_generation
from debugtune.kg.worker_checkpoints import Checkpoints

T = TypeVar("T")

LOG = logging.getLogger("debugtune.query_workers")
WATCH_S = 0.02
"""How often a waiting thread reads its worker's resident memory (a query can overshoot the limit by what it
allocates in that time)."""
START_S = 10.0
"""How long a fresh worker may take to open its stores before it counts as hung (and is forked again, once)."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_KEEP: list[Any] = []
"""In a worker: the store handles copied from the server, kept alive (never dropped, never used)."""


class WorkerError(Exception):
    """A call that did not complete on a worker; ``reason`` is "timeout", "busy", "memory" or "crashed"."""

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


def anon_rss(pid: int | str = "self") -> int | None:
    """Resident anonymous memory of a process in bytes (``/proc/<pid>/statm``: resident − file-backed and shared
    memory); None where it cannot be read (the process is gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            fields = fh.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, IndexError, ValueError):
        return None


def _open_read_only(store: OxigraphStore, directory: Path | None) -> Any:
    """`OxigraphStore.use_read_only` on ``directory`` (a checkpoint) or, without one, on the live directory, which
    a compaction may change under the open: retried a few times."""
    for attempt in range(5):
        try:
            return store.use_read_only(directory)
        except (OSError, RuntimeError):
            if directory is not None or attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _worker_main(conn: Connection, server: int, shared: dict[int, Any], checkpoints: dict[int, Path],
                 no_network: bool) -> None:
    # first: signals the forking thread had blocked (a library's threads block some) are not the worker's, and a
    # worker that crashes, or that the server aborts for a start that hangs, writes its Python stack on the
    # server's stderr (not where a handler it inherited would have written) before it dies
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        faulthandler.enable(file=2, all_threads=True)
    except (OSError, ValueError, RuntimeError):
        pass
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
    try:  # the kernel's OOM killer takes a worker before the server
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass
    for key, obj in shared.items():
        if isinstance(obj, OxigraphStore) and obj.path is not None:
            _KEEP.append(_open_read_only(obj, checkpoints.get(key)))
    if no_network:
        deny_network()
    conn.send_bytes(_dumps(("ready", anon_rss()), {}))
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
            out: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - sent back to the server, which raises it
            out = ("error", exc)
        try:
            data = _dumps(out, {})
            _loads(data, {})
        except Exception as err:  # noqa: BLE001 - an unpicklable result or error still gets an answer
            data = _dumps(("error", WorkerError("crashed", f"the result could not be sent back: "
                                                           f"{type(out[1]).__name__}: {out[1]} ({err})")), {})
        conn.send_bytes(data)


# --- the server side -------------------------------------------------------------------------------

def _last_words(conn: Connection) -> None:
    """In a worker that is about to exit on an error: send the traceback to the server (stderr if that fails)."""
    text = traceback.format_exc()
    try:
        conn.send_bytes(_dumps(("died", text), {}))
    except BaseException:  # noqa: BLE001 - the pipe is gone: the server's stderr is the last place to say it
        try:
            os.write(2, f"debugtune query worker {os.getpid()} died:\n{text}".encode(errors="replace"))
        except OSError:
            pass


def _exit_cause(status: int | None) -> str:
    """A worker's exit status in words."""
    if status is None:
        return "its exit status is unknown"
    if status >= 0:
        return f"exit status {status}"
    try:
        sig = signal.Signals(-status)
    except ValueError:
        return f"killed by signal {-status}"
    why = {signal.SIGKILL: " (the kernel's out-of-memory killer, or another process)",
           signal.SIGSEGV: " (a crash in the query engine)",
           signal.SIGABRT: " (an abort in the query engine, e.g. an allocation that failed)"}
    return f"killed by {sig.name}{why.get(sig, '')}"


@dataclass(eq=False)
class _Worker:
    pid: int
    conn: Connection
    generation: int
    inherited: int
    """Resident anonymous memory (bytes) of the worker once started (before that: the server's at the fork)."""
    on_disk: bool = False
    """Whether it holds checkpoints of on-disk stores (`Checkpoints.take`), to drop when it is retired."""

    def stop(self, grace_s: float = 0.0) -> int | None:
        """Kill the process (after ``grace_s`` for one that is exiting) and reap it; its exit status (negative: the
        signal), None if already gone."""
        status: int | None = None
        deadline = time.monotonic() + grace_s
        try:
            while status is None:
                pid, code = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    status = code
                elif time.monotonic() >= deadline:
                    break
                else:
                    time.sleep(0.01)
            if status is None:
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = None
        self.conn.close()
        if status is None:
            return None
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _stop_all(workers: set[_Worker], checkpoints: Checkpoints) -> None:
    for w in list(workers):
        w.stop()
    workers.clear()
    checkpoints.close()


class QueryWorkers:
    """``size`` worker processes behind ``size`` threads; `call` runs a function on one within ``timeout_s``.

    ``memory_mb``: the resident memory a worker may add to what it inherits before it is killed (None: no bound).
    """

    def __init__(self, size: int, timeout_s: float, *, memory_mb: int | None = None, no_network: bool = True):
        self.size, self.timeout_s, self.memory_mb, self.no_network = max(1, size), timeout_s, memory_mb, no_network
        self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="query-worker")
        self._shared: dict[int, Any] = {}
        self._checkpoints = Checkpoints()
        self._local = threading.local()
        self._live: set[_Worker] = set()
        self._finalizer = weakref.finalize(self, _stop_all, self._live, self._checkpoints)

    def share(self, *objs: Any) -> None:
        """Let calls pass these objects (stores, settings) by reference: a worker uses its own copy.

        A shared embedded store also lends its raw pyoxigraph handle; in a worker an on-disk store is
        opened read-only, on a checkpoint of it.
        """
        for obj in objs:
            self._shared[id(obj)] = obj

    def _fork(self) -> _Worker:
        parent, child = Pipe()
        with WRITE_LOCK:
            generation = write_generation()
            on_disk = {k: o for k, o in self._shared.items() if isinstance(o, OxigraphStore) and o.path is not None}
            checkpoints = self._checkpoints.take(generation, on_disk) if on_disk else {}
            inherited = anon_rss() or 0
            pid = os.fork()
        if pid == 0:  # the worker: never returns into the server's code
            code = 0
            try:
                parent.close()
                _worker_main(child, os.getppid(), self._shared, checkpoints, self.no_network)
            except BaseException:  # noqa: BLE001
                code = 1
                _last_words(child)
            finally:
                os._exit(code)
        child.close()
        worker = _Worker(pid, parent, generation, inherited, bool(on_disk))
        self._live.add(worker)
        return worker

    def _start(self) -> _Worker:
        """A fresh worker that has opened its stores. One that does not report within ``START_S`` (hung on a lock its
        fork copied while a thread that is not in it held it) is killed, logged and forked again, once."""
        for attempt in (1, 2):
            worker = self._fork()
            if worker.conn.poll(START_S):
                kind, value = self._receive(worker)
                if kind != "ready":
                    self._died(worker, value)
                worker.inherited = value or worker.inherited
                return worker
            try:  # SIGABRT, not SIGKILL: its fault handler writes where it waited, then it dies
                os.kill(worker.pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
            self._retire(worker, grace_s=1.0)
            LOG.error("query worker %d stopped: it did not start within %g s (attempt %d of 2; where it waited: the "
                      "stack it wrote above)", worker.pid, START_S, attempt)
        raise WorkerError("crashed", f"no worker process started within {START_S:g} s, twice (see the server's log)")

    @staticmethod
    def _receive(worker: _Worker) -> tuple[str, Any]:
        """The worker's next message (``(kind, value)``); ``("died", None)`` when it exited without a word."""
        try:
            return cast(tuple[str, Any], _loads(worker.conn.recv_bytes(), {}))
        except (EOFError, OSError):
            return "died", None

    def _died(self, worker: _Worker, last_words: str | None) -> NoReturn:
        """Reap a worker that died, log why (its exit status and the traceback it sent) and raise."""
        cause = _exit_cause(self._retire(worker, grace_s=1.0))
        last = (last_words or "").strip().splitlines()[-1:] or ["it sent no traceback before it exited"]
        LOG.error("query worker %d died (%s: %s)%s", worker.pid, cause, last[0],
                  f"; its traceback:\n{last_words.rstrip()}" if last_words else "")
        raise WorkerError("crashed", f"its worker process died ({cause}: {last[0]}) and was replaced")

    def _retire(self, worker: _Worker, grace_s: float = 0.0) -> int | None:
        self._live.discard(worker)
        if getattr(self._local, "worker", None) is worker:
            self._local.worker = None
        status = worker.stop(grace_s)
        if worker.on_disk:
            worker.on_disk = False  # dropped once
            self._checkpoints.drop(worker.generation)
        return status

    def _over_memory(self, worker: _Worker) -> str | None:
        """Why ``worker`` must be stopped for its memory (None while it is within ``memory_mb``)."""
        if not self.memory_mb:
            return None
        rss = anon_rss(worker.pid)
        if rss is None or rss - worker.inherited <= self.memory_mb * 2**20:
            return None
        return (f"memory limit hit: RSS {-(-(rss - worker.inherited) // 2**20)} MiB > {self.memory_mb} MiB (resident "
                f"memory beyond the {worker.inherited / 2**20:.0f} MiB it inherited from the server)")

    def _answered(self, worker: _Worker, deadline: float) -> bool:
        """Wait until the worker answers (True) or the deadline passes (False); kills it past its memory limit."""
        while True:
            left = deadline - time.monotonic()
            if worker.conn.poll(max(0.0, min(left, WATCH_S))):
                return True
            if left <= WATCH_S:
                return bool(worker.conn.poll(0))
            if (why := self._over_memory(worker)) is not None:
                self._retire(worker)
                LOG.error("query worker %d stopped: %s", worker.pid, why)
                raise WorkerError("memory", f"{why}; its worker process was killed and replaced")

    def _run(self, submitted: float, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        deadline = submitted + self.timeout_s
        if time.monotonic() >= deadline:
            raise WorkerError("busy", "all query workers were busy; it was not started")
        worker: _Worker | None = getattr(self._local, "worker", None)
        if worker is not None and worker.generation != write_generation():
            self._retire(worker)
            worker = None
        if worker is None:
            worker = self._local.worker = self._start()
            deadline = max(deadline, time.monotonic() + self.timeout_s)  # forking is not the query's time
        worker.conn.send_bytes(_dumps((fn, args), self._shared))
        if not self._answered(worker, deadline):
            self._retire(worker)
            LOG.warning("query worker %d stopped: past the time limit of %g s (%s)", worker.pid, self.timeout_s,
                        getattr(fn, "__name__", fn))
            raise WorkerError("timeout", "it was stopped (its worker process was killed and replaced)")
        kind, value = self._receive(worker)
        if kind == "ok":
            return cast(T, value)  # what fn returned, unpickled
        if kind == "error":
            raise value
        self._died(worker, value)

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
