"""The package's modules as installed (wheel mapping of pyproject.toml) and the imports each makes, relative
imports resolved: what the architecture test and the package-tree test judge."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
from package_tree import wheel_mapping  # noqa: E402

FOLDERS = {src: dest.replace("/", ".") for dest, src in wheel_mapping().items()}
"""Source folder → dotted package it is installed as (``kg`` → ``debugtune.kg``)."""


@dataclass(frozen=True)
class Import:
    line: int
    module: str       # absolute dotted name (a relative import resolved)
    names: tuple[str, ...] = ()  # what ``from module import ...`` takes (empty for ``import module``)
    relative: bool = False


def module_name(path: Path) -> str:
    """The dotted name a source file of the package is imported as."""
    rel = path.resolve().relative_to(REPO)
    package = FOLDERS[rel.parts[0]]
    parts = [p for p in rel.with_suffix("").parts[1:] if p != "__init__"]
    return ".".join([package, *parts])


def package_files() -> Iterator[Path]:
    for src in FOLDERS:
        for path in sorted((REPO / src).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def imports(path: Path, source: str | None = None) -> list[Import]:
    """Every import statement of ``path`` (nested ones too; ``source`` instead of its text), relative ones resolved
    against its package (outside the package, in tests/ or bench/, relative imports are left out)."""
    inside = path.resolve().relative_to(REPO).parts[0] in FOLDERS
    name = module_name(path) if inside else ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            out += [Import(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names)
            if node.level == 0:
                out.append(Import(node.lineno, node.module or "", names))
                continue
            if not inside:
                continue
            base = package[: len(package) - (node.level - 1)]
            out.append(Import(node.lineno, ".".join(base + ([node.module] if node.module else [])), names, True))
    return out
