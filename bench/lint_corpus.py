"""The real-configuration corpus of the lint benchmark: launch configurations from public repositories,
each recorded by repository, commit and path in ``bench/lint_corpus.tsv`` (the files themselves are not
copied into the project; ``fetch`` downloads them into a cache).

    python bench/lint_corpus.py fetch [--mirror-root DIR] [--cache DIR]   # get every file of the manifest
    python bench/lint_corpus.py build --mirror-root DIR                    # re-select the manifest
    python bench/lint_corpus.py list

``fetch`` reads each file from a local clone when ``--mirror-root`` holds one (``DIR/<owner>+<name>/repo``,
a git directory), else from ``https://raw.githubusercontent.com/<repo>/<commit>/<path>``. The cache defaults to
``$DEBUGTUNE_HOME/lint-corpus``. ``build`` applies the selection below to the clones and rewrites the manifest,
leaving out what ``bench/lint_corpus_excluded.tsv`` lists (each with the evidence that it is not a working
configuration, so it cannot count as a false alarm).

Selection: Megatron-LM CI test cases (``tests/functional_tests/test_cases/**/model_config.yaml``) that a CI
recipe of the same commit runs and whose MODEL_ARGS hold arguments; Megatron-LM ``examples/**/*.sh`` that
launch a training script; DeepSpeed JSON configs (a top-level batch or ``zero_optimization`` key, not a
template) of DeepSpeed, DeepSpeedExamples and accelerate; TrainingArguments recipes of alignment-handbook.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "lint_corpus.tsv"
EXCLUDED = HERE / "lint_corpus_excluded.tsv"
SOURCES = (  # repository, commit, framework, the framework release the files are for ("" = the newest)
    ("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553", "megatron", ""),
    ("NVIDIA/Megatron-LM", "core_v0.12.0", "megatron", "0.12.0"),
    ("deepspeedai/DeepSpeedExamples", "45b4b7156c8794a3452a5a7d03dbd8d797068569", "deepspeed", ""),
    ("deepspeedai/DeepSpeed", "edaa7221267243c7be7fb49c5d5f5c4fb97b4641", "deepspeed", ""),
    ("huggingface/accelerate", "HEAD", "deepspeed", ""),
    ("huggingface/alignment-handbook", "925acdfe4b2b4e38c3dabd1851bc418f0b656351", "hf", ""),
)
_DS_KEYS = re.compile(r'"(train_batch_size|train_micro_batch_size_per_gpu|zero_optimization)"\s*:')
_LAUNCH = re.compile(r"(torchrun|python3?|deepspeed|srun)\b[^\n]*\.py", re.M)


@dataclass(frozen=True)
class Entry:
    repo: str
    commit: str
    path: str
    framework: str
    env: str = ""
    version: str = ""

    def environment(self) -> dict[str, str]:
        return dict(pair.split("=", 1) for pair in self.env.split(",") if "=" in pair)

    def local(self, cache: Path) -> Path:
        return cache / self.repo.replace("/", "+") / self.commit[:12] / self.path


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    with path.open(newline="") as f:
        return [Entry(r["repo"], r["commit"], r["path"], r["framework"], r.get("env") or "", r.get("version") or "")
                for r in csv.DictReader(f, delimiter="\t")]


def read_excluded(path: Path = EXCLUDED) -> dict[tuple[str, str, str], str]:
    with path.open(newline="") as f:
        return {(r["repo"], r["commit"], r["path"]): r["reason"] for r in csv.DictReader(f, delimiter="\t")}


def default_cache() -> Path:
    return Path(os.environ.get("DEBUGTUNE_HOME") or Path.home() / ".debugtune") / "lint-corpus"


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True).stdout


def _mirror(root: Path | None, repo: str) -> Path | None:
    if root is None:
        return None
    git_dir = root / repo.replace("/", "+") / "repo"
    return git_dir if git_dir.is_dir() else None


def _resolve(git_dir: Path, commit: str) -> str:
    return _git(git_dir, "rev-parse", f"{commit}^{{commit}}").decode().strip()


def fetch(entries: list[Entry], cache: Path, mirror_root: Path | None) -> tuple[int, list[str]]:
    """Put every entry's file in the cache; returns how many are there and the ones that could not be got."""
    missing = []
    for e in entries:
        target = e.local(cache)
        if target.is_file():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        git_dir = _mirror(mirror_root, e.repo)
        try:
            if git_dir is not None:
                data = _git(git_dir, "show", f"{e.commit}:{e.path}")
            else:
                url = f"https://raw.githubusercontent.com/{e.repo}/{e.commit}/{e.path}"
                with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - fixed https host
                    data = r.read()
        except (subprocess.CalledProcessError, OSError) as err:
            missing.append(f"{e.repo}@{e.commit[:12]}:{e.path}: {err}")
            continue
        target.write_bytes(data)
    return sum(e.local(cache).is_file() for e in entries), missing


