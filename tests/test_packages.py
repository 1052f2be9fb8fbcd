"""Case packages: RO-Crate layout read offline, import with provenance, refusals that leave the store alone,
clashes, idempotent re-import, feedback that moves the ranking, and the knowledge-base export."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path

import pyoxigraph as ox
import pytest
from typer.testing import CliRunner

from debugtune.cli.apps import debug_app
from debugtune.engine.contribute import (
    ContributeError,
    ContributeOptions,
    contribute,
    export_knowledge,
    record_feedback,
    resolve_case,
)
from debugtune.engine.suggest import remedy_details, similar_cases, stored_cases, suggest
from debugtune.kg import open_store
from debugtune.kg.assertions import replace_diagnosis
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.namespaces import DT, GRAPH_LOCAL, SCHEMA, package_graph
from debugtune.kg.package_archive import METADATA, PackageError, content_hash
from debugtune.kg.package_crate import RO_CRATE_CONTEXT, media_type, parse_metadata
from debugtune.kg.packages import import_package, imported_packages
from debugtune.kg.records import Finding, Hypothesis
from debugtune.kg.store import Store

FINDINGS = [
    Finding("ExpertImbalance@r/expert:0", "ExpertImbalance", "convergence", "blocks.0.moe.router/expert:0", 0, 99,
            1.0, {"maxvio": 7.0, "cv": 2.6}, "moe.imbalance"),
    Finding("DeadExperts@r", "DeadExperts", "convergence", "blocks.0.moe.router", 0, 99, 0.9,
            {"dead_experts": 6.0}, "moe.dead"),
    Finding("TokenDropping@r", "TokenDropping", "convergence", "blocks.0.moe.router", 3, 99, 0.8,
            {"drop_fraction": 0.4}, "moe.dropping"),
]
HYPOTHESES = [
    Hypothesis("GateInitBias", 0.6, ("GateInitBias", "ExpertImbalance", "DeadExperts"),
               ("ExpertImbalance@r/expert:0", "DeadExperts@r"), "a router bias favours expert 0", 1),
    Hypothesis("AuxLossDisabled", 0.35, ("AuxLossDisabled", "ExpertImbalance"), ("ExpertImbalance@r/expert:0",),
               "no load-balancing loss", 2),
]


def fresh_store() -> Store:
    st = open_store(None)
    load_knowledge(st)
    return st


def diagnosed_store(run_id: str = "run-a", findings=FINDINGS, hypotheses=HYPOTHESES) -> Store:
    """A store with the knowledge base and one diagnosed run (no training needed)."""
    st = fresh_store()
    replace_diagnosis(st, run_id, {"steps": 100, "world_size": 1}, findings, (), hypotheses)
    return st


def make_package(path: Path, store: Store | None = None, run_id: str = "run-a", **options) -> Path:
    st = store or diagnosed_store(run_id)
    options.setdefault("remedy", "RouterInitRescale")
    contribute(st, run_id, path, options=ContributeOptions(**options))
    return path


def read_zip(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def write_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def repack(src: Path, dst: Path, changes: dict[str, bytes | None]) -> Path:
    """A copy of a package with files changed, added or removed, its metadata kept consistent (hasPart, size)."""
    files = read_zip(src)
    meta = json.loads(files[METADATA])
    graph = meta["@graph"]
    root = next(e for e in graph if e["@id"] == "./")
    for name, data in changes.items():
        entity = next((e for e in graph if e["@id"] == name), None)
        if data is None:
            files.pop(name, None)
            graph.remove(entity)
            root["hasPart"].remove({"@id": name})
            continue
        files[name] = data
        if entity is None:
            entity = {"@id": name, "@type": "File", "encodingFormat": media_type(name)}
            graph.append(entity)
            root["hasPart"].append({"@id": name})
        entity["contentSize"] = str(len(data))
    files[METADATA] = json.dumps(meta).encode()
    return write_zip(dst, files)


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    return make_package(tmp_path_factory.mktemp("pkg") / "case.zip", attribution="Jane Doe")


def test_layout_and_crate_metadata_read_offline(package: Path) -> None:
    files = read_zip(package)
    assert sorted(files) == ["case.ttl", "environment.json", "privacy-report.json", METADATA]
    meta = json.loads(files[METADATA])
    assert meta["@context"] == RO_CRATE_CONTEXT
    triples = parse_metadata(files[METADATA], "urn:test:pkg/")
    root = ox.NamedNode("urn:test:pkg/")
    props = {(t.predicate.value, t.object.value) for t in triples if t.subject == root}
    assert ("http://www.w3.org/1999/02/22-rdf-syntax-ns#type", DT + "CasePackage") in props
    assert ("http://www.w3.org/1999/02/22-rdf-syntax-ns#type", SCHEMA + "Dataset") in props
    assert ("http://schema.org/license", "https://spdx.org/licenses/CC-BY-SA-4.0") in props
    assert ("http://schema.org/hasPart", "urn:test:pkg/case.ttl") in props
    descriptor = ox.NamedNode("urn:test:pkg/" + METADATA)
    assert ox.Triple(descriptor, ox.NamedNode("http://purl.org/dc/terms/conformsTo"),
                     ox.NamedNode("https://w3id.org/ro/crate/1.1")) in triples
    case = [o for p, o in props if p == "http://schema.org/about"]
    assert len(case) == 1 and case[0].startswith("urn:debugtune:case:")
    assert b"dt:Case" in files["case.ttl"] and b"kb:GateInitBias" in files["case.ttl"]


def test_import_with_provenance_and_idempotent_reimport(package: Path) -> None:
    st = fresh_store()
    before = st.count()
    result = import_package(st, package, importer="tester")
    digest = content_hash(read_zip(package))
    assert not result.already_imported and result.graph == package_graph(digest)
    assert st.count() == before + result.triples and st.count(result.graph) == result.triples
    [info] = imported_packages(st)
    assert info["hash"] == digest and info["importer"] == "tester" and info["when"]
    assert st.query(f"ASK {{ GRAPH <{result.graph}> {{ <{result.root}> dct:license ?l ; prov:wasAttributedTo ?a }} }}")
    [case] = [c for c in stored_cases(st) if c.graph == result.graph]
    assert case.cause == "GateInitBias" and case.remedies == ("RouterInitRescale",) and len(case.signature) == 3
    again = import_package(st, package)
    assert again.already_imported and again.graph == result.graph
    assert st.count() == before + result.triples


def _refused(store: Store, path: Path, *expected: str, **kw) -> str:
    before = store.count()
    with pytest.raises(PackageError) as err:
        import_package(store, path, **kw)
    assert store.count() == before, "a refused package must leave the store unchanged"
    for text in expected:
        assert text in str(err.value)
    return str(err.value)


def test_zip_slip_absolute_paths_and_links_are_refused(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    good = read_zip(package)
    _refused(st, write_zip(tmp_path / "slip.zip", {**good, "../evil.ttl": b"x"}), "zip-slip", "../evil.ttl")
    _refused(st, write_zip(tmp_path / "abs.zip", {**good, "/etc/evil.ttl": b"x"}), "absolute path")
    _refused(st, write_zip(tmp_path / "deep.zip", {**good, "a/b/c.ttl": b"x"}), "nested deeper")
    link = zipfile.ZipInfo("link.ttl")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in good.items():
            zf.writestr(name, data)
        zf.writestr(link, "/etc/passwd")
    (tmp_path / "link.zip").write_bytes(buf.getvalue())
    _refused(st, tmp_path / "link.zip", "symbolic link")


def test_oversized_bomb_crowded_and_foreign_files_are_refused(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    good = read_zip(package)
    _refused(st, write_zip(tmp_path / "big.zip", {**good, "big.ttl": b"#" * (17 * 2**20)}), "oversized", "big.ttl")
    _refused(st, write_zip(tmp_path / "bomb.zip", {**good, "bomb.json": b"0" * (2 * 2**20)}), "zip bomb")
    many = {**good, **{f"note{i}.md": b"x" for i in range(70)}}
    _refused(st, write_zip(tmp_path / "many.zip", many), "over the limit of 64")
    _refused(st, write_zip(tmp_path / "w.zip", {**good, "model.pt": b"\x00"}), "'.pt' is not allowed")
    _refused(st, write_zip(tmp_path / "t.zip", {**good, "telemetry.parquet": b"PAR1"}), "not allowed")
    _refused(st, write_zip(tmp_path / "s.zip", {**good, "run.py": b"print(1)"}), "outside sandbox/")
    _refused(st, write_zip(tmp_path / "u.zip", {**good, "notes.md": b"hi"}), "not described", "notes.md")
    _refused(st, write_zip(tmp_path / "nometa.zip", {"case.ttl": good["case.ttl"]}), "no ro-crate-metadata.json")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    _refused(st, tmp_path / "junk.zip", "not a zip archive")


def test_packages_violating_the_shapes_are_refused(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    case_ttl = read_zip(package)["case.ttl"].decode()
    triples = list(ox.parse(case_ttl.encode(), format=ox.RdfFormat.TURTLE))
    no_cause = ox.serialize([t for t in triples if t.predicate.value != DT + "confirmedCause"],
                            format=ox.RdfFormat.TURTLE)
    msg = _refused(st, repack(package, tmp_path / "nocause.zip", {"case.ttl": no_cause}), "SHACL")
    assert "a case has one confirmed cause" in msg
    meta = json.loads(read_zip(package)[METADATA])
    for entity in meta["@graph"]:
        entity.pop("license", None)
    files = {**read_zip(package), METADATA: json.dumps(meta).encode()}
    _refused(st, write_zip(tmp_path / "nolicence.zip", files), "SHACL", "licence")
    unknown_cause = case_ttl.replace("kb:GateInitBias", "kb:NoSuchCause")
    _refused(st, repack(package, tmp_path / "unknown.zip", {"case.ttl": unknown_cause.encode()}), "SHACL")
    _refused(st, repack(package, tmp_path / "bad.zip", {"case.ttl": b"@prefix x: <y> .\nx:a x:b ."}), "does not parse")


def test_altered_files_remote_contexts_and_kb_exports_are_refused(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    files = read_zip(package)
    _refused(st, write_zip(tmp_path / "alt.zip", {**files, "case.ttl": files["case.ttl"] + b"\n"}), "contentSize")
    meta = json.loads(files[METADATA])
    meta["@context"] = "https://example.org/evil-context"
    _refused(st, write_zip(tmp_path / "ctx.zip", {**files, METADATA: json.dumps(meta).encode()}),
             "never fetches contexts")
    export = export_knowledge(st, tmp_path / "kb.zip").path
    _refused(st, export, "not a debugtune case package")


def test_clashes_are_reported_not_merged_unless_allowed(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    extra = ('\n<https://w3id.org/debugtune/kb/GateInitBias> '
             '<http://www.w3.org/2004/02/skos/core#prefLabel> "a different label"@en .\n'
             '<https://w3id.org/debugtune/kb/RouterInitRescale> <https://w3id.org/debugtune#successCount> 1000 .\n'
             '<https://w3id.org/debugtune/kb/RouterInitRescale> <https://w3id.org/debugtune#effectiveness> 0.99 .\n')
    case_ttl = read_zip(package)["case.ttl"] + extra.encode()
    clashing = repack(package, tmp_path / "clash.zip", {"case.ttl": case_ttl})
    msg = _refused(st, clashing, "clash with the knowledge base", "kb:GateInitBias skos:prefLabel",
                   "kb:RouterInitRescale dt:successCount", "kb:RouterInitRescale dt:effectiveness")
    assert "--allow-clash" in msg
    rate = remedy_details(st, "RouterInitRescale").success_rate
    result = import_package(st, clashing, allow_clash=True)
    assert {(c.subject.rsplit("/", 1)[-1], c.predicate.rsplit("#", 1)[-1]) for c in result.clashes} == {
        ("GateInitBias", "prefLabel"), ("RouterInitRescale", "successCount"), ("RouterInitRescale", "effectiveness")}
    assert st.query(f"ASK {{ GRAPH <{result.graph}> {{ ?root skos:editorialNote ?n }} }}")
    assert remedy_details(st, "RouterInitRescale").success_rate > rate  # kept, inside the package graph only
    assert not st.query(f"ASK {{ GRAPH <{GRAPH_LOCAL}> {{ ?s ?p ?o }} }}")


def test_feedback_moves_the_posterior_and_the_ranking(package: Path) -> None:
    st = diagnosed_store("run-b")
    import_package(st, package)
    ranked = [s.remedy for s in suggest(st, "run-b")]
    before = remedy_details(st, "RouterInitRescale").success_rate
    case = resolve_case(st, package)
    assert resolve_case(st, content_hash(read_zip(package))[:12]) == case == resolve_case(st, case)
    for team in range(4):
        assert record_feedback(st, package, "success", reporter=f"team-{team}").counted
    again = record_feedback(st, package, "success", reporter="team-0")  # once per case and reporter
    assert not again.counted and again.earlier and again.remedies[0]["successes"] >= 4
    after = remedy_details(st, "RouterInitRescale").success_rate
    assert after > before
    moved = [s.remedy for s in suggest(st, "run-b")]
    assert moved.index("RouterInitRescale") <= ranked.index("RouterInitRescale")
    counts = st.query(f"SELECT ?n WHERE {{ GRAPH <{GRAPH_LOCAL}> {{ kb:RouterInitRescale dt:successCount ?n }} }}")
    assert counts.scalar() == 4
    result = record_feedback(st, case, "failure")
    assert result.remedies[0]["failures"] >= 1 and result.remedies[0]["success_rate"] < after
    with pytest.raises(ContributeError, match="unknown case"):
        resolve_case(st, "NoSuchCaseAnywhere")
    with pytest.raises(ContributeError, match="success or failure"):
        record_feedback(st, case, "maybe")


def test_imported_case_is_found_by_similarity(package: Path) -> None:
    st = diagnosed_store("run-c")
    result = import_package(st, package)
    found = [c for c in similar_cases(st, "run-c", threshold=0.85) if c.graph == result.graph]
    assert found and found[0].score == pytest.approx(1.0) and found[0].remedy == "RouterInitRescale"


def test_kb_export_holds_every_knowledge_graph_and_scrubs_importers(package: Path, tmp_path: Path) -> None:
    st = fresh_store()
    imported = import_package(st, package, importer="alice-importer")
    record_feedback(st, package, "success")
    result = export_knowledge(st, tmp_path / "kb.zip", attribution="Team A")
    files = read_zip(result.path)
    assert sorted(files) == ["knowledge-base.trig", "privacy-report.json", METADATA]
    graphs = {q.graph_name.value for q in ox.parse(files["knowledge-base.trig"], format=ox.RdfFormat.TRIG)}
    assert graphs == set(result.graphs) and imported.graph in graphs and GRAPH_LOCAL in graphs
    assert result.graphs["https://w3id.org/debugtune/graph/kb"] == st.count("https://w3id.org/debugtune/graph/kb")
    assert b"alice-importer" not in files["knowledge-base.trig"]
    assert not any(g.startswith("urn:debugtune:run:") for g in graphs)
    cli = CliRunner().invoke(debug_app, ["kb", "export", "--out", str(tmp_path / "cli.zip"), "--store", "memory",
                                         "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.output)["graphs"]["https://w3id.org/debugtune/graph/kb"] > 1000


def test_import_and_feedback_over_a_remote_sparql_endpoint(package: Path) -> None:
    from tests.oxigraph_server import oxigraph_binary, oxigraph_serve

    if oxigraph_binary() is None:
        pytest.skip("the oxigraph CLI is not installed")
    with oxigraph_serve() as url:
        st = open_store(url + "/sparql")
        load_knowledge(st)
        before = st.count()
        result = import_package(st, package)
        assert st.count() == before + result.triples and import_package(st, package).already_imported
        counts = record_feedback(st, package, "success").remedies[0]
        assert counts["remedy"] == "RouterInitRescale" and counts["successes"] >= 1
