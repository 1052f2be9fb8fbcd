"""Rewrite the relative imports of package files as ``debugtune.*`` imports (ruff's banned-API rule reads
``from .errors import X`` in ``engine/prevent/`` as ``engine.prevent.errors``, a second import path), then let
ruff sort them.

Usage: ``python tools/absolute_imports.py FILE...`` (files under the folders of the wheel mapping); it prints the
files it changed. Meant for a branch that predates the rule: run it on the files ruff reports as TID251.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from package_tree import REPO, wheel_mapping  # noqa: E402

_RELATIVE = re.compile(r"^(?P<indent>[ \t]*)from (?P<dots>\.+)(?P<module>[\w.]*) import ", re.MULTILINE)


def package_of(path: Path) -> list[str]:
    """The dotted package (as parts) a source file lives in, as installed."""
    folders = {src: dest.split("/") for dest, src in wheel_mapping().items()}
    rel = path.resolve().relative_to(REPO)
    if rel.parts[0] not in folders:
        raise SystemExit(f"{path}: not under a folder of the wheel mapping ({', '.join(sorted(folders))})")
    return [*folders[rel.parts[0]], *rel.parts[1:-1]]


def absolute(text: str, package: list[str]) -> str:
    def one(m: re.Match[str]) -> str:
        base = package[: len(package) - (len(m["dots"]) - 1)]
        module = ".".join(base + ([m["module"]] if m["module"] else []))
        return f"{m['indent']}from {module} import "
    return _RELATIVE.sub(one, text)


def main(argv: list[str]) -> int:
    changed = []
    for name in argv:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        new = absolute(text, package_of(path))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(name)
    if changed:
        subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "I", "--fix", "--quiet", *changed],
                       cwd=REPO, check=False)
    print("\n".join(changed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
