"""DSL query latency on a ≥ 1M-triple graph, and the SPARQL endpoint's throughput against `oxigraph serve`.

Part 1 times each DSL form end to end (parse, resolve, compile, SPARQL, Python ranking, shaping) on the
shipped knowledge base plus generated diagnosed runs and cases (≥ 1M triples), and prints p50/p99
(goal: `suggest` p50 ≤ 20 ms).

Part 2 dumps the same graph, loads it into two on-disk stores, starts `cann-debug serve` and
`oxigraph serve --union-default-graph` on 127.0.0.1, and sends both the SPARQL the DSL forms compile
to (different runs and causes per request) from 8 concurrent clients for a fixed time each; it
prints queries per second and the ratio. Both servers answer the same queries with the same rows
(checked on a sample before timing).

    python -m bench.query_bench [--runs 2300] [--cases 2000] [--repeat 200] [--seconds 6] [--clients 8]
    python -m bench.query_bench --quick          # a small smoke run

Figures depend on the machine and on what else runs on it; the clients share the CPUs with the
servers, so the ratio is more telling than the absolute numbers.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pyoxigraph as ox

from debugtune.kg import OxigraphStore, open_store
from debugtune.kg.assertions import finding_triples, hypothesis_triples, run_triples
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import local_name, package_graph, run_graph
from debugtune.kg.records import DIMENSION_IRIS, Finding, Hypothesis
from debugtune.query import compile_text, run_query

DIMENSION_OF = {v: k for k, v in DIMENSION_IRIS.items()}
ENTITIES = {"layer": "layers.{i}.mlp", "expert": "layers.{i}/expert:{j}", "rank": "rank:{j}", "run": "",
            "link": "link:{i}-{j}", "device": "device:npu{j}"}
LOCATIONS = {"ExpertImbalance": "expert", "DeadExperts": "expert", "TokenDropping": "expert",
             "SlowRank": "rank", "SlowLink": "link", "ThermalThrottling": "device"}


def knowledge(store) -> dict:
    """Causes with remedies and the symptoms they lead to, and each symptom's dimension, from the KB."""
    links = store.select("""SELECT DISTINCT ?c ?s WHERE { ?l a dt:CausalLink ; dt:from ?c ; dt:to ?s .
        ?c a dt:Cause . ?r a dt:Remedy ; dt:addresses ?c }""").dicts()
    remedies = store.select("SELECT ?c ?r WHERE { ?r a dt:Remedy ; dt:addresses ?c }").dicts()
    dims = store.select("SELECT ?s ?d WHERE { ?s a dt:Symptom ; dt:inDimension ?d }").dicts()
    out = {"symptoms_of": {}, "remedies_of": {}, "dimension": {}}
    for r in links:
        out["symptoms_of"].setdefault(local_name(r["c"]), []).append(local_name(r["s"]))
    for r in remedies:
        out["remedies_of"].setdefault(local_name(r["c"]), []).append(local_name(r["r"]))
    for r in dims:
        out["dimension"][local_name(r["s"])] = DIMENSION_OF[local_name(r["d"])]
    out["causes"] = sorted(c for c in out["symptoms_of"] if c in out["remedies_of"])
    out["all_symptoms"] = sorted(out["dimension"])
    return out


def _finding(rng: random.Random, kb: dict, run: int, n: int, symptom: str) -> Finding:
    loc = LOCATIONS.get(symptom, rng.choice(["layer", "run", "layer"]))
    entity = ENTITIES[loc].format(i=rng.randrange(48), j=rng.randrange(64))
    onset = rng.randrange(0, 5000)
    return Finding(f"f{n}", symptom, kb["dimension"][symptom], entity, onset, onset + rng.randrange(10, 800),
                   round(rng.uniform(0.2, 1.0), 3), {"z": rng.uniform(3, 30), "value": rng.uniform(0, 1e3)},
                   "bench")


def add_runs(store, kb: dict, runs: int, findings_per_run: int, seed: int) -> dict[str, str]:
    """Diagnosed runs (findings + hypotheses in their own graphs); returns run id → true cause."""
    rng = random.Random(seed)
    truth, batch = {}, []
    for i in range(runs):
        run_id, cause = f"bench-{i}", rng.choice(kb["causes"])
        linked = kb["symptoms_of"][cause]
        findings = [_finding(rng, kb, i, n, rng.choice(linked) if n % 3 else rng.choice(kb["all_symptoms"]))
                    for n in range(findings_per_run)]
        others = rng.sample([c for c in kb["causes"] if c != cause], 2)
        conf = rng.uniform(0.5, 0.9)
        hyps = [Hypothesis(cause, conf, (cause, *linked[:2]), ("f1", "f2"), f"{cause} explains the findings", 1),
                Hypothesis(others[0], (1 - conf) * 0.6, (others[0],), ("f3",), "alternative", 2),
                Hypothesis(others[1], (1 - conf) * 0.3, (others[1],), ("f4",), "alternative", 3)]
        body = run_triples(run_id, {"run_dir": f"/data/runs/{run_id}", "steps": 6000, "world_size": 1024})
        body += "".join(finding_triples(run_id, f) for f in findings)
        body += "".join(hypothesis_triples(run_id, h) for h in hyps)
        batch.append(f"GRAPH <{run_graph(run_id)}> {{\n{body}}}")
        truth[run_id] = cause
        if len(batch) == 25 or i == runs - 1:
            store.update("INSERT DATA {\n" + "\n".join(batch) + "\n}")
            batch = []
    return truth


