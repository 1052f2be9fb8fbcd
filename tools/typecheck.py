"""`make typecheck`: mypy over the package as installed, and pyright's resolution of every ``debugtune.*`` import.

mypy reads its settings from pyproject.toml (strict for kg/, query/, native/, engine/telemetry/) and checks
``build/typecheck/debugtune`` (tools/package_tree.py); the paths it reports are mapped back to the source files.
pyright runs with pyrightconfig.json, the editors' configuration, and this fails on any ``debugtune.*`` import it
cannot resolve (its other diagnostics are for the editor, not a gate).

The mypy errors not yet fixed are listed, per file and code, in ``tools/mypy-baseline.txt``: mypy fails the check
on any error beyond it (a file with more errors of a code than the baseline allows, or a file not in it), and the
count it prints says how many are left. ``--update-baseline`` rewrites the file after fixes (it only shrinks
unless ``--grow`` is given). The goal is an empty baseline.

Usage: ``python tools/typecheck.py [mypy|pyright] [--update-baseline [--grow]]`` (both by default); exit 1 on
errors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from package_tree import REPO, build_tree, wheel_mapping  # noqa: E402

_PATH = re.compile(r"^(build/typecheck/[^:]+)(:.*)$")
_ERROR = re.compile(r"^([^:\s]+\.pyi?):\d+: error: .*\[([a-z-]+)\]$")
BASELINE = REPO / "tools" / "mypy-baseline.txt"


def _source(path: str) -> str:
    """The repository path of a file reported inside the tree (a symlink)."""
    return os.path.relpath(os.path.realpath(REPO / path), REPO)


def read_baseline(path: Path = BASELINE) -> Counter[tuple[str, str]]:
    """(file, error code) → how many such errors are known, from ``count file code`` lines."""
    out: Counter[tuple[str, str]] = Counter()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                n, file, code = line.split()
                out[(file, code)] = int(n)
    return out


def write_baseline(errors: Counter[tuple[str, str]], path: Path = BASELINE) -> None:
    lines = ["# mypy errors not fixed yet: count, file, error code (tools/typecheck.py --update-baseline).",
             "# Fix them and shrink this file; make typecheck fails on any error beyond it."]
    lines += [f"{n} {file} {code}" for (file, code), n in sorted(errors.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def beyond(errors: Counter[tuple[str, str]], baseline: Counter[tuple[str, str]]) -> list[str]:
    """``file code: n > allowed`` for each (file, code) with more errors than the baseline allows."""
    return [f"{file} [{code}]: {n} errors, the baseline allows {baseline[(file, code)]}"
            for (file, code), n in sorted(errors.items()) if n > baseline[(file, code)]]


def run_mypy(update: bool = False, grow: bool = False) -> int:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True)
    errors: Counter[tuple[str, str]] = Counter()
    lines = []
    for line in (proc.stdout + proc.stderr).splitlines():
        m = _PATH.match(line)
        line = _source(m.group(1)) + m.group(2) if m else line
        lines.append(line)
        e = _ERROR.match(line)
        if e:
            errors[(e.group(1), e.group(2))] += 1
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not errors):
        print("\n".join(lines), file=sys.stderr)
        print("error: mypy did not run to the end", file=sys.stderr)
        return 1
    baseline = read_baseline()
    if update:
        write_baseline(errors if grow else Counter({k: min(n, baseline[k]) for k, n in errors.items()}))
        baseline = read_baseline()
    new = beyond(errors, baseline)
    if new:
        print("\n".join(line for line in lines if (e := _ERROR.match(line))
                        and (e.group(1), e.group(2)) in {k for k, n in errors.items() if n > baseline[k]}))
    by_folder: Counter[str] = Counter()
    for (file, _code), n in errors.items():
        parts = file.split("/")
        by_folder["/".join(parts[:2]) if parts[0] == "engine" else parts[0]] += n
    print(f"mypy: {sum(errors.values())} errors left in the baseline's files ("
          + ", ".join(f"{k} {n}" for k, n in by_folder.most_common()) + f"); {len(new)} beyond the baseline")
    for line in new:
        print(f"  new: {line}")
    return 1 if new else 0


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
    update, grow = "--update-baseline" in argv, "--grow" in argv
    which = [a for a in argv if not a.startswith("--")] or ["mypy", "pyright"]
    build_tree()
    checks = {"mypy": lambda: run_mypy(update, grow), "pyright": run_pyright}
    codes = [checks[w]() for w in which]
    return max(codes)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
