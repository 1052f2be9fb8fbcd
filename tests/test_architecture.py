"""The house rules of DESIGN §1: a stage imports only earlier stages and `kg/`; nothing imports the front door;
and a module has one import path (``debugtune.kg.records``, never the top-level ``kg.records`` that the editable
install's ``sys.path`` also offers as a second copy of the module). Relative imports are resolved and judged too."""

from __future__ import annotations

import subprocess
import sys

import pytest
from module_imports import FOLDERS, REPO, Import, imports, module_name, package_files

# Stage order; each entry may import itself and anything before it.
ORDER = ["kg", "native", "engine.telemetry", "engine.capture", "engine.diagnose", "engine.infer",
         "engine.suggest", "query", "engine.tune", "engine.contribute", "engine.prevent", "engine.report"]
TOP_LEVEL = {src for src in FOLDERS if src != "debugtune"}  # kg, engine, query, native, ontology, cases


def _stage_of(module: str) -> str | None:
    """The stage of a dotted module name under `debugtune.`, or 'front' for the front door."""
    if module != "debugtune" and not module.startswith("debugtune."):
        return None
    parts = module.split(".")[1:]
    if not parts:
        return "front"
    if parts[0] in ("ontology", "cases"):
        return "data"
    if parts[0] == "engine":
        return "engine." + parts[1] if len(parts) > 1 else "engine"
    if parts[0] in ("kg", "native", "query"):
        return parts[0]
    return "front"


def _targets(imp: Import) -> list[str]:
    """The modules an import may bind: ``from debugtune import kg`` imports ``debugtune.kg``."""
    if imp.module == "debugtune" and imp.names:
        return [f"debugtune.{n}" for n in imp.names]
    return [imp.module]


SANDBOX_SCRIPTS = {"engine/contribute/sandbox_moe_lm.py"}
"""Programs a case package ships as its ``validate.py`` (engine/contribute/sandbox.py): they run in the sandbox's own
process against the installed package, are never imported by it, and may use the scenarios of the front door."""


def test_stages_import_only_earlier_stages():
    problems = []
    for path in package_files():
        if str(path.relative_to(REPO)) in SANDBOX_SCRIPTS:
            continue
        own = _stage_of(module_name(path))
        if own in ("engine", "front", "data"):  # engine/__init__.py; the front door imports all
            continue
        allowed = set(ORDER[: ORDER.index(own) + 1]) | {"data", "engine"}
        for imp in imports(path):
            for module in _targets(imp):
                stage = _stage_of(module)
                if stage is not None and stage not in allowed:
                    problems.append(f"{path.relative_to(REPO)}:{imp.line} ({own}) imports {module} ({stage})")
    assert problems == []


def test_one_import_path():
    """No module of the package (nor a test or bench) imports a subpackage by its folder name."""
    problems = []
    for path in [*package_files(), *sorted((REPO / "tests").glob("*.py")), *sorted((REPO / "bench").rglob("*.py"))]:
        for imp in imports(path):
            if imp.module.split(".")[0] in TOP_LEVEL:
                problems.append(f"{path.relative_to(REPO)}:{imp.line} imports {imp.module}")
    assert problems == []


def test_relative_imports_are_resolved():
    """The resolution the two tests above rely on, for a module of engine/prevent/."""
    text = "from .document import ConfigDoc\nfrom ..diagnose import base\nfrom . import rules\n"
    got = [(i.module, i.names) for i in imports(REPO / "engine" / "prevent" / "lint.py", text)]
    assert got == [("debugtune.engine.prevent.document", ("ConfigDoc",)), ("debugtune.engine.diagnose", ("base",)),
                   ("debugtune.engine.prevent", ("rules",))]


def test_sandbox_scripts_are_not_imported():
    """What lets the scripts above reach the front door: nothing imports them, the sandbox copies their text."""
    names = {module_name(REPO / p) for p in SANDBOX_SCRIPTS}
    assert all((REPO / p).is_file() for p in SANDBOX_SCRIPTS)
    assert [f"{p.relative_to(REPO)}:{i.line}" for p in package_files() for i in imports(p)
            if {i.module, *(f"{i.module}.{n}" for n in i.names)} & names] == []


def test_every_engine_stage_is_known():
    stages = {p.name for p in (REPO / "engine").iterdir() if (p / "__init__.py").exists()}
    assert stages <= {s.split(".", 1)[1] for s in ORDER if s.startswith("engine.")}


def test_engine_docstring_lists_every_stage():
    doc = (REPO / "engine" / "__init__.py").read_text(encoding="utf-8")
    stages = [p.name for p in sorted((REPO / "engine").iterdir()) if (p / "__init__.py").exists()]
    assert [s for s in stages if s not in doc] == []


@pytest.mark.parametrize("where", ["engine/diagnose/probe.py", "kg/probe.py", "debugtune/cli/probe.py"])
def test_lint_forbids_the_second_import_path(where):
    """`from kg.records import Finding` anywhere in the package fails `make lint` (ruff's banned-API rule)."""
    for text in ("from kg.records import Finding\n\nprint(Finding)\n", "import engine.diagnose\n"):
        proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                               "--stdin-filename", where, "-"], input=text, cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 1, proc.stdout
        assert "TID251" in proc.stdout and "debugtune." in proc.stdout
