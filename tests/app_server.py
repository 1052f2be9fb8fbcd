"""Serve a FastAPI app with a real uvicorn on 127.0.0.1 (random free port) for the duration of a test, in this
process or as the real `cann-debug serve` process."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

CLI = str(Path(sys.executable).with_name("cann-debug"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(app) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:<port>``) of ``app`` served by uvicorn in a thread."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="off", access_log=False))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def cann_debug_serve(store: Path, *args: str, log: Path) -> Iterator[str]:
    """``cann-debug serve --store STORE ARGS`` on a free loopback port; yields its URL, its stderr goes to ``log``."""
    port = free_port()
    with log.open("wb") as err:
        proc = subprocess.Popen([CLI, "serve", "--store", str(store), "--port", str(port), *args],
                                stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
