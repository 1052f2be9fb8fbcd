"""`cann-debug lint`: check launch configurations against the prevention rules of the knowledge graph, and
`cann-debug lint --learn RUN`: turn a run's confirmed cause into a new rule (docs/lint.md)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.markup import escape

from debugtune import __version__
from debugtune.cli.apps import debug_app
from debugtune.cli.common import (
    Col,
    JsonOption,
    StoreOption,
    WideOption,
    console,
    emit_json,
    err_console,
    fail,
    session_store,
    show_table,
)
from debugtune.engine.prevent.errors import LintError, LintInputError
from debugtune.engine.prevent.learn import learn_from_run
from debugtune.engine.prevent.lint import Linter, LintResult
from debugtune.engine.prevent.rules import PreventionRule
from debugtune.engine.prevent.sarif import to_sarif
from debugtune.engine.prevent.unjudged import summary
from debugtune.engine.prevent.vocab import in_range, parse_version
from debugtune.kg.namespaces import GRAPH_LOCAL, check_run_id

_FRAMEWORKS = ("auto", "megatron", "deepspeed", "hf")


@debug_app.command("lint")
def lint(
    configs: Annotated[list[str] | None, typer.Argument(
        help="Configuration files: Megatron-LM launch scripts or argument lists, Megatron YAML, DeepSpeed "
             "JSON, Hugging Face TrainingArguments JSON, or our YAML ('-' reads standard input).",
        show_default=False)] = None,
    framework: Annotated[str, typer.Option("--framework", "-f", help="megatron, deepspeed, hf or auto.")] = "auto",
    version: Annotated[str | None, typer.Option(
        "--version", help="Framework version to lint for (e.g. 0.12.0); default: the newest.")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", help="NAME=VALUE of the launch environment (repeatable), e.g. WORLD_SIZE=64; over the launcher "
                      "variables of the process environment (WORLD_SIZE, NNODES, GPUS_PER_NODE, SLURM_NTASKS, ...).")
    ] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Fail (exit 1) when an error-level rule could not be checked (e.g. unknown world size).")
    ] = False,
    sarif: Annotated[bool, typer.Option("--sarif", help="Print SARIF 2.1.0 instead of text.")] = False,
    learn: Annotated[str | None, typer.Option(
        "--learn", metavar="RUN", help="Learn a prevention rule from RUN's confirmed cause first.")] = None,
    remedy: Annotated[str | None, typer.Option(
        "--remedy", help="With --learn: the remedy whose config change to learn from (default: the most "
                         "effective one with a usable change).")] = None,
    min_confidence: Annotated[float | None, typer.Option(
        "--min-confidence", help="With --learn: least confidence of the top hypothesis (default from the "
                                 "knowledge base, prevent.learn_min_confidence).")] = None,
    list_rules: Annotated[bool, typer.Option("--list-rules", help="List the rules that apply and exit.")] = False,
    show_graph: Annotated[bool, typer.Option(
        "--graph", help="Print each configuration's config graph (Turtle) after its violations.")] = False,
    store: StoreOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Lint launch configurations before they start: exit 1 on any error, 0 otherwise, 2 on unreadable input."""
    if framework not in _FRAMEWORKS:
        fail(f"--framework must be one of {', '.join(_FRAMEWORKS)}, not {framework!r}")
    if json_out and sarif:
        fail("give --json or --sarif, not both")
    environment = _parse_env(env or [])
    if learn:
        try:
            check_run_id(learn)
        except ValueError as err:
            fail(str(err))
    linter, learned, problem = _from_store(store, learn, remedy, min_confidence)
    if problem:
        fail(problem)
    if learned is not None and not (json_out or sarif):
        _show_learned(learned, learn or "")
    if list_rules:
        _list(linter, framework, version, json_out, wide)
        return
    if not configs:
        if learned is not None:
            if json_out:
                emit_json({"learned": learned.as_dict()})
            return
        fail("give one or more configuration files (or --learn RUN, or --list-rules)")
    environment = linter.launch_environment(os.environ, environment)
    results, unreadable, texts = [], [], {}
    for path in configs:
        try:
            text = sys.stdin.read() if path == "-" else None
            name = "<stdin>" if path == "-" else path
            texts[name] = text
            results.append(linter.lint_path(name, framework=framework, version=version, env=environment, text=text))
        except LintInputError as err:
            unreadable.append((err.path, str(err)))
        except LintError as err:
            fail(str(err))
    code = 2 if unreadable else (1 if any(r.failed(strict) for r in results) else 0)
    if sarif:
        emit_json(to_sarif(results, linter.rules, version=__version__, unreadable=unreadable, strict=strict))
    elif json_out:
        emit_json({"learned": learned.as_dict() if learned else None, "configs": [r.as_dict() for r in results],
                   "unreadable": [{"path": p, "error": m} for p, m in unreadable],
                   "errors": sum(len(r.errors) for r in results), "warnings": sum(len(r.warnings) for r in results),
                   "not_checked": sum(len(r.unjudged) for r in results), "strict": strict, "exit_code": code})
    else:
        for r in results:
            _print_result(r, strict)
            if show_graph:
                doc = linter.read(r.path, framework=framework, env=environment, text=texts.get(r.path))
                console.print(linter.graph(doc, version)[1].dump(), markup=False, highlight=False)
        for _, message in unreadable:
            err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        _print_summary(results, unreadable, strict)
    raise typer.Exit(code)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name:
            fail(f"--env takes NAME=VALUE, not {pair!r}")
        out[name] = value
    return out


