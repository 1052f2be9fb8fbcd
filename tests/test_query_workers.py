"""Issue 36, the query workers themselves: they survive the server compacting an on-disk store under them, they
are bounded by the memory they hold (not their address space), and each one that dies says why in the log."""

from __future__ import annotations

import logging
import mmap
import os
import signal
import threading

import pytest

from debugtune.kg import OxigraphStore, open_store
from debugtune.kg.query_workers import QueryWorkers, WorkerError, anon_rss

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")

LOGGER = "debugtune.query_workers"


def _count(store) -> int:
    return int(store.query("SELECT (COUNT(*) AS ?n) WHERE { GRAPH ?g { ?s ?p ?o } }").scalar())


def _count_in_reserved_address_space(store, reserve_gib: int, threads: int) -> tuple[int, int]:
    """Reserve address space (no memory) and start idle threads, as RocksDB and glibc do, then query."""
    reserved = mmap.mmap(-1, reserve_gib * 2**30, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                         prot=mmap.PROT_READ)  # never written: no memory
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads)]
    for t in idle:
        t.start()
    try:
        with open("/proc/self/statm") as fh:
            vm = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return _count(store), vm
    finally:
        stop.set()
        reserved.close()


def _hold_memory(mib: int) -> int:
    block = b"x" * (mib * 2**20)  # written, so resident
    threading.Event().wait(30)
    return len(block)


def _oom_score_adj() -> int:
    with open("/proc/self/oom_score_adj") as fh:
        return int(fh.read())


def _explode() -> None:
    raise RuntimeError("this argument cannot be unpacked in the worker")


def _die_by(sig: int) -> None:
    import faulthandler

    faulthandler.disable()  # the death is the test's intent: no stack dump in the test log
    os.kill(os.getpid(), sig)


def _count_nothing() -> int:
    return 0


class _HangsAtOpen(OxigraphStore):
    """A real on-disk store whose worker-side open never returns (as a fork that copied a held lock would)."""

    def use_read_only(self, directory=None):
        threading.Event().wait(60)
        return super().use_read_only(directory)


class _UnpicklableInWorker:
    def __reduce__(self):
        return _explode, ()


def test_workers_survive_the_compaction_of_the_store_they_read(tmp_path):
    """Every write makes a new worker; the server's RocksDB compacts (level-0 trigger 2) while that worker opens the
    store. On the live directory 3 to 13 of 30 such workers died ("No such file or directory: …sst"); on a
    checkpoint none does, and the checkpoints are removed with the workers."""
    store = open_store(tmp_path / "store")
    workers = QueryWorkers(1, 30.0)
    workers.share(store)
    try:
        for i in range(30):
            store.load_data("\n".join(f"<urn:s{i}-{j}> <urn:p> \"{'x' * 200}\" ." for j in range(2000)),
                            graph=f"urn:g{i}")
            assert workers.call(_count, store) == 2000 * (i + 1)
    finally:
        workers.close()
        store.close()
    assert not list(tmp_path.glob(".store.workers-*")), "checkpoints left behind"


def test_address_space_is_not_memory(tmp_path):
    """4 GiB of reserved address space and 32 threads in a worker with a 64 MiB memory limit: the query answers (an
    RLIMIT_AS cap of 'virtual size + 64 MiB' refused the reservation)."""
    store = open_store(tmp_path / "store")
    store.load_data("<urn:a> <urn:b> <urn:c> .", graph="urn:g")
    workers = QueryWorkers(1, 30.0, memory_mb=64)
    workers.share(store)
    try:
        n, vm = workers.call(_count_in_reserved_address_space, store, 4, 32)
        assert n == 1 and vm > 4 * 2**30
    finally:
        workers.close()
        store.close()


def test_a_worker_past_its_memory_limit_is_stopped_and_logged(caplog):
    """A call that holds 256 MiB on a worker limited to 64 MiB is stopped at once (not after its 30 s), the log says
    by how much, and the next call gets a fresh worker."""
    workers = QueryWorkers(1, 60.0, memory_mb=64)
    try:
        with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(WorkerError) as err:
            workers.call(_hold_memory, 256)
        assert err.value.reason == "memory" and "memory limit hit: RSS" in str(err.value)
        line = next(r.getMessage() for r in caplog.records if r.name == LOGGER)
        used = int(line.split("RSS ")[1].split(" MiB")[0])
        assert "stopped: memory limit hit" in line and 64 < used < 256, line
        assert workers.call(os.getpid) != os.getpid()
        assert workers.call(anon_rss) is not None
        assert workers.call(_oom_score_adj) == 1000  # the kernel's OOM killer takes a worker before the server
    finally:
        workers.close()


