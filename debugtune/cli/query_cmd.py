"""`cann-debug query`: the tuning DSL (or raw SPARQL with --raw-sparql); no argument opens a prompt (docs/query.md)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from debugtune import settings
from debugtune.cli.apps import debug_app
from debugtune.cli.common import (
    JsonOption,
    StoreOption,
    WideOption,
    console,
    emit_json,
    err_console,
    fail,
    session_store,
    show_rows,
)
from debugtune.kg.results import AskResult, GraphResult, SelectResult
from debugtune.kg.sparql_guard import SparqlBounds, check_sparql
from debugtune.kg.store import Store
from debugtune.query import DslError, DslResult, compile_text, keywords, run_query
from debugtune.query.resolve import Vocabulary


def print_result(result, json_out: bool, *, wide: bool = False) -> None:
    """Print a SPARQL query result as a table, a boolean, Turtle, or JSON."""
    if isinstance(result, AskResult):
        emit_json({"boolean": result.value}) if json_out else console.print(str(result.value).lower())
    elif isinstance(result, GraphResult):
        text = result.serialize().decode("utf-8")
        emit_json({"turtle": text}) if json_out else console.print(text, markup=False, highlight=False)
    elif isinstance(result, SelectResult):
        if json_out:
            emit_json({"variables": list(result.variables), "rows": result.dicts()})
            return
        show_rows(list(result.variables), result.dicts(), wide=wide)
        console.print(f"{len(result)} rows")


def _detail(value: Any) -> str:
    from debugtune.engine.report.text import value_text

    return "; ".join(value_text("", value))


def print_dsl(result: DslResult, *, json_out: bool, show_sparql: bool, wide: bool = False) -> None:
    """Print a DSL result (and the SPARQL it ran when asked)."""
    if json_out:
        emit_json(result.as_dict())
        return
    if show_sparql:
        print_sparql(result.sparql, result.python_step)
    for key, value in result.details.items():
        if key != "findings" and _detail(value):
            console.print(f"[bold]{key}[/]: {escape(_detail(value))}", highlight=False)
    if result.details.get("findings"):
        show_rows(list(result.details["findings"][0]), result.details["findings"], wide=wide)
    show_rows(list(result.columns), list(result.rows), wide=wide)
    console.print(f"{len(result)} rows")
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)


def print_sparql(sparql: tuple[str, ...], python_step: str) -> None:
    for n, text in enumerate(sparql, 1):
        console.print(f"# SPARQL {n}/{len(sparql)}", style="dim", highlight=False)
        console.print(text, markup=False, highlight=False)
    if python_step:
        console.print(f"# then in Python: {python_step}", style="dim", highlight=False)


@debug_app.command("query")
def query(
    text: Annotated[str | None, typer.Argument(help="A DSL query (see docs/query.md); none opens a prompt.")] = None,
    sparql: Annotated[bool, typer.Option("--sparql", help="Also print the SPARQL the DSL query runs.")] = False,
    raw_sparql: Annotated[bool, typer.Option("--raw-sparql", help="TEXT is SPARQL, not DSL (dt:, kb:, sosa:, ... "
                                             "prefixes are predeclared).")] = False,
    allow_service: Annotated[list[str] | None, typer.Option("--allow-service", help="With --raw-sparql: an "
                             "endpoint IRI that SERVICE may name (repeat for several); none by default.")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
    wide: WideOption = False,
) -> None:
    """Query the knowledge graph with the tuning DSL (or raw SPARQL with --raw-sparql)."""
    if raw_sparql:
        if not text:
            fail("give the SPARQL query as the argument")
        check_sparql(text, bounds=SparqlBounds(services=tuple(allow_service or ())))
    with session_store(store, read_only=True) as st:
        if raw_sparql and text:  # (no text was refused above)
            print_result(st.query(text), json_out, wide=wide)
        elif text is None:
            prompt(st, show_sparql=sparql)
        else:
            print_dsl(run_query(text, st), json_out=json_out, show_sparql=sparql, wide=wide)


def completions(store: Store) -> list[str]:
    """Words the prompt completes: keywords, causes, symptoms, remedies, keyword values and run ids."""
    vocab = Vocabulary(store)
    words = set(keywords())
    for cls in ("Cause", "Symptom", "Remedy"):
        words.update(vocab.local_names(cls))
    words.update(vocab.keyword_names().values())
    words.update(str(r) for r in vocab.run_ids())
    return sorted(words)


def prompt(store: Store, *, show_sparql: bool = False) -> None:
    """An interactive prompt with history (``$DEBUGTUNE_HOME/query_history``) and keyword completion."""
    history = settings.home() / "query_history"
    words = completions(store)
    try:
        import readline
    except ImportError:  # pragma: no cover - Windows without pyreadline
        readline = None  # type: ignore[assignment]
    if readline is not None:
        readline.set_completer(lambda prefix, state: ([w for w in words if w.lower().startswith(prefix.lower())]
                                                      + [None])[state])
        readline.set_completer_delims(" \t\n,=<>!\"'")
        readline.parse_and_bind("tab: complete")
        try:
            readline.read_history_file(history)
        except OSError:
            pass
    console.print("debugtune query prompt: a DSL query per line; 'sparql' toggles showing SPARQL; 'quit' ends.",
                  highlight=False)
    try:
        while True:
            try:
                line = input("dt> ").strip()
            except EOFError:
                break
            if line.lower() in ("quit", "exit"):
                break
            if line.lower() == "sparql":
                show_sparql = not show_sparql
                console.print(f"showing SPARQL: {'on' if show_sparql else 'off'}")
                continue
            if not line:
                continue
            if readline is not None and not sys.stdin.isatty():
                readline.add_history(line)  # a terminal's input() records it itself
            try:
                print_dsl(run_query(line, store), json_out=False, show_sparql=show_sparql)
            except DslError as err:
                err_console.print(f"[bold red]error:[/] {err}", markup=True, highlight=False)
    finally:
        if readline is not None:
            history.parent.mkdir(parents=True, exist_ok=True)
            readline.set_history_length(1000)
            readline.write_history_file(history)


def sparql_of(text: str, store: Store) -> list[str]:
    """The SPARQL a DSL query compiles to (without running it)."""
    return list(compile_text(text, store).sparql)


__all__ = ["print_dsl", "print_result", "prompt", "query", "sparql_of"]
