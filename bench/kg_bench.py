"""Knowledge-graph store benchmark: bulk load and five typical queries on 1M generated triples.

Oxigraph in memory and on disk at the full size; rdflib (the peer) and Oxigraph in memory at the
peer size (default 100k), so the printed ratio compares equal sizes.

    python -m bench.kg_bench [--triples 1000000] [--peer-triples 100000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyoxigraph as ox

from debugtune.kg import open_store

DT = "https://w3id.org/debugtune#"
KB = "https://w3id.org/debugtune/kb/"
SYMPTOMS = 26
DIMENSIONS = ("GradientFlow", "ConvergenceFlow", "CommunicationFlow", "HardwareFlow")
TRIPLES_PER_FINDING = 7

QUERIES = {
    "point": f"""SELECT ?sev WHERE {{ <urn:debugtune:run:r17/finding/f3> <{DT}severity> ?sev }}""",
    "join+filter+order+limit": f"""PREFIX dt: <{DT}>
        SELECT ?run ?f ?sev WHERE {{
          ?f dt:inRun ?r ; dt:inDimension dt:GradientFlow ; dt:severity ?sev ; dt:onsetStep ?on .
          ?r dt:runId ?run ; dt:worldSize ?ws .
          FILTER(?sev > 0.9 && ?on < 500 && ?ws >= 64)
        }} ORDER BY DESC(?sev) ?f LIMIT 20""",
    "aggregate": f"""PREFIX dt: <{DT}>
        SELECT ?s (COUNT(?f) AS ?n) (AVG(?sev) AS ?mean) WHERE {{ ?f dt:symptom ?s ; dt:severity ?sev }}
        GROUP BY ?s ORDER BY DESC(?n)""",
    "path": f"""PREFIX dt: <{DT}> SELECT (COUNT(?x) AS ?n) WHERE {{ <{KB}S0> dt:leadsTo+ ?x }}""",
    "union over named graphs": f"""PREFIX dt: <{DT}>
        SELECT ?g (COUNT(?f) AS ?n) WHERE {{ GRAPH ?g {{ ?f dt:symptom <{KB}S3> ; dt:severity ?sev
          FILTER(?sev > 0.5) }} }} GROUP BY ?g ORDER BY DESC(?n) ?g LIMIT 10""",
}


def generate(n_triples: int, seed: int = 7) -> list[ox.Quad]:
    """A diagnosis-shaped dataset: runs in their own named graphs, findings, and a symptom chain."""
    rng = np.random.default_rng(seed)
    quads: list[ox.Quad] = []
    kb = ox.NamedNode("https://w3id.org/debugtune/graph/kb")
    leads = ox.NamedNode(DT + "leadsTo")
    for i in range(SYMPTOMS - 1):
        quads.append(ox.Quad(ox.NamedNode(f"{KB}S{i}"), leads, ox.NamedNode(f"{KB}S{i + 1}"), kb))
    p = {k: ox.NamedNode(DT + k) for k in ("inRun", "symptom", "inDimension", "severity", "onsetStep",
                                             "runId", "worldSize", "entity")}
    rdf_type = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")
    finding_cls, run_cls = ox.NamedNode(DT + "Finding"), ox.NamedNode(DT + "TrainingRun")
    findings_per_run = 50
    run = 0
    while len(quads) < n_triples:
        base = f"urn:debugtune:run:r{run}/"
        g, r = ox.NamedNode(base), ox.NamedNode(base)
        quads += [ox.Quad(r, rdf_type, run_cls, g), ox.Quad(r, p["runId"], ox.Literal(f"r{run}"), g),
                  ox.Quad(r, p["worldSize"], ox.Literal(int(2 ** rng.integers(0, 11))), g)]
        sym = rng.integers(0, SYMPTOMS, findings_per_run)
        sev = rng.random(findings_per_run)
        onset = rng.integers(0, 10_000, findings_per_run)
        for j in range(findings_per_run):
            f = ox.NamedNode(f"{base}finding/f{j}")
            quads += [
                ox.Quad(f, rdf_type, finding_cls, g), ox.Quad(f, p["inRun"], r, g),
                ox.Quad(f, p["symptom"], ox.NamedNode(f"{KB}S{sym[j]}"), g),
                ox.Quad(f, p["inDimension"], ox.NamedNode(DT + DIMENSIONS[sym[j] % 4]), g),
                ox.Quad(f, p["severity"], ox.Literal(float(round(sev[j], 4))), g),
                ox.Quad(f, p["onsetStep"], ox.Literal(int(onset[j])), g),
                ox.Quad(f, p["entity"], ox.Literal(f"layers.{j % 24}"), g),
            ]
        run += 1
    return quads[:n_triples]


def p50(fn, repeat: int) -> tuple[float, int]:
    """Median wall time in ms of ``fn`` over ``repeat`` calls (after one warm-up), and its row count."""
    rows = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), rows


def oxigraph_queries(store, repeat: int) -> dict[str, tuple[float, int]]:
    return {name: p50(lambda q=q: len(store.query(q, prefixes=False)), repeat) for name, q in QUERIES.items()}


def write_nquads(quads: list[ox.Quad], path: Path) -> None:
    path.write_bytes(ox.serialize(quads, format=ox.RdfFormat.N_QUADS))


def bench_oxigraph(path: Path | None, nq: Path, repeat: int) -> tuple[float, dict]:
    store = open_store(path)
    t0 = time.perf_counter()
    if path is None:
        store.raw.load(path=str(nq), format=ox.RdfFormat.N_QUADS)
    else:
        store.raw.bulk_load(path=str(nq), format=ox.RdfFormat.N_QUADS)
        store.raw.optimize()
    load_s = time.perf_counter() - t0
    results = oxigraph_queries(store, repeat)
    store.close()
    return load_s, results


def bench_rdflib(nq: Path, repeat: int) -> tuple[float, dict]:
    import rdflib

    t0 = time.perf_counter()
    ds = rdflib.Dataset(default_union=True)
    ds.parse(nq, format="nquads")
    load_s = time.perf_counter() - t0
    results = {name: p50(lambda q=q: len(list(ds.query(q))), repeat) for name, q in QUERIES.items()}
    return load_s, results


def _size(n: int) -> str:
    return f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n / 1e3:g}k"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--triples", type=int, default=1_000_000)
    ap.add_argument("--peer-triples", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--peer-repeat", type=int, default=3)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        big, small = tmpd / "big.nq", tmpd / "small.nq"
        write_nquads(generate(args.triples), big)
        write_nquads(generate(args.peer_triples), small)
        print(f"dataset: {args.triples:,} quads ({big.stat().st_size / 2**20:.0f} MiB N-Quads); "
              f"peer size {args.peer_triples:,}")
        mem_load, mem = bench_oxigraph(None, big, args.repeat)
        disk_load, disk = bench_oxigraph(tmpd / "disk", big, args.repeat)
        small_load, small_mem = bench_oxigraph(None, small, args.repeat)
        peer_load, peer = bench_rdflib(small, args.peer_repeat)

    print(f"\nbulk load of {args.triples:,}: memory {mem_load:.2f} s ({args.triples / mem_load:,.0f} quads/s), "
          f"disk {disk_load:.2f} s (bulk_load + optimize)")
    print(f"load of {args.peer_triples:,}: oxigraph memory {small_load:.2f} s, rdflib {peer_load:.2f} s "
          f"-> ratio {peer_load / small_load:.1f}x")
    big_n, small_n = _size(args.triples), _size(args.peer_triples)
    head = (f"{'query (p50 ms)':26} {'mem ' + big_n:>9} {'disk ' + big_n:>9} {'rows':>6} | "
            f"{'oxi ' + small_n:>9} {'rdflib ' + small_n:>12} {'ratio':>8}")
    print("\n" + head + "\n" + "-" * len(head))
    for name in QUERIES:
        m, rows = mem[name]
        d, _ = disk[name]
        s, _ = small_mem[name]
        r, prow = peer[name]
        assert prow == small_mem[name][1], f"{name}: rdflib returned {prow} rows, oxigraph {small_mem[name][1]}"
        print(f"{name:26} {m:9.2f} {d:9.2f} {rows:6d} | {s:9.2f} {r:12.1f} {r / s:7.0f}x")


if __name__ == "__main__":
    main()
