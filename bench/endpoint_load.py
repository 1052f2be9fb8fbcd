"""Load and lockout on the SPARQL endpoint: many clients at once, then timed-out queries and a cheap one after.

    python bench/endpoint_load.py [--clients 64] [--seconds 20] [--workers 4] [--timeout 2]
                                  [--store memory|disk|disk-update] [--json]

Starts a real `cann-debug serve` (the knowledge base loaded) on 127.0.0.1 only, on a free port, in its own
process, and drives it from one asyncio client process. ``--store memory`` serves an in-memory store;
``disk`` an on-disk store written as `cann-debug demo --store DIR` writes it (its session store), served
read-only as after `make demo`; ``disk-update`` the same with ``--allow-update`` and a token, while an update
lands every 0.5 s (each one replaces the workers, which open a fresh checkpoint while the server compacts).

1. load: ``--clients`` concurrent clients (a comma-separated list runs each in turn, e.g. 8,32,64) send cheap
   queries (ASK, SELECT with LIMIT, a label lookup, a CONSTRUCT) back to back for ``--seconds``; prints
   requests, errors (any status but 200), queries/s, latency p50/p99, and the query workers that died or were
   stopped (the server log's lines, docs/server.md), against the peer: the same queries run in this process on
   an embedded store (``Store.query``, what a worker runs), one at a time.
2. lockout: twice as many cross-product queries as there are workers, each past the time limit, sent at
   once; then cheap queries, each timed. Before issue 18 a timed-out query kept its worker and every query
   after got 503 for as long as it was watched.

Issue 18's goal: 0 errors and p99 ≤ 500 ms at 64 clients for 20 s; the first cheap query after the lockout
answered in ≤ 1 s. Issue 36's: 0 worker deaths at 8 / 32 / 64 clients. Bounded: at most 256 clients and
120 s per load; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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


TOKEN = "bench-endpoint-load-token-0123456789"
UPDATE = "INSERT DATA {{ GRAPH <urn:bench:load> {{ <urn:bench:s{i}> <urn:bench:p> {i} }} }}"
DEATHS = re.compile(r"query worker \d+ (died|stopped: memory limit|stopped: it did not start)")


def _write_store(kind: str, home: str) -> str:
    """The store to serve: ``memory``, or an on-disk one written by the demo's session store (knowledge base)."""
    if kind == "memory":
        return "memory"
    from debugtune.cli.common import session_store

    path = str(Path(home) / "store")
    with session_store(path):
        pass
    return path


