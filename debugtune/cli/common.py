"""Shared pieces of the two CLIs: options, the session store, JSON output, clean errors, and tables that fit
the terminal (``show_table``: at 80 columns every line fits; ``--wide`` shows every column in the table)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

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
WideOption = Annotated[bool, typer.Option(
    "--wide", help="Every column inside the table, however wide (default: the columns that fit the terminal; "
                   "the others are listed under the table).")]


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
    """Print ``error: message`` on stderr, on one line however long (the standard's one-line error), and exit
    with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


# --- tables that fit the terminal ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Col:
    """A table column: its header, alignment, whether it stays in the table however narrow the terminal
    (``keep``), and whether, when it does not fit, its values are listed under the table (``detail``) or only
    named in a note pointing to ``--wide``."""

    header: str
    justify: Literal["left", "right"] = "left"
    keep: bool = False
    min_width: int | None = None
    detail: bool = True


def _table(cols: Sequence[Col], rows: Sequence[Sequence[str]], shown: Sequence[int], title: str | None,
           widths: Sequence[int] | None = None) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    for n, i in enumerate(shown):
        c = cols[i]
        table.add_column(c.header, justify=c.justify, overflow="fold", min_width=c.min_width,
                         width=None if widths is None else widths[n])
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def _ranges(out: Console, cols: Sequence[Col], rows: Sequence[Sequence[str]]) -> list[tuple[int, int]]:
    """(narrowest without breaking a word, widest) of each column, header included."""
    wide = out.options.update_width(100_000)  # a measurement is clamped to the width it is given
    ranges = []
    for i, c in enumerate(cols):
        ms = [Measurement.get(out, wide, Text.from_markup(x)) for x in (escape(c.header), *(r[i] for r in rows))]
        lo, hi = max(m.minimum for m in ms), max(m.maximum for m in ms)
        ranges.append((max(lo, c.min_width or 0), max(hi, c.min_width or 0)))
    return ranges


def _fit(ranges: Sequence[tuple[int, int]], width: int) -> list[int] | None:
    """Column widths that fit ``width`` (the columns' own widths plus 3 between columns), or None.

    Every column gets its narrowest width, then the space left goes to the columns in proportion to how
    much wider they would like to be (rich's own shrinking narrows the widest column first, breaking words)."""
    room = width - 3 * (len(ranges) - 1)
    lows, highs = [lo for lo, _ in ranges], [hi for _, hi in ranges]
    if sum(highs) <= room:
        return highs
    if sum(lows) > room:
        return None
    spare, wants = room - sum(lows), [hi - lo for lo, hi in ranges]
    total = sum(wants)
    widths = [lo + spare * w // total for lo, w in zip(lows, wants, strict=True)]
    for i in sorted(range(len(widths)), key=lambda i: wants[i] - (widths[i] - lows[i]), reverse=True):
        if sum(widths) >= room:
            break
        if widths[i] < highs[i]:
            widths[i] += 1
    return widths


def show_table(columns: Sequence[Col | str], rows: Sequence[Sequence[str]], *, title: str | None = None,
               wide: bool = False, key: int = 0, out: Console | None = None) -> None:
    """Print ``rows`` (cells are rich markup, escaped by the caller) as a table no wider than the terminal.

    No cell is cut and no word is broken: when the columns do not fit side by side, the rightmost ones that
    are not ``keep`` leave the table and are printed under it, row by row, as ``KEY`` then ``header: value``
    (``key`` names the column that identifies a row). ``wide`` keeps every column in the table.
    """
    out = out or console
    cols = [c if isinstance(c, Col) else Col(c) for c in columns]
    ranges = _ranges(out, cols, rows)
    shown = list(range(len(cols)))
    if wide:
        full = [hi for _, hi in ranges]
        total = max(sum(full) + 3 * (len(full) - 1), out.width)  # a console prints no wider than its width
        Console(file=out.file, width=total, force_terminal=out.is_terminal, no_color=out.no_color,
                highlight=False).print(_table(cols, rows, shown, title, full))
        return
    movable = [i for i in reversed(shown) if not cols[i].keep and i != key]
    widths = _fit(ranges, out.width)
    while widths is None and movable:
        shown.remove(movable.pop(0))
        widths = _fit([ranges[i] for i in shown], out.width)
    out.print(_table(cols, rows, shown, title, widths))
    moved = [i for i in range(len(cols)) if i not in shown and cols[i].detail]
    hidden = [cols[i].header for i in range(len(cols)) if i not in shown and not cols[i].detail]
    if hidden:
        out.print(f"[dim]not shown at {out.width} columns: {escape(', '.join(hidden))} (--wide shows them)[/]",
                  highlight=False)
    for row in rows if moved else ():
        parts = [(cols[i].header, row[i]) for i in moved if row[i].strip()]
        if not parts:
            continue
        out.print(f"[bold]{row[key].splitlines()[0] if row[key] else ''}[/]", highlight=False)
        for name, value in parts:
            lines = value.splitlines()
            if len(lines) == 1:
                out.print(f"  {escape(name)}: {lines[0]}", highlight=False)
            else:
                out.print(f"  {escape(name)}:", highlight=False)
                for line in lines:
                    out.print(f"    {line}", highlight=False)


def show_rows(columns: Sequence[str], rows: Sequence[dict[str, Any]], *, wide: bool = False,
              title: str | None = None) -> None:
    """Result rows (column → value) as a ``show_table``: a label column shown under the id it names, numbers
    right-aligned with their unit in the header, lists one item per line, no ``None`` anywhere."""
    from debugtune.engine.report.text import header, value_text

    names = list(columns)
    merged = {c: (c[:-5] if c.endswith("Label") and c[:-5] in names else names[i - 1])
              for i, c in enumerate(names) if (c.endswith("Label") and c[:-5] in names) or (c == "label" and i)}
    kept = [c for c in names if c not in merged]
    labels = {target: label for label, target in merged.items()}

    def numeric(c: str) -> bool:
        vals = [r.get(c) for r in rows if r.get(c) is not None]
        return bool(vals) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals)

    def cell(row: dict[str, Any], c: str) -> str:
        text = "\n".join(escape(line) for line in value_text(c, row.get(c), units=False))
        if c in labels:
            label = " ".join(value_text(labels[c], row.get(labels[c])))
            text += f"\n[dim]{escape(label)}[/]" if label else ""
        return text

    key = next((i for i, c in enumerate(kept) if c not in ("rank", "#")), 0)
    cols = [Col(header(c), justify="right" if numeric(c) else "left", keep=i == 0) for i, c in enumerate(kept)]
    show_table(cols, [[cell(r, c) for c in kept] for r in rows], title=title, wide=wide, key=key)


def bullet(text: str, *, indent: int = 4, mark: str = "•", out: Console | None = None) -> None:
    """One list item (rich markup) whose wrapped lines stay indented under its first word."""
    grid = Table.grid()
    grid.add_column(width=indent + len(mark) + 1, no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(" " * indent + mark, text)
    (out or console).print(grid)