def add_cases(store, kb: dict, cases: int, seed: int) -> None:
    """Solved cases in an imported-package graph, with signatures drawn from the causal links."""
    rng = random.Random(seed + 1)
    parts = ["@prefix dt: <https://w3id.org/debugtune#> . @prefix kb: <https://w3id.org/debugtune/kb/> .",
             "@prefix skos: <http://www.w3.org/2004/02/skos/core#> . @prefix dct: <http://purl.org/dc/terms/> ."]
    for i in range(cases):
        cause = rng.choice(kb["causes"])
        symptoms = rng.sample(kb["symptoms_of"][cause], min(len(kb["symptoms_of"][cause]), rng.randint(1, 3)))
        items = " , ".join(
            f"[ a dt:SignatureItem ; dt:symptom kb:{s} ; dt:locationKind "
            f"dt:{LOCATIONS.get(s, 'layer').capitalize()}Location ; dt:severity {rng.uniform(0.3, 1):.3f} ]"
            for s in symptoms)
        parts.append(f"<urn:bench:case:{i}> a dt:Case ; skos:prefLabel \"bench case {i}\"@en ; "
                     f"dct:source <https://example.org/bench/{i}> ; dt:signature {items} ; "
                     f"dt:confirmedCause kb:{cause} ; dt:appliedRemedy kb:{rng.choice(kb['remedies_of'][cause])} ; "
                     f"dt:outcome dt:{rng.choice(['Success', 'Success', 'Failure'])} .")
    store.load_data("\n".join(parts), graph=package_graph("bench"))


def dsl_queries(truth: dict[str, str], kb: dict, rng: random.Random) -> dict[str, Callable[[], str]]:
    runs = sorted(truth)

    def run() -> str:
        return rng.choice(runs)

    def explain() -> str:
        r = run()
        return f"explain cause {truth[r]} for run {r}"

    return {
        "suggest": lambda: f"suggest for run {run()} limit 3",
        "suggest (constraints, weights)": lambda: (f"suggest for run {run()} where risk <= medium and cost <= 5000 "
                                                   "card_hours rank by effectiveness 0.6, cost 0.2, risk 0.2 limit 3"),
        "symptoms": lambda: f"symptoms of run {run()} where severity >= 0.5 order by onset",
        "causes": lambda: f"causes of run {run()} limit 3",
        "explain": explain,
        "remedies": lambda: f"remedies for cause {rng.choice(kb['causes'])}",
        "cases similar to": lambda: f"cases similar to run {run()} threshold 0.85 limit 5",
        "experiments": lambda: "experiments of remedy RouterInitRescale",
    }


def part1(store, queries: dict[str, Callable[[], str]], repeat: int) -> None:
    print(f"\n## DSL latency (end to end, {repeat} queries per form, random runs)\n")
    print("| form | p50 ms | p99 ms | rows (last) |\n|---|---:|---:|---:|")
    for name, make in queries.items():
        n = max(10, repeat // 10) if name in ("cases similar to",) else repeat
        times, rows = [], 0
        for _ in range(n):
            text = make()
            t0 = time.perf_counter()
            rows = len(run_query(text, store))
            times.append((time.perf_counter() - t0) * 1000)
        p50, p99 = np.percentile(times, 50), np.percentile(times, 99)
        goal = " (goal ≤ 20)" if name == "suggest" else ""
        print(f"| {name} | {p50:.2f}{goal} | {p99:.2f} | {rows} |")


def _wait(url: str, proc: subprocess.Popen, path: str) -> None:
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(url + path, params={"query": "ASK {}"}, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-1500:] if proc.stderr else ''}")
        time.sleep(0.3)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load(url: str, sparql: str) -> tuple[int, list]:
    r = httpx.post(url, content=sparql, headers={"content-type": "application/sparql-query",
                                                 "accept": "application/sparql-results+json"}, timeout=120)
    body = r.json() if r.status_code == 200 else {}
    return r.status_code, sorted(str(sorted(b.items())) for b in body.get("results", {}).get("bindings", []))


