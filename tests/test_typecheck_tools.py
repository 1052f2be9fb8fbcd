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


def test_strict_applies_to_the_core_and_the_default_elsewhere(tmp_path):
    """The project's mypy settings on two copies of one untyped function: an error in ``debugtune.kg``, none in
    ``debugtune.journey`` (``strict = true`` in an override once turned strict on for every module)."""
    import subprocess
    import tomllib

    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    config = ["[tool.mypy]", 'python_version = "3.11"']
    config += ["[[tool.mypy.overrides]]\n" + "\n".join(f"{k} = {_toml(v)}" for k, v in o.items())
               for o in settings["overrides"] if any(str(m).startswith("debugtune.kg") for m in o["module"])]
    (tmp_path / "pyproject.toml").write_text("\n".join(config) + "\n")
    for rel in ("debugtune/__init__.py", "debugtune/kg/__init__.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    for rel in ("debugtune/kg/loose.py", "debugtune/journey.py"):
        (tmp_path / rel).write_text("def twice(x):\n    return x * 2\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-incremental",
                           "debugtune/kg/loose.py", "debugtune/journey.py"], cwd=tmp_path, capture_output=True,
                          text=True)
    assert "debugtune/kg/loose.py:1: error: Function is missing a type annotation" in proc.stdout, proc.stdout
    assert "journey.py" not in proc.stdout, proc.stdout


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    return f'"{value}"'
