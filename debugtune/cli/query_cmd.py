"""`cann-debug query`: SPARQL over the store (the DSL joins it with the query issue)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from debugtune.cli.apps import debug_app
from debugtune.cli.common import JsonOption, StoreOption, console, emit_json, fail, session_store
from debugtune.kg.results import AskResult, GraphResult, SelectResult


def print_result(result, json_out: bool) -> None:
    """Print a query result as a table, a boolean, Turtle, or JSON."""
    if isinstance(result, AskResult):
        emit_json({"boolean": result.value}) if json_out else console.print(str(result.value).lower())
    elif isinstance(result, GraphResult):
        text = result.serialize().decode("utf-8")
        emit_json({"turtle": text}) if json_out else console.print(text, markup=False, highlight=False)
    elif isinstance(result, SelectResult):
        if json_out:
            emit_json({"variables": list(result.variables), "rows": result.dicts()})
            return
        table = Table(show_lines=False)
        for v in result.variables:
            table.add_column(v, overflow="fold")
        for row in result.dicts():
            table.add_row(*("" if row[v] is None else str(row[v]) for v in result.variables))
        console.print(table)
        console.print(f"{len(result)} rows")


@debug_app.command("query")
def query(
    text: Annotated[str | None, typer.Argument(help="The query text.")] = None,
    sparql: Annotated[bool, typer.Option("--sparql", help="TEXT is SPARQL (dt:, kb:, sosa:, ... prefixes "
                                         "are predeclared).")] = False,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Query the knowledge graph."""
    if not sparql:
        fail("the tuning DSL is not available yet; pass --sparql with a SPARQL query")
    if not text:
        fail("give the SPARQL query as the argument")
    with session_store(store) as st:
        result = st.query(text)
    print_result(result, json_out)
