"""Load and lockout on the SPARQL endpoint: many clients at once, then timed-out queries and a cheap one after.

    python bench/endpoint_load.py [--clients 64] [--seconds 20] [--workers 4] [--timeout 2] [--json]

Starts a real `cann-debug serve --store memory` (the knowledge base loaded) on 127.0.0.1 only, on a free
port, in its own process, and drives it from one asyncio client process:

1. load: ``--clients`` concurrent clients send cheap queries (ASK, SELECT with LIMIT, a label lookup, a
   CONSTRUCT) back to back for ``--seconds``; prints requests, errors (any status but 200), queries/s and
   latency p50/p99.
2. lockout: twice as many cross-product queries as there are workers, each past the time limit, sent at
   once; then cheap queries, each timed. Before issue 18 a timed-out query kept its worker and every query
   after got 503 for as long as it was watched.

Issue 18's goal: 0 errors and p99 ≤ 500 ms at 64 clients for 20 s; the first cheap query after the lockout
answered in ≤ 1 s. Bounded: at most 256 clients and 120 s; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

CHEAP = (
    "ASK { kb:GateInitBias a dt:Cause }",
    "SELECT ?c WHERE { ?c a dt:Cause } ORDER BY ?c LIMIT 10",
    "SELECT ?l WHERE { kb:LossSpike skos:prefLabel ?l }",
    "CONSTRUCT { ?r dt:addresses kb:GateInitBias } WHERE { ?r dt:addresses kb:GateInitBias }",
)
HEAVY = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, workers: int, timeout: float, home: str) -> subprocess.Popen:
    cmd = [sys.executable, "-c", "from debugtune.cli import debug_main; debug_main()", "serve", "--store", "memory",
           "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--timeout", str(timeout)]
    return subprocess.Popen(cmd, env={**os.environ, "DEBUGTUNE_HOME": home}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


async def _wait_up(client, url: str, proc: subprocess.Popen, limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            if (await client.get(url + "/health", timeout=2)).status_code == 200:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        await asyncio.sleep(0.25)
    raise RuntimeError("the server did not come up")


class _Connection:
    """One keep-alive HTTP/1.1 connection with a minimal client: the bench's own CPU stays small, so the figures
    are the server's (a full client library costs about as much per request as the server on 2 cores)."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _load(client, url: str, clients: int, seconds: float) -> dict:
    from urllib.parse import urlencode

    latencies: list[float] = []
    errors: dict[str, int] = {}
    stop = time.monotonic() + seconds
    port = int(url.rsplit(":", 1)[1])
    targets = ["/sparql?" + urlencode({"query": q}) for q in CHEAP]

    async def one_client(k: int) -> None:
        conn, i = _Connection(port), k
        try:
            while time.monotonic() < stop:
                target = targets[i % len(targets)]
                i += 1
                t0 = time.perf_counter()
                try:
                    status = str(await asyncio.wait_for(conn.get(target), 30))
                except Exception as err:  # noqa: BLE001 - counted as an error; the next request reconnects
                    status = type(err).__name__
                    conn.close()
                    conn = _Connection(port)
                latencies.append(time.perf_counter() - t0)
                if status != "200":
                    errors[status] = errors.get(status, 0) + 1
        finally:
            conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(k) for k in range(clients)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {"clients": clients, "seconds": round(elapsed, 1), "requests": len(latencies),
            "errors": sum(errors.values()), "errors_by_status": errors,
            "queries_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(statistics.median(latencies) * 1000, 1),
            "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 1)}


async def _lockout(client, url: str, workers: int) -> dict:
    t0 = time.perf_counter()
    heavy = await asyncio.gather(*(client.get(url + "/sparql", params={"query": HEAVY}, timeout=120)
                                   for _ in range(2 * workers)))
    waited = time.perf_counter() - t0
    after = []
    for k in range(5):
        t1 = time.perf_counter()
        r = await client.get(url + "/sparql", params={"query": CHEAP[k % len(CHEAP)]}, timeout=120)
        after.append((r.status_code, round((time.perf_counter() - t1) * 1000, 1)))
    return {"heavy_queries": len(heavy), "heavy_statuses": sorted({r.status_code for r in heavy}),
            "heavy_seconds": round(waited, 1), "cheap_after": after,
            "first_cheap_ms": after[0][1], "cheap_after_all_200": all(s == 200 for s, _ in after)}


async def _main(args) -> dict:
    import httpx

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as home:
        proc = _serve(port, args.workers, args.timeout, home)
        try:
            limits = httpx.Limits(max_connections=args.clients + 8, max_keepalive_connections=args.clients + 8)
            async with httpx.AsyncClient(limits=limits) as client:
                await _wait_up(client, url, proc)
                for q in CHEAP:  # warm the workers
                    await client.get(url + "/sparql", params={"query": q}, timeout=60)
                load = await _load(client, url, args.clients, args.seconds)
                lockout = await _lockout(client, url, args.workers)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {"server": {"workers": args.workers, "timeout_s": args.timeout}, "load": load, "lockout": lockout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=2.0, help="the server's per-query time limit (s)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.clients = max(1, min(args.clients, 256))
    args.seconds = max(1.0, min(args.seconds, 120.0))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    report = asyncio.run(_main(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    load, lock = report["load"], report["lockout"]
    print(f"load: {load['clients']} clients for {load['seconds']} s: {load['requests']} requests, {load['errors']} "
          f"errors {load['errors_by_status'] or ''}, {load['queries_per_s']} queries/s, p50 {load['p50_ms']} ms, "
          f"p99 {load['p99_ms']} ms")
    print(f"lockout: {lock['heavy_queries']} cross products on {args.workers} workers -> {lock['heavy_statuses']} "
          f"after {lock['heavy_seconds']} s; then cheap queries {lock['cheap_after']} "
          f"(first in {lock['first_cheap_ms']} ms)")


if __name__ == "__main__":
    main()
