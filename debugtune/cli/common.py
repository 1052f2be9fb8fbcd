"""Shared pieces of the two CLIs: options, the session store, JSON output and clean errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from debugtune import settings
from debugtune.kg import Store, open_store
from debugtune.kg.knowledge import load_knowledge
from debugtune.kg.open import open_for_reading

console = Console()
err_console = Console(stderr=True)

StoreOption = Annotated[
    str | None,
    typer.Option("--store", help="Store: a directory (on-disk Oxigraph), 'memory', or a SPARQL endpoint URL. "
                 "Default: $DEBUGTUNE_STORE or ~/.debugtune/store."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


@contextmanager
def session_store(target: str | None, *, knowledge: bool = True, read_only: bool = False) -> Iterator[Store]:
    """Open the store for one command, with the ontology and knowledge base loaded (if changed).

    ``read_only`` commands (lint, query, report and root-cause of a stored run) open an on-disk store
    read-only, so they run while another command holds it; a writing command waits for the lock for
    ``settings.lock_wait_s()`` seconds and then names the process that holds it."""
    where = settings.default_store() if target is None else target
    store = open_for_reading(where) if read_only else open_store(where, wait_s=settings.lock_wait_s())
    try:
        if knowledge:
            load_knowledge(store)
        yield store
    finally:
        store.close()


def emit_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(code)