def _from_store(target: str | None, run: str | None, remedy: str | None,
                min_confidence: float | None) -> tuple[Linter, PreventionRule | None, str | None]:
    """Learn first (when asked), then read keys and rules; the store is closed when this returns, so a
    failure reported afterwards never keeps an on-disk store locked."""
    with session_store(target, read_only=run is None) as st:
        learned = None
        if run:
            try:
                learned = learn_from_run(st, run, remedy=remedy, min_confidence=min_confidence)
            except LintError as err:
                return Linter.from_store(st), None, str(err)
        return Linter.from_store(st), learned, None


def _show_learned(rule: PreventionRule, run: str) -> None:
    console.print(f"[bold green]learned[/] {rule.rule_id} ({rule.severity}, {rule.framework}) from run "
                  f"{escape(run)} → {GRAPH_LOCAL}", highlight=False)
    console.print(f"  message:   {escape(rule.message)}", highlight=False)
    console.print(f"  fix:       {escape(rule.fix)}", highlight=False)
    console.print("  condition: " + escape(rule.query).replace("\n", "\n             "), highlight=False,
                  soft_wrap=True)


def _list(linter: Linter, framework: str, version: str | None, json_out: bool, wide: bool = False) -> None:
    try:
        v = parse_version(version)
    except ValueError as err:
        fail(str(err))
    rules = [r for r in linter.rules if (framework == "auto" or r.framework in (framework, "any"))
             and (v is None or in_range(v, r.min_version, r.max_version))]
    if json_out:
        emit_json({"rules": [r.as_dict() for r in rules]})
        return
    rows = []
    for r in rules:
        span = "-".join(filter(None, (r.min_version, r.max_version))) if (r.min_version or r.max_version) else ""
        rows.append([r.rule_id, r.framework, r.severity, r.error_class, span,
                     escape(r.label) + (" [dim](learned)[/]" if r.learned_from else "")])
    show_table(["id", "framework", "severity", Col("class", detail=False), Col("versions", detail=False),
                Col("rule", keep=True)], rows,
               title=f"{len(rules)} prevention rules", wide=wide)


def _print_result(r: LintResult, strict: bool) -> None:
    for v in r.violations:
        colour = "red" if v.severity == "error" else "yellow"
        where = f"{r.path}:{v.line}" if v.line else r.path
        console.print(f"{escape(where)}: [bold {colour}]{v.severity}[/] [bold]{v.rule_id}[/] {escape(v.message)}",
                      highlight=False)
        if v.keys:
            console.print("    keys: " + escape(", ".join(str(k) for k in v.keys)), highlight=False)
        console.print(f"    fix:  {escape(v.fix)}", highlight=False)
    if r.unresolved:
        shown = ", ".join(f"{k}={v}" for k, v in r.unresolved.items())
        console.print(f"[dim]{escape(r.path)}: not checked, values from the environment: {escape(shown)} "
                      f"(pass --env NAME=VALUE)[/]", highlight=False)
    for reason, ids in summary(r.unjudged):
        failing = strict and any(u.severity == "error" and u.rule_id in ids for u in r.unjudged)
        colour = "red" if failing else "dim"
        label = "error: " if failing else ""
        console.print(f"[{colour}]{escape(r.path)}: {label}{len(ids)} rule{'s' if len(ids) != 1 else ''} not "
                      f"checked: {escape(reason)} ({', '.join(ids)})[/]", highlight=False)
    for note in r.notes:
        console.print(f"[dim]{escape(r.path)}: {escape(note)}[/]", highlight=False)
    for key, why in r.skipped.items():
        console.print(f"[dim]{escape(r.path)}: {escape(key)}: {escape(why)}[/]", highlight=False)
    for message in r.rule_errors:
        err_console.print(f"[yellow]rule error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def _print_summary(results: list[LintResult], unreadable: list[tuple[str, str]], strict: bool) -> None:
    errors = sum(len(r.errors) for r in results)
    warnings = sum(len(r.warnings) for r in results)
    unjudged = sum(len(r.unjudged) for r in results)
    rules = max((r.rules_run for r in results), default=0)
    ms = sum(r.seconds for r in results) * 1000
    failing = any(r.failed(strict) for r in results)
    colour = "red" if failing or unreadable else ("yellow" if warnings or unjudged else "green")
    tail = f", {len(unreadable)} unreadable" if unreadable else ""
    checked = f", {unjudged} not checked" if unjudged else ""
    console.print(f"[{colour}]{errors} errors, {warnings} warnings{checked}[/] in {len(results)} configuration(s)"
                  f"{tail} ({rules} rules, {ms:.0f} ms)", highlight=False)
