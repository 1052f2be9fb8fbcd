"""Regenerate ``cases/prevention/keys-megatron.ttl`` and ``entry-points-megatron.ttl`` from Megatron-LM's
own argument parser, release by release.

For each tag the tree is extracted (``git archive``) and a child process imports
``megatron.training.arguments`` of that tree and captures the parser that ``parse_args`` builds (including
the arguments generated from config dataclasses by ``ArgumentGroupFactory`` since core_v0.16). Optional
dependencies that are not installed here (triton, einops, ...) are replaced by empty modules while
importing: only the parser is read, nothing runs. For the newest tree the training scripts are scanned for
``extra_args_provider=`` and the arguments each provider adds are recorded as a key group
(``dt:keyGroup``), with one ``dt:EntryPoint`` per script saying whether it extends the parser.

    python bench/lint_keys_megatron.py --git /path/to/Megatron-LM/.git [--tags core_v0.9.0,...,main]

The ``--git`` directory is a clone (or mirror) of github.com/NVIDIA/Megatron-LM; nothing is copied into the
project but argument names, types, defaults, choices and version bounds.
"""

from __future__ import annotations

import argparse
import ast
import enum
import importlib.abc
import importlib.machinery
import importlib.util
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import types
import typing
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TAGS = ("core_v0.9.0", "core_v0.10.0", "core_v0.11.0", "core_v0.12.0", "core_v0.13.0", "core_v0.14.0",
        "core_v0.15.0", "core_v0.16.0", "core_v0.17.0", "core_v0.18.0", "core_v0.19.0")
NEWEST = "0.20.0"
"""The version the main branch is treated as (the release after the last tag)."""
OPTIONAL_DEPS = ("triton", "einops", "regex", "transformer_engine", "apex", "flash_attn", "nvidia_resiliency_ext",
                 "modelopt", "mamba_ssm", "causal_conv1d", "deep_ep", "nv_one_logger", "multistorageclient",
                 "tensorstore", "zarr", "flashinfer", "emerging_optimizers", "wandb", "tqdm", "sentencepiece",
                 "tiktoken", "transformers", "datasets", "nltk", "omegaconf", "hydra", "megatron_energon",
                 "mcore_adapter", "onnx", "open_clip", "timm")
_ENTRY_CALLS = ("parse_and_validate_args", "initialize_megatron", "pretrain", "parse_args")
_SKIP_DIRS = ("megatron/core/", "tests/", "docs/")
_INFERENCE = re.compile(r"inference|generat|text_generation|_server|mmlu|validate|export|convert|quantize|prune")
"""Script paths that run a model rather than train it (their launches need no optimizer settings)."""


# ---------------------------------------------------------------------------------------------------------
# Child: read the parser of one tree
# ---------------------------------------------------------------------------------------------------------
class _Dummy:
    """Stands in for anything taken from a module that is not installed: callable, subclassable, empty."""

    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def __call__(self, *a: Any, **k: Any) -> Any:
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Dummy()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Dummy()

    def __iter__(self):  # noqa: ANN204
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __getitem__(self, key: Any) -> Any:
        return _Dummy()

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            cls = type(name, (object,), {"__init__": lambda self, *a, **k: None,
                                         "__getattr__": lambda self, attr: _Dummy(),
                                         "__class_getitem__": classmethod(lambda c, item: c)})
            setattr(self, name, cls)
            return cls
        return _Dummy()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name.split(".")[0] in self.names or any(name == n or name.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):  # noqa: ANN001, ANN201
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "99.0.0"
        return module

    def exec_module(self, module):  # noqa: ANN001, ANN201
        pass


class _Captured(Exception):
    pass


def _plain(x: Any) -> Any:
    if isinstance(x, enum.Enum):
        return x.name
    if isinstance(x, (list, tuple)):
        return [_plain(i) for i in x]
    try:
        json.dumps(x)
        return x
    except TypeError:
        return repr(x)


