"""Start a real `oxigraph serve` on 127.0.0.1 (random free port) for tests; stopped by the caller."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def oxigraph_binary() -> str | None:
    """The `oxigraph` CLI of this venv (PyPI wheel `oxigraph`), or one on PATH."""
    local = Path(sys.executable).with_name("oxigraph")
    return str(local) if local.exists() else shutil.which("oxigraph")


@contextmanager
def oxigraph_serve(location: Path | None = None, *, union: bool = True):
    """Yield the base URL of a running `oxigraph serve`; the process is terminated afterwards."""
    binary = oxigraph_binary()
    if binary is None:
        raise RuntimeError("the oxigraph CLI is not installed (pip install oxigraph)")
    port = free_port()
    cmd = [binary, "serve", "--bind", f"127.0.0.1:{port}"]
    if location is not None:
        cmd += ["--location", str(location)]
    if union:
        cmd.append("--union-default-graph")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/query", params={"query": "ASK {}"}, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"oxigraph serve did not start: {proc.stderr.read().decode()[:500]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
