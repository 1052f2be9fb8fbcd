"""`make typecheck`'s gates (tools/typecheck.py): mypy fails on any error beyond the baseline of known ones, and
pyright on any ``debugtune.*`` import it cannot resolve; the tree both read mirrors the wheel mapping."""

from __future__ import annotations

import sys
from collections import Counter

from module_imports import REPO

sys.path.insert(0, str(REPO / "tools"))
from package_tree import build_tree, wheel_mapping  # noqa: E402
from typecheck import BASELINE, beyond, read_baseline, unresolved_imports  # noqa: E402


def test_an_error_beyond_the_baseline_fails():
    baseline = Counter({("kg/store.py", "no-untyped-def"): 2})
    assert beyond(Counter({("kg/store.py", "no-untyped-def"): 2}), baseline) == []
    assert beyond(Counter({("kg/store.py", "no-untyped-def"): 3}), baseline) != []
    assert beyond(Counter({("kg/new.py", "arg-type"): 1}), baseline) == [
        "kg/new.py [arg-type]: 1 errors, the baseline allows 0"]


def test_the_baseline_names_real_files_and_never_the_strict_core_of_query():
    known = read_baseline(BASELINE)
    assert all((REPO / file).is_file() for file, _code in known)
    assert not any(file.startswith(("query/", ".venv/", "build/")) for file, _code in known)


def test_unresolved_debugtune_imports_are_reported():
    report = {"generalDiagnostics": [
        {"rule": "reportMissingImports", "message": 'Import "debugtune.engine.diagnose.base" could not be resolved',
         "file": str(REPO / "kg" / "x.py"), "range": {"start": {"line": 4}}},
        {"rule": "reportMissingImports", "message": 'Import "yaml" could not be resolved',
         "file": str(REPO / "kg" / "x.py"), "range": {"start": {"line": 5}}},
        {"rule": "reportAttributeAccessIssue", "message": "whatever", "file": str(REPO / "kg" / "x.py"),
         "range": {"start": {"line": 6}}}]}
    assert unresolved_imports(report) == [
        'kg/x.py:5: Import "debugtune.engine.diagnose.base" could not be resolved']


def test_the_tree_mirrors_the_wheel_mapping(tmp_path):
    pkg = build_tree(tmp_path / "tree")
    for dest, src in wheel_mapping().items():
        assert (tmp_path / "tree" / dest).resolve() == (REPO / src).resolve() or (tmp_path / "tree" / dest).is_dir()
    assert (pkg / "kg" / "records.py").resolve() == (REPO / "kg" / "records.py").resolve()
    assert (pkg / "engine" / "diagnose" / "base.py").resolve() == (REPO / "engine" / "diagnose" / "base.py").resolve()
