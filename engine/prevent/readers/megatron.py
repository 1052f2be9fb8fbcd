"""Megatron-LM configurations: launch scripts and argument lists, and the two YAML forms
(the functional-test ``MODEL_ARGS`` / ``ENV_VARS`` form and the ``--yaml-cfg`` form)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from ..document import ConfigDoc, KeyIssue
from ..errors import LintInputError
from ..keys import FrameworkKeys
from .shell import Command, Shell, Word

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
    cmd = _training_command(commands)
    if cmd is None:
        if commands and all(c.words[0].text.startswith("-") for c in commands):
            doc = ConfigDoc(path, "megatron", "args", env=shell.exported_env())
            parse_args([w for c in commands for w in c.words], keys, doc)
            return doc
        raise LintInputError(path, "no training command found: expected a command that runs a .py script "
                                   "(e.g. torchrun ... pretrain_gpt.py --tensor-model-parallel-size 2 ...) "
                                   "or a list of --arguments")
    doc = ConfigDoc(path, "megatron", "launch-script", env={**shell.exported_env(), **cmd.env})
    at = next(i for i, w in enumerate(cmd.words) if w.text.endswith(".py"))
    doc.entry_point = cmd.words[at].text
    _parse_launcher(cmd.words[:at], doc)
    parse_args(cmd.words[at + 1:], keys, doc)
    return doc


def _training_command(commands: list[Command]) -> Command | None:
    found = [c for c in commands if any(w.text.endswith(".py") for w in c.words)]
    return found[-1] if found else None


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


def parse_args(words: list[Word], keys: FrameworkKeys, doc: ConfigDoc) -> None:
    """Map argument words to keys as argparse would (last occurrence wins); unknown options become issues."""
    i = 0
    while i < len(words):
        w = words[i]
        opt, eq, inline = w.text.partition("=")
        i += 1
        if not opt.startswith("-") or _NUMBER.match(opt):
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
        if missing:
            doc.unresolved[key] = " ".join(v.text for v in values)
        else:
            doc.unresolved.pop(key, None)


def read_yaml(data: dict[str, Any], lines: dict[str, int], path: str, keys: FrameworkKeys,
              env: dict[str, str]) -> ConfigDoc:
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
        words: list[Word] = []
        for opt, value in model_args.items():
            line = lines.get(f"MODEL_ARGS.{opt}") or 0
            if not str(opt).startswith("-"):
                doc.skipped[str(opt)] = "not a Megatron-LM argument (a NeMo-style key); not checked"
                continue
            piece = ci_argument(str(opt), value)
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


_CI_QUOTED = re.compile(r"[ |()]")


def ci_argument(option: str, value: Any) -> str:
    """One ``MODEL_ARGS`` entry as the shell text Megatron-LM's CI builds for it before ``eval``
    (tests/functional_tests/shell_test_utils/_run_training.sh): ``true`` (or an empty YAML value) is the bare
    flag, an empty string drops the entry, a value in ``( )`` or holding a space, ``|``, ``(`` or ``)`` is
    passed as one double-quoted word, a value in ``[ ]`` loses its brackets and is split; the value is first
    trimmed and unquoted as ``xargs`` does."""
    if value is None or value is True:
        return option
    if value == "":
        return ""
    if isinstance(value, list):
        text = " ".join(_env_text(x) for x in value)
    else:
        text = _env_text(value)
    text = _xargs(text)
    if text == "true":
        return option
    if re.fullmatch(r"\([^)]+\)", text):
        return f'{option} "{text}"'
    if re.fullmatch(r"\[[^\]]+\]", text):
        return f"{option} {text[1:-1]}"
    if _CI_QUOTED.search(text):
        return f'{option} "{text}"'
    return f"{option} {text}"


def _xargs(text: str) -> str:
    """``echo "$value" | xargs``: words split on blanks with quotes and backslashes removed, joined by one
    space; an unmatched quote makes xargs fail and print nothing."""
    try:
        return " ".join(shlex.split(text, posix=True))
    except ValueError:
        return ""


def _env_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