def _recipe_cases(git_dir: Path, commit: str) -> set[str]:
    names = set()
    listing = _git(git_dir, "ls-tree", "-r", "--name-only", commit, "tests/test_utils/recipes",
                   "tests/functional_tests/jet_recipes").decode().split()
    for path in listing:
        if path.endswith((".yaml", ".yml")):
            active = re.sub(r"#[^\n]*", "", _text(git_dir, commit, path))  # a commented-out case is not run
            names |= set(re.findall(r"[A-Za-z0-9_.\-]+", active))
    return names


def _text(git_dir: Path, commit: str, path: str) -> str:
    """A file of the clone as text ('' when the clone does not hold its content, e.g. a large file)."""
    try:
        return _git(git_dir, "show", f"{commit}:{path}").decode(errors="replace")
    except subprocess.CalledProcessError:
        return ""


def _select(git_dir: Path, repo: str, commit: str, framework: str, version: str) -> list[Entry]:
    files = _git(git_dir, "ls-tree", "-r", "--name-only", commit).decode().splitlines()
    out = []
    if repo == "NVIDIA/Megatron-LM":
        run_by_ci = _recipe_cases(git_dir, commit)
        for path in files:
            if path.startswith("tests/functional_tests/test_cases/") and path.endswith("/model_config.yaml"):
                text = _text(git_dir, commit, path)
                if path.split("/")[-2] in run_by_ci and re.search(r"^\s+--[a-z]", text, re.M):
                    out.append(Entry(repo, commit, path, framework, "", version))
            elif path.startswith("examples/") and path.endswith(".sh"):
                text = _text(git_dir, commit, path)
                if _LAUNCH.search(text) and re.search(r"--(num-layers|tensor-model-parallel-size|hidden-size)", text):
                    out.append(Entry(repo, commit, path, framework, "", version))
    elif framework == "deepspeed":
        for path in files:
            if not path.endswith(".json") or re.search(r"template|TEMPLATE|_temp\b|config_templates", path):
                continue
            text = _text(git_dir, commit, path)
            if _DS_KEYS.search(text):
                out.append(Entry(repo, commit, path, framework, "", version))
    else:
        out = [Entry(repo, commit, p, framework, "", version) for p in files
               if re.fullmatch(r"recipes/[^/]+/(sft|dpo|orpo)/[^/]+\.ya?ml", p)]
    return out


def build(mirror_root: Path) -> list[Entry]:
    excluded = read_excluded()
    entries = []
    for repo, commit, framework, version in SOURCES:
        git_dir = _mirror(mirror_root, repo)
        if git_dir is None:
            print(f"no clone of {repo} under {mirror_root}; skipped", file=sys.stderr)
            continue
        full = _resolve(git_dir, commit)
        entries += [e for e in _select(git_dir, repo, full, framework, version) if (repo, full, e.path) not in excluded]
    with MANIFEST.open("w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["repo", "commit", "path", "framework", "env", "version"])
        for e in entries:
            w.writerow([e.repo, e.commit, e.path, e.framework, e.env, e.version])
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("fetch", "build", "list"))
    ap.add_argument("--mirror-root", type=Path, help="folder of local git clones: <owner>+<name>/repo")
    ap.add_argument("--cache", type=Path, default=default_cache())
    args = ap.parse_args(argv)
    if args.command == "build":
        if args.mirror_root is None:
            ap.error("build needs --mirror-root")
        entries = build(args.mirror_root)
        print(f"{len(entries)} configurations in {MANIFEST}")
        return 0
    entries = read_manifest()
    if args.command == "list":
        counts: dict[str, int] = {}
        for e in entries:
            counts[e.framework] = counts.get(e.framework, 0) + 1
        print(json.dumps({"configurations": len(entries), "by_framework": counts,
                          "excluded": len(read_excluded())}, indent=2))
        return 0
    present, missing = fetch(entries, args.cache, args.mirror_root)
    print(f"{present} of {len(entries)} configurations in {args.cache}")
    for m in missing:
        print(f"  not fetched: {m}", file=sys.stderr)
    return 0 if not missing else 1


if __name__ == "__main__":
    sys.exit(main())