def _actions(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    out = []
    for a in parser._actions:
        if not a.option_strings or a.dest == "help":
            continue
        t = a.type
        out.append({"dest": a.dest, "opts": list(a.option_strings), "action": type(a).__name__,
                    "type": None if t is None else getattr(t, "__name__", type(t).__name__), "nargs": a.nargs,
                    "default": _plain(a.default), "choices": _plain(list(a.choices)) if a.choices else None})
    return out


def entry_points(tree: Path) -> dict[str, str | None]:
    """Training scripts of the tree → the name of the ``extra_args_provider`` they pass (None: none)."""
    out: dict[str, str | None] = {}
    for f in sorted(tree.rglob("*.py")):
        rel = f.relative_to(tree).as_posix()
        if rel.startswith(_SKIP_DIRS):
            continue
        try:
            module = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        if "__main__" not in ast.unparse(module):
            continue
        found: str | None | bool = False
        for node in ast.walk(module):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in _ENTRY_CALLS:
                continue
            kw = next((k.value for k in node.keywords if k.arg == "extra_args_provider"), None)
            if isinstance(kw, ast.IfExp):
                kw = kw.body
            if isinstance(kw, ast.Name) and kw.id != "extra_args_provider":
                found = kw.id
            elif found is False and name != "parse_args":
                found = None
        if found is not False:
            out[rel] = found
    return out


def _imported(path: Path, name: str) -> Any:
    """``name`` from the module the script's ``from X import name`` names (when the script hides it)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
            return getattr(importlib.import_module(node.module), name)
    raise AttributeError(f"{path.name} has no {name}")


def _extension(tree: Path, rel: str, provider: str, parser_with: Any, core_dests: set[str],
               stubs: _StubFinder) -> dict[str, Any]:
    """The arguments one script's provider adds; a module the script imports that is missing here is stubbed
    and the import retried. The group is the provider's own identity (file:function), shared by the scripts
    that use the same provider."""
    path = tree / rel
    sys.path.insert(0, str(path.parent))
    before = set(sys.modules)
    try:
        for attempt in range(12):
            try:
                spec = importlib.util.spec_from_file_location(f"_entry_{abs(hash(rel))}_{attempt}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                fn = getattr(module, provider, None) or _imported(path, provider)
                break
            except ModuleNotFoundError as err:
                if not err.name or err.name in stubs.names:
                    raise
                stubs.names.add(err.name)
        else:
            raise RuntimeError("too many missing modules")
        source = Path(getattr(fn, "__code__", None).co_filename if hasattr(fn, "__code__") else path).resolve()
        where = source.relative_to(tree).as_posix() if source.is_relative_to(tree) else rel
        actions = _actions(parser_with(fn))
        added = [a for a in actions if a["dest"] not in core_dests]
        redefined = [a for a in actions if a["dest"] in core_dests]
        return {"provider": provider, "group": f"{where}:{provider}", "actions": added, "redefined": redefined}
    except BaseException as err:  # noqa: BLE001 - a script that does not import is recorded, not fatal
        return {"provider": provider, "error": f"{type(err).__name__}: {err}"[:200]}
    finally:
        sys.path.remove(str(path.parent))
        own = {name for name in set(sys.modules) - before  # a script's own helpers (utils, ...) must not leak
               if (getattr(sys.modules[name], "__file__", None) or "").startswith(str(tree))
               and not (getattr(sys.modules[name], "__file__", None) or "").startswith(str(tree / "megatron"))}
        for name in set(sys.modules) - before:
            if name in own or any(name.startswith(o + ".") for o in own):
                del sys.modules[name]


def dump(tree: Path, *, scripts: bool) -> dict[str, Any]:
    """The core parser of ``tree`` and, per training script that extends it, the arguments it adds."""
    typing.override = getattr(typing, "override", lambda f: f)  # type: ignore[attr-defined]
    stubs = _StubFinder(set(OPTIONAL_DEPS))
    sys.meta_path.insert(0, stubs)
    sys.path.insert(0, str(tree))
    from megatron.training import arguments as megatron_arguments

    def capture(self: argparse.ArgumentParser, *a: Any, **k: Any) -> Any:
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]

    def parser_with(provider: Any = None) -> argparse.ArgumentParser:
        try:
            megatron_arguments.parse_args(extra_args_provider=provider)
        except _Captured as c:
            return c.args[0]
        raise RuntimeError("parse_args returned without parsing")

    core = _actions(parser_with())
    core_dests = {a["dest"] for a in core}
    found = entry_points(tree) if scripts else {}
    extensions: dict[str, Any] = {}
    for rel, provider in found.items():
        if provider is None:
            continue
        extensions[rel] = _extension(tree, rel, provider, parser_with, core_dests, stubs)
    return {"core": core, "scripts": found, "extensions": extensions}


# ---------------------------------------------------------------------------------------------------------
# Parent: run every tag, merge, write Turtle
# ---------------------------------------------------------------------------------------------------------
def _extract(git: Path, ref: str, into: Path, *, scripts: bool) -> None:
    """The ``megatron`` package of ``ref`` (and, with ``scripts``, the training scripts around it)."""
    top = subprocess.run(["git", "--git-dir", str(git), "ls-tree", "--name-only", ref], check=True,
                         capture_output=True, text=True).stdout.split()
    wanted = [p for p in top if p == "megatron" or (scripts and (p in ("examples", "tools", "tasks")
                                                               or p.endswith(".py")))]
    data = subprocess.run(["git", "--git-dir", str(git), "archive", ref, *wanted], check=True,
                          capture_output=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(into, filter="data")


def _version(tag: str) -> str:
    return NEWEST if tag == "main" else tag.removeprefix("core_v")


def _type(a: dict[str, Any]) -> tuple[str, str | None]:
    scalar = {"int": "int", "float": "float", "str": "str", "bool": "bool"}.get(a["type"] or "str", "any")
    if a["action"] in ("_StoreTrueAction", "_StoreFalseAction", "BooleanOptionalAction"):
        return "bool", None
    if a["nargs"] in ("+", "*") or isinstance(a["nargs"], int):
        return "list", scalar
    return scalar, None


def _lit(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f'"{v!r}"^^xsd:double'
    return json.dumps(str(v))


def _key_block(dest: str, a: dict[str, Any], low: str | None, high: str | None, source: str) -> str:
    value_type, item = _type(a)
    lines = [f'mk:{dest} a dt:ConfigKey ; dt:framework "megatron" ; dt:key "{dest}" ; dt:valueType "{value_type}" ;']
    if item:
        lines.append(f'    dt:itemType "{item}" ;')
    default = a["default"]
    if default is not None and not (isinstance(default, str) and default.startswith(("<", "functools"))):
        items = default if isinstance(default, list) else [default]
        if items and all(isinstance(x, (bool, int, float, str)) for x in items):
            lines.append("    dt:defaultValue " + ", ".join(_lit(x) for x in items) + " ;")
    longs = [o for o in a["opts"] if o.startswith("--")] or a["opts"]
    if a["action"] == "_StoreTrueAction":
        lines.append("    dt:trueFlag " + ", ".join(json.dumps(o) for o in longs) + " ;")
    elif a["action"] == "_StoreFalseAction":
        lines.append("    dt:falseFlag " + ", ".join(json.dumps(o) for o in longs) + " ;")
    elif a["action"] == "BooleanOptionalAction":
        lines.append("    dt:trueFlag " + ", ".join(json.dumps(o) for o in longs if not o.startswith("--no-")) + " ;")
        lines.append("    dt:falseFlag " + ", ".join(json.dumps(o) for o in longs if o.startswith("--no-")) + " ;")
    else:
        lines.append("    dt:option " + ", ".join(json.dumps(o) for o in longs) + " ;")
        if a["nargs"] in ("?", "*"):
            lines.append("    dt:optionalValue true ;")
    if a["choices"]:
        lines.append("    dt:choice " + ", ".join(json.dumps(str(c)) for c in a["choices"]) + " ;")
    if low:
        lines.append(f'    dt:minVersion "{low}" ;')
    if high:
        lines.append(f'    dt:maxVersion "{high}" ;')
    lines.append(f"    dct:source <{source}> .")
    return "\n".join(lines)


def _kind(a: dict[str, Any]) -> str:
    return {"_StoreTrueAction": "true", "_StoreFalseAction": "false", "BooleanOptionalAction": "bool"}.get(
        a["action"], "value")


def _renames(dumps: list[dict[str, Any]]) -> dict[str, str]:
    """Old dest → new dest, for an option whose dest changed between releases with the same kind of action
    (``--norm-epsilon``: ``norm_epsilon`` → ``layernorm_epsilon``): one setting under two names."""
    by_option: dict[str, dict[str, tuple[str, set[int]]]] = defaultdict(dict)
    for i, d in enumerate(dumps):
        for a in d["core"]:
            for o in a["opts"]:
                kind, idx = by_option[o].get(a["dest"], (_kind(a), set()))
                idx.add(i)
                by_option[o][a["dest"]] = (kind, idx)
    out: dict[str, str] = {}
    for dests in by_option.values():
        if len(dests) != 2:
            continue
        (d1, (k1, i1)), (d2, (k2, i2)) = sorted(dests.items(), key=lambda kv: max(kv[1][1]))
        if k1 == k2 and not i1 & i2 and max(i1) < min(i2):
            out[d1] = d2
    return out


def merge(dumps: dict[str, dict[str, Any]], commit: str) -> tuple[str, str]:
    """The keys Turtle and the entry-points Turtle from the per-tag dumps (in release order)."""
    order = list(dumps)
    versions = [_version(t) for t in order]
    renames = _renames([dumps[t] for t in order])
    seen: dict[str, set[int]] = defaultdict(set)
    newest: dict[str, dict[str, Any]] = {}
    aliases: dict[str, set[str]] = defaultdict(set)
    for i, tag in enumerate(order):
        for a in dumps[tag]["core"]:
            dest = renames.get(a["dest"], a["dest"])
            if dest != a["dest"]:
                aliases[dest].add(a["dest"])
            seen[dest].add(i)
            prev = newest.get(dest)
            opts = list(a["opts"])
            if prev is not None and _kind(prev) == _kind(a):
                opts += [o for o in prev["opts"] if o not in opts]
            newest[dest] = {**a, "opts": opts}
    core_last = {a["dest"]: a for a in dumps[order[-1]]["core"]}
    for ext in dumps[order[-1]]["extensions"].values():
        for a in ext.get("redefined", []):
            base = core_last.get(a["dest"])
            if base is not None and (a["choices"] or None) != (base["choices"] or None):
                # A script that redefines a core option (conflict_handler="resolve") may widen its choices:
                # the key accepts what any definition accepts.
                merged = None if not a["choices"] or not base["choices"] else \
                    list(dict.fromkeys(base["choices"] + a["choices"]))
                newest[renames.get(a["dest"], a["dest"])]["choices"] = merged
    source = f"https://github.com/NVIDIA/Megatron-LM/blob/{commit[:7]}/megatron/training/arguments.py"
    blocks = []
    for dest in sorted(newest):
        idx = sorted(seen[dest])
        low = versions[idx[0]] if idx[0] > 0 else None
        high = versions[idx[-1] + 1] if idx[-1] + 1 < len(versions) else None
        block = _key_block(dest, newest[dest], low, high, source)
        if aliases[dest]:
            block = block.replace(" ;\n", " ;\n    dt:keyAlias " + ", ".join(
                json.dumps(x) for x in sorted(aliases[dest])) + " ;\n", 1)
        blocks.append(block)
    last = dumps[order[-1]]
    core_dests = set(newest)
    ext_actions: dict[str, dict[str, Any]] = {}
    ext_groups: dict[str, set[str]] = defaultdict(set)
    ext_source: dict[str, str] = {}
    for _, ext in sorted(last["extensions"].items()):
        for a in ext.get("actions", []):
            if a["dest"] in core_dests:
                continue
            prev = ext_actions.setdefault(a["dest"], dict(a))
            if prev is not a and prev["choices"] != a["choices"]:
                prev["choices"] = None if not prev["choices"] or not a["choices"] else \
                    list(dict.fromkeys(prev["choices"] + a["choices"]))
            ext_groups[a["dest"]].add(ext["group"])
            ext_source.setdefault(a["dest"], ext["group"].split(":")[0])
    groups = []
    for dest in sorted(ext_actions):
        block = _key_block(dest, ext_actions[dest], None, None,
                           f"https://github.com/NVIDIA/Megatron-LM/blob/{commit[:7]}/{ext_source[dest]}")
        block = block.replace("    dct:source", "    dt:keyGroup " + ", ".join(
            json.dumps(g) for g in sorted(ext_groups[dest])) + " ;\n    dct:source", 1)
        groups.append(block)
    head = (
        "@prefix dt:   <https://w3id.org/debugtune#> .\n@prefix dct:  <http://purl.org/dc/terms/> .\n"
        "@prefix xsd:  <http://www.w3.org/2001/XMLSchema#> .\n"
        "@prefix mk:   <https://w3id.org/debugtune/kb/key/megatron/> .\n\n"
        "# Known Megatron-LM command-line arguments (argparse dest = config key), with type, default, options,\n"
        f"# choices and the versions that accept them. Generated by bench/lint_keys_megatron.py from the parser\n"
        f"# of NVIDIA/Megatron-LM tags {order[0]} ... {order[-2]} and main @ {commit[:7]} ({NEWEST} dev):\n"
        "# minVersion is the first of those versions that has the argument (absent when the first tag has it),\n"
        "# maxVersion the first that no longer has it. Defaults are those of the newest version that has it.\n"
        "# Keys with a dt:keyGroup are added by that training script's extra_args_provider (main only).\n\n")
    keys = head + "\n\n".join(blocks + groups) + "\n"
    eps = ["@prefix dt:   <https://w3id.org/debugtune#> .\n@prefix dct:  <http://purl.org/dc/terms/> .\n"
           "@prefix ep:   <https://w3id.org/debugtune/kb/entry-point/megatron/> .\n\n"
           "# Megatron-LM training scripts and whether they extend the argument parser (extra_args_provider):\n"
           "# an unknown argument is an error only for a script that does not. dt:launchMode is \"inference\" for\n"
           "# scripts whose path says they run a model (inference, generation, export, ...). Generated by\n"
           f"# bench/lint_keys_megatron.py from NVIDIA/Megatron-LM main @ {commit[:7]}.\n"]
    for rel, provider in sorted(last["scripts"].items()):
        name = rel.replace("/", "_").removesuffix(".py")
        ext = last["extensions"].get(rel, {})
        mode = "inference" if _INFERENCE.search(rel) else "training"
        lines = [f'ep:{name} a dt:EntryPoint ; dt:framework "megatron" ; dt:scriptPath "{rel}" ;',
                 f'    dt:extendsParser {"true" if provider else "false"} ; dt:launchMode "{mode}" ;']
        if provider and "group" in ext:
            lines.append(f'    dt:addsKeyGroup "{ext["group"]}" ;')
        lines.append(f"    dct:source <https://github.com/NVIDIA/Megatron-LM/blob/{commit[:7]}/{rel}> .")
        eps.append("\n".join(lines))
    return keys, "\n\n".join(eps) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--git", type=Path, help="git directory of a Megatron-LM clone or mirror")
    ap.add_argument("--tags", default=",".join((*TAGS, "main")), help="comma-separated tags, oldest first; "
                    "'main' is the default branch head")
    ap.add_argument("--dump", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--scripts", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=ROOT / "cases" / "prevention")
    ap.add_argument("--cache", type=Path, help="keep each tag's parser dump here and reuse it on the next run")
    args = ap.parse_args(argv)
    if args.dump:
        out, sys.stdout = sys.stdout, sys.stderr  # what the imported modules print must not mix with the JSON
        try:
            result = dump(args.dump.resolve(), scripts=args.scripts)
        finally:
            sys.stdout = out
        json.dump(result, sys.stdout)
        return 0
    if args.git is None:
        ap.error("--git is required")
    dumps: dict[str, dict[str, Any]] = {}
    commit = ""
    for tag in args.tags.split(","):
        ref = "HEAD" if tag == "main" else tag
        if tag == "main":
            commit = subprocess.run(["git", "--git-dir", str(args.git), "rev-parse", "HEAD"], check=True,
                                    capture_output=True, text=True).stdout.strip()
        cached = args.cache / f"{tag}.json" if args.cache else None
        if cached is not None and cached.is_file():
            dumps[tag] = json.loads(cached.read_text())
            print(f"{tag}: {len(dumps[tag]['core'])} arguments (cached)", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            _extract(args.git, ref, Path(tmp), scripts=tag == "main")
            run = subprocess.run([sys.executable, __file__, "--dump", tmp, *(["--scripts"] if tag == "main" else [])],
                                 capture_output=True, text=True, cwd=tmp, timeout=900)
        if run.returncode != 0:
            print(f"{tag}: the parser could not be read:\n{run.stderr[-2000:]}", file=sys.stderr)
            return 1
        dumps[tag] = json.loads(run.stdout)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(run.stdout)
        print(f"{tag}: {len(dumps[tag]['core'])} arguments", file=sys.stderr)
    keys, eps = merge(dumps, commit)
    (args.out / "keys-megatron.ttl").write_text(keys)
    (args.out / "entry-points-megatron.ttl").write_text(eps)
    print(f"wrote {args.out / 'keys-megatron.ttl'} and {args.out / 'entry-points-megatron.ttl'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