def _serve(port: int, args, home: str, log) -> subprocess.Popen:
    store = _write_store(args.store, home)
    cmd = [sys.executable, "-c", "from debugtune.cli import debug_main; debug_main()", "serve", "--store", store,
           "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers), "--timeout", str(args.timeout)]
    if args.store == "disk-update":
        token = Path(home) / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        cmd += ["--allow-update", "--token-file", str(token)]
    return subprocess.Popen(cmd, env={**os.environ, "DEBUGTUNE_HOME": home}, stdout=subprocess.DEVNULL,
                            stderr=log)


def _deaths(log_path: Path) -> int:
    """Worker deaths and memory stops the server logged (timeouts are the lockout's own and not counted)."""
    return len(DEATHS.findall(log_path.read_text(errors="replace")))


def _peer(seconds: float = 3.0) -> dict:
    """The cheap queries on an embedded in-memory store with the knowledge base, one at a time, in this process."""
    from debugtune.kg import open_store
    from debugtune.kg.knowledge import load_knowledge

    store = open_store(None)
    load_knowledge(store)
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for q in CHEAP:
            t0 = time.perf_counter()
            store.query(q)
            latencies.append(time.perf_counter() - t0)
    latencies.sort()
    return {"requests": len(latencies), "p50_ms": round(statistics.median(latencies) * 1000, 3),
            "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))] * 1000, 3)}


async def _writer(client, url: str, stop: asyncio.Event, errors: dict[str, int]) -> int:
    """An update every 0.5 s until ``stop`` (``--store disk-update``); returns how many landed."""
    headers = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/sparql-update"}
    i = 0
    while not stop.is_set():
        r = await client.post(url + "/sparql", content=UPDATE.format(i=i), headers=headers, timeout=60)
        if r.status_code != 204:
            errors[f"update {r.status_code}"] = errors.get(f"update {r.status_code}", 0) + 1
        i += 1
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass
    return i


async def _wait_up(client, url: str, proc: subprocess.Popen, log_path: Path, limit_s: float = 180) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log_path.read_text(errors='replace')[-3000:]}")
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


async def _load(client, url: str, clients: int, seconds: float, *, updates: bool, log_path: Path) -> dict:
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

    deaths_before = _deaths(log_path)
    stop_writer = asyncio.Event()
    writer = asyncio.ensure_future(_writer(client, url, stop_writer, errors)) if updates else None
    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(k) for k in range(clients)))
    elapsed = time.perf_counter() - t0
    stop_writer.set()
    written = await writer if writer is not None else 0
    latencies.sort()
    return {"clients": clients, "seconds": round(elapsed, 1), "requests": len(latencies), "updates": written,
            "worker_deaths": _deaths(log_path) - deaths_before,
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
    peer = _peer()
    with tempfile.TemporaryDirectory() as home:
        log_path = Path(home) / "serve.log"
        with log_path.open("wb") as log:
            proc = _serve(port, args, home, log)
        try:
            most = max(args.clients) + 8
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=most,
                                                             max_keepalive_connections=most)) as client:
                await _wait_up(client, url, proc, log_path)
                for q in CHEAP:  # warm the workers
                    await client.get(url + "/sparql", params={"query": q}, timeout=60)
                loads = [await _load(client, url, n, args.seconds, updates=args.store == "disk-update",
                                     log_path=log_path) for n in args.clients]
                lockout = await _lockout(client, url, args.workers)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        lockout["worker_deaths_total"] = _deaths(log_path)
    for load in loads:
        load["p50_vs_peer"] = round(load["p50_ms"] / peer["p50_ms"], 1)
    return {"server": {"workers": args.workers, "timeout_s": args.timeout, "store": args.store}, "peer": peer,
            "loads": loads, "lockout": lockout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", default="64", help="concurrent clients; a comma-separated list runs each")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=2.0, help="the server's per-query time limit (s)")
    ap.add_argument("--store", choices=("memory", "disk", "disk-update"), default="memory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.clients = [max(1, min(int(n), 256)) for n in str(args.clients).split(",")]
    args.seconds = max(1.0, min(args.seconds, 120.0))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    report = asyncio.run(_main(args))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    peer, lock = report["peer"], report["lockout"]
    print(f"peer (embedded store, one query at a time in this process): p50 {peer['p50_ms']} ms, "
          f"p99 {peer['p99_ms']} ms over {peer['requests']} queries")
    for load in report["loads"]:
        print(f"load ({args.store} store{', an update every 0.5 s' if args.store == 'disk-update' else ''}): "
              f"{load['clients']} clients for {load['seconds']} s: {load['requests']} requests, {load['errors']} "
              f"errors {load['errors_by_status'] or ''}, {load['worker_deaths']} worker deaths, "
              f"{load['queries_per_s']} queries/s, p50 {load['p50_ms']} ms ({load['p50_vs_peer']}× the peer), "
              f"p99 {load['p99_ms']} ms" + (f", {load['updates']} updates" if load["updates"] else ""))
    print(f"lockout: {lock['heavy_queries']} cross products on {args.workers} workers -> {lock['heavy_statuses']} "
          f"after {lock['heavy_seconds']} s; then cheap queries {lock['cheap_after']} "
          f"(first in {lock['first_cheap_ms']} ms); worker deaths in the whole run: {lock['worker_deaths_total']}")


if __name__ == "__main__":
    main()
