"""Issue 18, knowledge integrity: a package is checked without the other packages, a case is imported once, and
the case query is linear in the copies of a case."""

from __future__ import annotations

import json
from pathlib import Path

import pyoxigraph as ox
import pytest

from debugtune.engine.suggest import similar_cases, stored_cases
from debugtune.engine.suggest.queries import cases_sparql
from debugtune.kg.namespaces import DT
from debugtune.kg.package_archive import METADATA, PackageError
from debugtune.kg.package_validate import validate_package_triples
from debugtune.kg.packages import import_package
from tests.test_packages import diagnosed_store, fresh_store, make_package, read_zip, repack, write_zip


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return make_package(tmp_path_factory.mktemp("integrity") / "case.zip")


def _case_variants(package: Path) -> dict[str, bytes]:
    """The same case made invalid three ways (each refused by SHACL on a fresh store)."""
    ttl = read_zip(package)["case.ttl"]
    triples = list(ox.parse(ttl, format=ox.RdfFormat.TURTLE))
    [case] = {t.subject for t in triples if t.object == ox.NamedNode(DT + "Case")}

    def turtle(ts: list[ox.Triple]) -> bytes:
        return ox.serialize(ts, format=ox.RdfFormat.TURTLE)

    outcome, cause = ox.NamedNode(DT + "outcome"), ox.NamedNode(DT + "confirmedCause")
    return {
        "two outcomes": turtle([*triples, ox.Triple(case, outcome, ox.NamedNode(DT + "Failure"))]),
        "no confirmed cause": turtle([t for t in triples if t.predicate != cause]),
        "a remedy as its cause": turtle([t if t.predicate != cause else
                                         ox.Triple(case, cause, ox.NamedNode("https://w3id.org/debugtune/kb/"
                                                                             "RouterInitRescale"))
                                         for t in triples]),
    }


def test_another_package_does_not_excuse_violations(package: Path, tmp_path: Path) -> None:
    """main dropped the violations of every node the store typed, so after one import these all passed SHACL."""
    store = fresh_store()
    import_package(store, package)
    for name, ttl in _case_variants(package).items():
        triples = list(ox.parse(ttl, format=ox.RdfFormat.TURTLE))
        assert validate_package_triples(store, triples), name
        before = store.count()
        with pytest.raises(PackageError):
            import_package(store, repack(package, tmp_path / f"{len(name)}.zip", {"case.ttl": ttl}))
        assert store.count() == before, name


def test_a_case_is_imported_once(package: Path, tmp_path: Path) -> None:
    """Re-serialised metadata gives another archive hash but the same case graph: already imported."""
    store = fresh_store()
    first = import_package(store, package)
    graphs, count = store.graphs(), store.count()
    files = read_zip(package)
    for k, dump in enumerate((lambda d: json.dumps(d), lambda d: json.dumps(d, indent=1, sort_keys=True))):
        meta = dump(json.loads(files[METADATA])).encode()
        again = import_package(store, write_zip(tmp_path / f"resaved{k}.zip", {**files, METADATA: meta}))
        assert again.already_imported and again.graph == first.graph
    assert store.graphs() == graphs and store.count() == count
    changed = files["case.ttl"].replace(b'"0.9"', b'"0.7"')
    with pytest.raises(PackageError, match="already in the store"):
        import_package(store, repack(package, tmp_path / "changed.zip", {"case.ttl": changed}))
    assert store.count() == count
    assert [c.case for c in stored_cases(store)].count(first.cases[0]) == 1


def _copy(store, graph: str, new_graph: str) -> None:
    fresh: dict[str, ox.BlankNode] = {}
    store.raw.extend([ox.Quad(*(fresh.setdefault(t.value, ox.BlankNode()) if isinstance(t, ox.BlankNode) else t
                                for t in (q.subject, q.predicate, q.object)), ox.NamedNode(new_graph))
                      for q in store.raw.quads_for_pattern(None, None, None, ox.NamedNode(graph))])


def test_the_case_query_is_linear_in_copies_of_a_case(package: Path) -> None:
    """Copies of one case in several graphs (what re-serialised packages left on main): rows grow linearly.

    On main the query joined over the union of graphs, so two copies gave 2^k times the rows of one."""
    store = diagnosed_store("run-a")
    result = import_package(store, package)

    def rows() -> int:
        return sum(1 for row in store.query(cases_sparql()).rows if str(row[1].value) == result.cases[0])

    one = rows()
    _copy(store, result.graph, result.graph + "-copy")
    assert rows() == 2 * one
    [case] = [c for c in similar_cases(store, "run-a", threshold=0.0) if c.case == result.cases[0]]
    assert case.score == pytest.approx(1.0)
