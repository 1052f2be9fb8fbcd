"""Fetch the PyTorch-profiler test traces that Holistic Trace Analysis ships in its repository (tests/data).

They are third-party files (MIT, facebookresearch/HolisticTraceAnalysis): fetched into a folder of your choice,
never committed. ``--source`` is a git URL (cloned shallowly), a local checkout, or a bare mirror; files the
source does not hold (or holds only as large-file pointers) are skipped.

Run: ``python -m bench.fetch_hta_traces OUT [--source URL_OR_GIT_DIR]``; then
``python -m bench.trace_agreement --hta-traces OUT``.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import tempfile
from pathlib import Path

REPO = "https://github.com/facebookresearch/HolisticTraceAnalysis"


def _git(args: list[str], git_dir: Path | None = None) -> bytes:
    cmd = ["git"] + ([f"--git-dir={git_dir}"] if git_dir else []) + args
    return subprocess.run(cmd, check=True, capture_output=True).stdout


def _git_dir(source: str, tmp: Path) -> Path:
    path = Path(source)
    if path.is_dir():
        return path / ".git" if (path / ".git").exists() else path
    clone = tmp / "hta"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--bare", source, str(clone)], check=True)
    return clone


def fetch(out: Path, source: str = REPO) -> list[Path]:
    """Copy every ``tests/data/**.json.gz`` trace of the source into ``out`` (same sub-folders)."""
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        git_dir = _git_dir(source, Path(tmp))
        names = _git(["ls-tree", "-r", "--name-only", "HEAD", "tests/data"], git_dir).decode().split()
        for name in names:
            if not name.endswith(".json.gz"):
                continue
            try:
                data = _git(["show", f"HEAD:{name}"], git_dir)
                gzip.decompress(data)
            except (subprocess.CalledProcessError, OSError, EOFError):
                continue  # absent from the mirror, or a large-file pointer rather than the trace
            target = out / name.removeprefix("tests/data/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(target)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--source", default=REPO, help="git URL, checkout or bare mirror of HTA")
    args = parser.parse_args()
    files = fetch(args.out, args.source)
    print(f"{len(files)} traces in {args.out}")


if __name__ == "__main__":
    main()
