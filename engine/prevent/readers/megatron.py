"""Megatron-LM configurations: launch scripts and argument lists, and the two YAML forms
(the functional-test ``MODEL_ARGS`` / ``ENV_VARS`` form and the ``--yaml-cfg`` form)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from debugtune.engine.prevent.document import ConfigDoc, KeyIssue
from debugtune.engine.prevent.errors import LintInputError
from debugtune.engine.prevent.keys import FrameworkKeys
from debugtune.engine.prevent.readers.shell import Command, Shell, Word
from debugtune.engine.prevent.vocab import parse_version

_LAUNCH_KEYS = {
    "--nproc_per_node": "nproc_per_node", "--nproc-per-node": "nproc_per_node", "--num_gpus": "nproc_per_node",
    "--num-gpus": "nproc_per_node", "--ntasks-per-node": "nproc_per_node", "--gpus-per-node": "nproc_per_node",
    "--nnodes": "nnodes", "--num_nodes": "nnodes", "--num-nodes": "nnodes", "--nodes": "nnodes", "-N": "nnodes",
    "--node_rank": "node_rank", "--node-rank": "node_rank",
    "-np": "world_size", "-n": "world_size", "--ntasks": "world_size",
}
_LAUNCH_FLAGS = {"--standalone", "--use_env", "--use-env", "--no_python", "--no-python", "--no_local_rank",
                 "--no-local-rank", "--force_multi", "--force-multi", "-u", "-O", "-B", "--run-path", "--run_path",
                 "--module"}
_NUMBER = re.compile(r"^-\d")
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def read_script(text: str, path: str, keys: FrameworkKeys, env: dict[str, str]) -> ConfigDoc:
    """A launch script (bash) or a plain argument list; the training command is the last one that runs a
    ``.py`` script, whose words after the script are Megatron arguments and before it launcher options."""
    shell = Shell(path, env)
    commands = shell.run(text)
    cmd = _training_command(commands, keys)
    if cmd is None:
        if commands and all(c.words[0].text.startswith("-") for c in commands):
            doc = ConfigDoc(path, "megatron", "args", env=shell.exported_env())
            parse_args([w for c in commands for w in c.words], keys, doc)
            return doc
        if not commands:
            raise LintInputError(path, "no training command found: expected a command that runs a .py script "
                                       "(e.g. torchrun ... pretrain_gpt.py --tensor-model-parallel-size 2 ...) "
                                       "or a list of --arguments")
        doc = ConfigDoc(path, "megatron", "launch-script", env=shell.exported_env())
        doc.skipped["(script)"] = ("runs no .py script with arguments this reader can follow (a helper script, "
                                   "or a launch built from another file): nothing checked")
        return doc
    doc = ConfigDoc(path, "megatron", "launch-script", env={**shell.exported_env(), **cmd.env})
    at = next(i for i, w in enumerate(cmd.words) if w.text.endswith(".py"))
    doc.entry_point = cmd.words[at].text
    _parse_launcher(cmd.words[:at], doc)
    known, unknown = _option_counts(cmd.words[at + 1:], keys)
    if known < unknown and keys.entry_point(doc.entry_point) is None:
        doc.skipped[doc.entry_point] = ("takes no Megatron-LM arguments: not a Megatron-LM training command; "
                                        "nothing checked")
        doc.settings.clear()
        doc.unresolved.clear()
        return doc
    parse_args(cmd.words[at + 1:], keys, doc)
    return doc


def _training_command(commands: list[Command], keys: FrameworkKeys) -> Command | None:
    """The last command that runs a ``.py`` script with Megatron-LM arguments (else the last ``.py`` one):
    a script that preprocesses data or evaluates with its own parser before or after training is skipped."""
    found = [c for c in commands if any(w.text.endswith(".py") for w in c.words)]
    for c in reversed(found):
        at = next(i for i, w in enumerate(c.words) if w.text.endswith(".py"))
        known, unknown = _option_counts(c.words[at + 1:], keys)
        if known and known >= unknown:
            return c
    return found[-1] if found else None


def _option_counts(words: list[Word], keys: FrameworkKeys) -> tuple[int, int]:
    """How many of the --options are Megatron-LM's (or its training scripts') and how many are not."""
    opts = [w.text.partition("=")[0] for w in words if w.text.startswith("--")]
    known = sum(o in keys.options for o in opts)
    return known, len(opts) - known


def _parse_launcher(words: list[Word], doc: ConfigDoc) -> None:
    i = 0
    while i < len(words):
        opt, _, inline = words[i].text.partition("=")
        if opt in _LAUNCH_FLAGS or not opt.startswith("-"):
            if opt == "--standalone":
                doc.set("nnodes", "1", words[i].line)
            i += 1
            continue
        value_word = Word(inline, words[i].line) if inline else (words[i + 1] if i + 1 < len(words) else None)
        i += 1 if inline else 2
        key = _LAUNCH_KEYS.get(opt)
        if key is None or value_word is None:
            continue
        value = value_word.text.split(":")[-1] if key == "nnodes" else value_word.text
        doc.set(key, value, value_word.line)
        if value_word.unresolved:
            doc.unresolved[key] = value_word.text
        elif value_word.defaulted:
            # ${NNODES:-1}: the script defers the topology to the environment, which did not give it; its
            # fallback is not evidence of the world size the job runs with.
            doc.unresolved[key] = f"${{{value_word.defaulted[0]}:-{value_word.text}}}"


def parse_args(words: list[Word], keys: FrameworkKeys, doc: ConfigDoc) -> None:
    """Map argument words to keys as argparse would (last occurrence wins); unknown options become issues."""
    i = 0
    while i < len(words):
        w = words[i]
        opt, eq, inline = w.text.partition("=")
        i += 1
        if not opt.startswith("-") or _NUMBER.match(opt):
            if w.unresolved and w.text.startswith(("$", "`")):
                doc.hidden_args.append(w.text)  # ${EXTRA_ARGS}, "$@": arguments this file does not show
            else:
                doc.issues.append(KeyIssue("unknown", w.text, "", "an --option", line=w.line))
            continue
        values: list[Word] = [Word(inline, w.line, w.unresolved)] if eq else []
        entry = keys.options.get(opt)
        takes_list = entry is not None and keys.keys[entry[0]].value_type == "list"
        if not eq and (entry is None or entry[1] == "value"):
            while i < len(words) and (not words[i].text.startswith("-") or _NUMBER.match(words[i].text)):
                values.append(words[i])
                i += 1
                if entry is not None and not takes_list:
                    break
        if entry is None:
            doc.issues.append(KeyIssue("unknown", opt, " ".join(v.text for v in values),
                                       closest=keys.closest_option(opt) or "", line=w.line))
            continue
        key, kind = entry
        doc.options[key] = opt
        if kind != "value":
            if eq:
                doc.issues.append(KeyIssue("invalid-value", key, inline, f"{opt} takes no value", line=w.line))
                continue
            doc.set(key, kind == "true", w.line)
            if i < len(words) and not words[i].text.startswith("-") and words[i].text.lower() in _BOOL_WORDS:
                doc.issues.append(KeyIssue("invalid-value", key, words[i].text, f"{opt} takes no value (a flag)",
                                           line=words[i].line))
                i += 1
            continue
        if not values:
            if keys.keys[key].optional_value:
                doc.set(key, [] if takes_list else True, w.line)
                continue
            doc.issues.append(KeyIssue("invalid-value", key, "", f"{opt} expects a value", line=w.line))
            continue
        doc.set(key, [v.text for v in values] if takes_list else values[0].text, w.line)
        doc.lines[key] = w.line
        missing = [n for v in values for n in v.unresolved]
        topology = [n for v in values for n in v.defaulted if n in keys.launch_variables]
        if missing:
            doc.unresolved[key] = " ".join(v.text for v in values)
        elif topology:
            # PP=${WORLD_SIZE} with WORLD_SIZE=$((${GPUS_PER_NODE:-8} * ...)): the value rests on a topology
            # fallback the environment did not confirm.
            doc.unresolved[key] = f"{' '.join(v.text for v in values)} (from ${{{topology[0]}:-…}})"
        else:
            doc.unresolved.pop(key, None)


def read_yaml(data: dict[str, Any], lines: dict[str, int], path: str, keys: FrameworkKeys,
              env: dict[str, str], version: str | None = None) -> ConfigDoc:
    """Megatron YAML: ``MODEL_ARGS`` (options as keys) with ``ENV_VARS``, or the ``--yaml-cfg`` form
    (sections ``language_model`` and ``model_parallel`` hold argument names, other keys are top level)."""
    if "MODEL_ARGS" in data:
        doc = ConfigDoc(path, "megatron", "yaml",
                        env={**env, **{str(k): _env_text(v) for k, v in (data.get("ENV_VARS") or {}).items()}})
        mode = str(data.get("MODE") or "").lower()
        doc.mode = mode if mode in ("training", "inference") else None
        model_args = data.get("MODEL_ARGS") or {}
        if not isinstance(model_args, dict):
            raise LintInputError(path, "MODEL_ARGS must be a mapping of --option: value", lines.get("MODEL_ARGS"))
        shell = Shell(path, doc.env)
        doc.ci_model_args = True
        words: list[Word] = []
        for opt, value in model_args.items():
            line = lines.get(f"MODEL_ARGS.{opt}") or 0
            if not str(opt).startswith("-"):
                doc.skipped[str(opt)] = "not a Megatron-LM argument (a NeMo-style key); not checked"
                continue
            piece = ci_argument(str(opt), value, version)
            if piece:
                words += shell.words(piece, line)
        parse_args(words, keys, doc)
        return doc
    doc = ConfigDoc(path, "megatron", "yaml", env=dict(env))
    for section in ("language_model", "model_parallel"):
        part = data.get(section)
        if isinstance(part, dict):
            for k, v in part.items():
                if v is not None:
                    doc.set(str(k), v, lines.get(f"{section}.{k}"))
    for k, v in data.items():
        if k in ("language_model", "model_parallel") or v is None:
            continue
        doc.set(str(k), v, lines.get(str(k)))
    return doc


# How Megatron-LM's CI runner turns a MODEL_ARGS value into words changed twice
# (tests/functional_tests/shell_test_utils/_run_training.sh): before core_v0.13.0 "key value" was split into
# words as is (ci: "Handle nargs", 04a5957); from 0.13.0 a value with a space became one quoted word and
# ( ) / [ ] got their own cases; from 0.17.0 a value holding |, ( or ) is quoted too (7418b1b).
_CI_QUOTING = (0, 13, 0)
_CI_QUOTING_SYMBOLS = (0, 17, 0)


def ci_semantics(version: str | None) -> str:
    """``split``, ``quote-spaces`` or ``quote-symbols``: the runner's handling of values for a release."""
    v = parse_version(version)
    if v is None or v >= _CI_QUOTING_SYMBOLS:
        return "quote-symbols"
    return "quote-spaces" if v >= _CI_QUOTING else "split"