def hammer(url: str, texts: list[str], seconds: float, clients: int) -> tuple[float, int]:
    """Queries per second with ``clients`` threads sending ``texts`` round-robin for ``seconds``."""
    done, errors = [0] * clients, [0] * clients
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(timeout=120) as c:
            i = k
            while time.monotonic() < stop:
                r = c.post(url, content=texts[i % len(texts)],
                           headers={"content-type": "application/sparql-query",
                                    "accept": "application/sparql-results+json"})
                done[k] += r.status_code == 200
                errors[k] += r.status_code != 200
                i += clients
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0), sum(errors)


def part2(store, queries: dict[str, Callable[[], str]], seconds: float, clients: int) -> None:
    print(f"\n## Endpoint throughput: `cann-debug serve` against `oxigraph serve` ({clients} clients, "
          f"{seconds:g} s per query form, both on-disk stores of the same data)\n")
    forms = ["suggest", "symptoms", "causes", "explain", "remedies"]
    texts = {f: [compile_text(queries[f](), store).sparql[0] for _ in range(200)] for f in forms}
    oxigraph = str(Path(sys.executable).with_name("oxigraph"))
    with tempfile.TemporaryDirectory(prefix="query-bench-") as tmp:
        dump = Path(tmp) / "graph.nq"
        store.raw.dump(str(dump), format=ox.RdfFormat.N_QUADS)
        ours_dir = Path(tmp) / "ours"
        disk = ox.Store(str(ours_dir))
        disk.bulk_load(path=str(dump), format=ox.RdfFormat.N_QUADS)
        disk.optimize()
        del disk
        gc.collect()
        subprocess.run([oxigraph, "load", "--location", str(Path(tmp) / "oxi"), "--file", str(dump)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p1, p2 = _port(), _port()
        ours = subprocess.Popen([sys.executable, "-c", "from debugtune.cli import debug_main; debug_main()",
                                 "serve", "--store", str(ours_dir), "--port", str(p1), "--workers", "8",
                                 "--timeout", "120", "--max-rows", "10000000"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        peer = subprocess.Popen([oxigraph, "serve", "--location", str(Path(tmp) / "oxi"), "--bind",
                                 f"127.0.0.1:{p2}", "--union-default-graph"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        urls = {"debugtune": f"http://127.0.0.1:{p1}/sparql", "oxigraph": f"http://127.0.0.1:{p2}/query"}
        try:
            _wait(f"http://127.0.0.1:{p1}", ours, "/sparql")
            _wait(f"http://127.0.0.1:{p2}", peer, "/query")
            for f in forms:
                for text in texts[f][:3]:
                    a, b = _load(urls["debugtune"], text), _load(urls["oxigraph"], text)
                    assert a[0] == b[0] == 200 and a[1] == b[1], f"{f}: the servers disagree"
            print("| query form | debugtune q/s | oxigraph q/s | ratio | errors |\n|---|---:|---:|---:|---:|")
            totals = {"debugtune": [], "oxigraph": []}
            for f in forms:
                res = {name: hammer(url, texts[f], seconds, clients) for name, url in urls.items()}
                for name in res:
                    totals[name].append(res[name][0])
                ratio = res["debugtune"][0] / res["oxigraph"][0] if res["oxigraph"][0] else float("nan")
                print(f"| {f} | {res['debugtune'][0]:.0f} | {res['oxigraph'][0]:.0f} | {ratio:.2f} | "
                      f"{res['debugtune'][1]} / {res['oxigraph'][1]} |")
            ours_mean, peer_mean = statistics.mean(totals["debugtune"]), statistics.mean(totals["oxigraph"])
            print(f"| mean | {ours_mean:.0f} | {peer_mean:.0f} | {ours_mean / peer_mean:.2f} | |")
        finally:
            for proc in (ours, peer):
                proc.terminate()
                proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2300)
    ap.add_argument("--findings", type=int, default=20, help="findings per run")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a small smoke run (not ≥ 1M triples)")
    ap.add_argument("--skip-endpoint", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.cases, args.repeat, args.seconds = 100, 100, 30, 1.0
    store = open_store(None)
    assert isinstance(store, OxigraphStore)
    t0 = time.perf_counter()
    load_knowledge(store)
    kb = knowledge(store)
    truth = add_runs(store, kb, args.runs, args.findings, args.seed)
    add_cases(store, kb, args.cases, args.seed)
    print(f"# query bench: {len(store.raw):,} triples ({args.runs} runs × {args.findings} findings, "
          f"{args.cases} cases, the shipped KB) built in {time.perf_counter() - t0:.1f} s")
    queries = dsl_queries(truth, kb, random.Random(args.seed))
    part1(store, queries, args.repeat)
    if not args.skip_endpoint:
        part2(store, queries, args.seconds, args.clients)


if __name__ == "__main__":
    main()
