"""Scale of the case and suggestion queries: `suggest` and `cases similar to run` over many imported cases.

    python bench/case_scale.py [--cases 1000] [--copies 4] [--repeat 9]

One real package is made (`cann-tune contribute` on a diagnosed run) and imported with
`import_package`; then its graph is copied ``--cases - 1`` times into new package graphs, each with
its own case IRI, as further imports would write them (importing 1,000 packages one by one would
spend the time on SHACL, not on what is measured). A second store holds ``--copies`` copies of one
case under the same IRI in different graphs: what re-serialised packages did before a case was
imported once (issue 18), and what the queries must still survive. Prints p50/p90 of `suggest` and
`similar_cases` for each store (issue 18's goal: `suggest` p50 ≤ 50 ms at 1,000 cases).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _store_with_package(tmp: Path):
    from debugtune.kg.packages import import_package
    from tests.test_packages import diagnosed_store, make_package

    store = diagnosed_store("bench-run")
    package = make_package(tmp / "case.zip", diagnosed_store("source-run"), run_id="source-run")
    result = import_package(store, package, importer="bench")
    return store, result


def _copy_graph(store, graph: str, new_graph: str, old_case: str, new_case: str | None, rng) -> None:
    """Copy a package graph as another import of a case: fresh blank nodes, a new case IRI (unless None),
    and, for a new case, signature severities moved a little so every case has its own signature."""
    import pyoxigraph as ox

    from debugtune.kg.namespaces import DT

    fresh: dict[str, ox.BlankNode] = {}  # a parse gives each import its own blank nodes
    severity = ox.NamedNode(DT + "severity")

    def term(t):
        if isinstance(t, ox.BlankNode):
            return fresh.setdefault(t.value, ox.BlankNode())
        if new_case is not None and t == ox.NamedNode(old_case):
            return ox.NamedNode(new_case)
        return t

    quads = []
    for q in store.raw.quads_for_pattern(None, None, None, ox.NamedNode(graph)):
        obj = term(q.object)
        if new_case is not None and q.predicate == severity and isinstance(q.subject, ox.BlankNode):
            obj = ox.Literal(repr(round(min(1.0, max(0.0, float(obj.value) + rng.uniform(-0.3, 0.3))), 3)),
                             datatype=obj.datatype)
        quads.append(ox.Quad(term(q.subject), q.predicate, obj, ox.NamedNode(new_graph)))
    store.raw.extend(quads)


def _timed(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return statistics.median(times) * 1000, times[int(0.9 * (len(times) - 1))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    from debugtune.engine.suggest import similar_cases, stored_cases, suggest

    with tempfile.TemporaryDirectory() as tmp:
        for label, n, same_iri in (("distinct cases", args.cases, False), ("copies of one case", args.copies, True)):
            store, result = _store_with_package(Path(tmp))
            [case] = result.cases
            rng = random.Random(0)
            t0 = time.perf_counter()
            for i in range(1, n):
                _copy_graph(store, result.graph, f"{result.graph}-copy{i}", case,
                            None if same_iri else f"{case}-{i}", rng)
            built = time.perf_counter() - t0
            t0 = time.perf_counter()
            count = len(stored_cases(store))
            first = time.perf_counter() - t0
            sug = _timed(lambda st=store: suggest(st, "bench-run"), args.repeat)
            sim = _timed(lambda st=store: similar_cases(st, "bench-run", threshold=0.0), args.repeat)
            print(f"{label}: {n} imported ({count} cases in the store with the knowledge base's; built in "
                  f"{built:.1f} s; first read of the cases {first * 1000:.0f} ms, then cached per store version)")
            print(f"  suggest        p50 {sug[0]:7.1f} ms   p90 {sug[1]:7.1f} ms")
            print(f"  similar_cases  p50 {sim[0]:7.1f} ms   p90 {sim[1]:7.1f} ms")


if __name__ == "__main__":
    main()