def test_a_dying_worker_leaves_its_last_words_in_the_log(caplog):
    """A worker that cannot unpack its call exits with its traceback sent to the server, which logs it; a worker killed
    by a signal is logged with the signal's name."""
    workers = QueryWorkers(1, 30.0)
    try:
        with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(WorkerError) as err:
            workers.call(len, _UnpicklableInWorker())
        assert err.value.reason == "crashed" and "exit status 1" in str(err.value)
        assert "RuntimeError: this argument cannot be unpacked in the worker" in str(err.value)
        logged = "\n".join(r.getMessage() for r in caplog.records if r.name == LOGGER)
        assert "died (exit status 1: RuntimeError: this argument cannot be unpacked" in logged.splitlines()[0]
        assert "Traceback (most recent call last)" in logged
        assert "RuntimeError: this argument cannot be unpacked in the worker" in logged
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger=LOGGER), pytest.raises(WorkerError) as err:
            workers.call(_die_by, signal.SIGSEGV)
        assert "killed by SIGSEGV" in str(err.value)
        assert any("died (killed by SIGSEGV" in r.getMessage() for r in caplog.records if r.name == LOGGER)
        assert workers.call(_count_nothing) == 0
    finally:
        workers.close()


_HANG_SCRIPT = """
import logging, signal, sys
from debugtune.kg import query_workers
from debugtune.kg.query_workers import QueryWorkers, WorkerError
from tests.test_query_workers import _HangsAtOpen, _count
logging.basicConfig(level=logging.ERROR, format="LOG %(message)s")
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGABRT})  # as a library's thread may leave it: forks inherit it
query_workers.START_S = 2.0  # time for a fork on a loaded machine to reach its hang
store = _HangsAtOpen(sys.argv[1])
workers = QueryWorkers(1, 30.0)
workers.share(store)
try:
    workers.call(_count, store)
except WorkerError as err:
    print("ERR", err.reason, err, flush=True)
finally:
    workers.close()
    store.close()
"""


def test_a_worker_that_hangs_at_start_is_replaced_once_then_refused(tmp_path):
    """Each hung worker is aborted and writes where it waited, even forked from a thread that blocks SIGABRT (a
    worker clears the mask it inherits). Run in a fresh interpreter: in one that has run Ray, gRPC's fork handlers
    can hold a fork before any of the worker's code runs, and its stack then goes wherever the handler it
    inherited writes, not to the captured stderr."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _HANG_SCRIPT, str(tmp_path / "store")], capture_output=True,
                         text=True, timeout=120, cwd=root)
    assert "ERR crashed" in out.stdout and "no worker process started within 2 s, twice" in out.stdout, out
    lines = [line for line in out.stderr.splitlines() if line.startswith("LOG ")]
    assert len(lines) == 2 and all("did not start within 2 s" in line for line in lines), out.stderr
    assert out.stderr.count("most recent call first") >= 2 and "in use_read_only" in out.stderr, out.stderr
    assert not list(tmp_path.glob(".store.workers-*/g*")), "checkpoints left behind"


def test_checkpoints_of_a_server_that_is_gone_are_removed(tmp_path):
    """A server killed outright leaves its checkpoint folder beside the store; the next one removes it."""
    stale = tmp_path / f".store.workers-{2**22 + 7}-abc"  # above Linux's largest pid: no such process
    (stale / "g3").mkdir(parents=True)
    store = open_store(tmp_path / "store")
    store.load_data("<urn:a> <urn:b> <urn:c> .", graph="urn:g")
    workers = QueryWorkers(1, 30.0)
    workers.share(store)
    try:
        assert workers.call(_count, store) == 1
        assert not stale.exists() and len(list(tmp_path.glob(".store.workers-*"))) == 1
    finally:
        workers.close()
        store.close()