def ci_argument(option: str, value: Any, version: str | None = None) -> str:
    """One ``MODEL_ARGS`` entry as the shell text Megatron-LM's CI builds for it before ``eval``
    (tests/functional_tests/shell_test_utils/_run_training.sh of the release): ``true`` (or an empty YAML
    value) is the bare flag, an empty string drops the entry; from 0.13 a value in ``( )`` or holding a space
    (from 0.17 also ``|``, ``(`` or ``)``) is passed as one double-quoted word and a value in ``[ ]`` loses
    its brackets; the value is first trimmed and unquoted as ``xargs`` does. Before 0.13 it is split."""
    if value is None or value is True:
        return option
    if value == "":
        return ""
    text = " ".join(_env_text(x) for x in value) if isinstance(value, list) else _env_text(value)
    semantics = ci_semantics(version)
    if semantics == "split":
        return option if text == "true" else f"{option} {text}"
    text = _xargs(text)
    if text == "true":
        return option
    if re.fullmatch(r"\([^)]+\)", text):
        return f'{option} "{text}"'
    if re.fullmatch(r"\[[^\]]+\]", text):
        return f"{option} {text[1:-1]}"
    if (_CI_QUOTED if semantics == "quote-symbols" else _CI_SPACE).search(text):
        return f'{option} "{text}"'
    return f"{option} {text}"


_CI_QUOTED = re.compile(r"[ |()]")
_CI_SPACE = re.compile(r" ")


def _xargs(text: str) -> str:
    """``echo "$value" | xargs``: words split on blanks with quotes and backslashes removed, joined by one
    space; an unmatched quote makes xargs fail and print nothing."""
    try:
        return " ".join(shlex.split(text, posix=True))
    except ValueError:
        return ""


def _env_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
