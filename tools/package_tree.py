"""Lay out ``build/typecheck/debugtune`` as the wheel installs it, for mypy and pyright (and editors).

The wheel maps top-level folders into the one import package (``kg/`` → ``debugtune/kg``, see
``[tool.scikit-build.wheel.packages]`` in pyproject.toml); no type checker can follow that mapping or the
editable install's import hook. This tree mirrors the mapping with relative symlinks to the source folders (so
a reported path opens the real file, and a new module is seen at once) and adds what only the build makes: the
stub nanobind generates for the native extension (``debugtune/native/_native.pyi``). ``make install`` and
``make typecheck`` run it.

Usage: ``python tools/package_tree.py [--check]``; ``--check`` prints the modules each checker would see.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "typecheck"
SKIP = {"__pycache__", ".mypy_cache", ".pytest_cache"}


def wheel_mapping(pyproject: Path = REPO / "pyproject.toml") -> dict[str, str]:
    """Package path in the wheel (``debugtune/kg``) → source folder (``kg``), parents first."""
    with pyproject.open("rb") as f:
        mapping: dict[str, str] = tomllib.load(f)["tool"]["scikit-build"]["wheel"]["packages"]
    return dict(sorted(mapping.items(), key=lambda kv: kv[0].count("/")))


def _link(target: Path, at: Path) -> None:
    at.symlink_to(os.path.relpath(target, at.parent), target_is_directory=target.is_dir())


def _materialise(folder: Path) -> None:
    """Turn a symlinked folder of the tree into a real one whose entries are symlinks (so files can be added)."""
    if not folder.is_symlink():
        folder.mkdir(parents=True, exist_ok=True)
        return
    source = folder.resolve()
    folder.unlink()
    folder.mkdir()
    for child in sorted(source.iterdir()):
        if child.name not in SKIP:
            _link(child, folder / child.name)


def _installed_root(package: str) -> Path | None:
    """The site-packages folder of the built parts of ``package`` (the extension and its stub), if installed."""
    root = Path(sysconfig.get_paths()["platlib"]) / package
    return root if root.is_dir() else None


def build_tree(tree: Path = TREE) -> Path:
    """(Re)build the tree; returns the package folder in it."""
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    mapping = wheel_mapping()
    for dest, src in mapping.items():  # parents first: a folder is one symlink unless something goes inside
        at, source = tree / dest, REPO / src
        if not source.is_dir():
            raise SystemExit(f"pyproject.toml: [tool.scikit-build.wheel.packages] {dest!r}: no folder {src!r}")
        _materialise(at.parent)
        if not at.exists():
            _link(source, at)
    package = next(iter(mapping))
    built = _installed_root(package)
    if built is not None:  # the extension and its stub, from the installed wheel part
        for path in sorted(built.rglob("*")):
            if path.is_file() and path.suffix == ".pyi":
                rel = path.relative_to(built.parent)
                _materialise(tree / rel.parent)
                if not (tree / rel).exists():
                    _link(path, tree / rel)
    return tree / package


def main(argv: list[str]) -> int:
    pkg = build_tree()
    stub = pkg / "native" / "_native.pyi"
    if not stub.exists():
        print(f"warning: {stub.relative_to(REPO)} missing: build the package first (make install)", file=sys.stderr)
    if "--check" in argv:
        for f in sorted(pkg.rglob("*.py*")):
            print(f.relative_to(pkg.parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
