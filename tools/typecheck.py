"""`make typecheck`: mypy over the package as installed, and pyright's resolution of every ``debugtune.*`` import.

mypy reads its settings from pyproject.toml (strict for kg/, query/, native/, engine/telemetry/) and checks
``build/typecheck/debugtune`` (tools/package_tree.py); the paths it reports are mapped back to the source files.
pyright runs with pyrightconfig.json, the editors' configuration, and this fails on any ``debugtune.*`` import it
cannot resolve (its other diagnostics are for the editor, not a gate).

Usage: ``python tools/typecheck.py [mypy|pyright]`` (both by default); exit 1 on errors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from package_tree import REPO, build_tree, wheel_mapping  # noqa: E402

_PATH = re.compile(r"^(build/typecheck/[^:]+)(:.*)$")


def _source(path: str) -> str:
    """The repository path of a file reported inside the tree (a symlink)."""
    return os.path.relpath(os.path.realpath(REPO / path), REPO)


def run_mypy() -> int:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines():
        m = _PATH.match(line)
        print(_source(m.group(1)) + m.group(2) if m else line)
    return proc.returncode


def unresolved_imports(report: dict[str, object], package: str = "debugtune") -> list[str]:
    """``file:line: message`` for each import of ``package`` pyright could not resolve, from its JSON report."""
    out = []
    diagnostics = report.get("generalDiagnostics", [])
    assert isinstance(diagnostics, list)
    for d in diagnostics:
        if d.get("rule") == "reportMissingImports" and d.get("message", "").startswith(f'Import "{package}'):
            line = d["range"]["start"]["line"] + 1
            out.append(f"{os.path.relpath(d['file'], REPO)}:{line}: {d['message']}")
    return out


def run_pyright() -> int:
    folders = sorted({src for src in wheel_mapping().values() if src not in ("ontology", "cases")})
    proc = subprocess.run([sys.executable, "-m", "pyright", "--outputjson", *folders], cwd=REPO,
                          capture_output=True, text=True)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(proc.stdout + proc.stderr, file=sys.stderr)
        print("error: pyright gave no JSON report", file=sys.stderr)
        return 1
    missing = unresolved_imports(report)
    for line in missing:
        print(line)
    summary = report.get("summary", {})
    print(f"pyright: {summary.get('filesAnalyzed')} files, {len(missing)} unresolved debugtune imports")
    return 1 if missing else 0


def main(argv: list[str]) -> int:
    which = argv or ["mypy", "pyright"]
    build_tree()
    codes = [{"mypy": run_mypy, "pyright": run_pyright}[w]() for w in which]
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
