"""`cann-debug import [FORMAT] PATH --run-dir DIR`: profiler output and logs → a run directory's telemetry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from debugtune.cli.apps import debug_app
from debugtune.cli.common import JsonOption, console, emit_json, fail
from debugtune.engine.capture.importers import IMPORTERS, formats, import_path

DeviceOption = Annotated[str | None, typer.Option(
    "--device", help="The accelerator (e.g. 'A100 SXM4', 'H200', 'Ascend 910B') when the input does not name it.")]
InterconnectOption = Annotated[str | None, typer.Option(
    "--interconnect", help="The link the collectives cross (e.g. nvlink3, pcie4, ib_ndr, roce, hccs); overrides "
                           "what the input implies.")]


@debug_app.command("import")
def import_cmd(
    args: Annotated[list[str], typer.Argument(metavar="[FORMAT] PATH", show_default=False,
                                              help=f"Optional format ({', '.join(formats())}; autodetected when "
                                                   "omitted) and the file or directory to import.")],
    run_dir: Annotated[Path, typer.Option("--run-dir", help="Run directory to create (telemetry/ + run.json).")],
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: the run directory's name).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace an existing run directory (one with run.json; "
                                          "an empty folder is always reused).")] = False,
    device: DeviceOption = None,
    interconnect: InterconnectOption = None,
    json_out: JsonOption = False,
) -> None:
    """Import profiler output or training logs into a run directory (nothing is written if the input is bad)."""
    if len(args) == 1:
        fmt, path = None, Path(args[0])
    elif len(args) == 2:
        fmt, path = args[0], Path(args[1])
        if fmt not in formats():
            fail(f"unknown format {fmt!r}; one of: {', '.join(formats())}")
    else:
        fail("expected [FORMAT] PATH")
    if json_out:
        result = import_path(path, run_dir, fmt=fmt, run_id=run_id, replace=replace, device=device,
                             interconnect=interconnect)
        emit_json(result.summary())
        return
    with console.status(f"importing {path} ..."):
        result = import_path(path, run_dir, fmt=fmt, run_id=run_id, replace=replace, device=device,
                             interconnect=interconnect)
    summary = result.summary()
    description = next(i.description for i in IMPORTERS if i.name == result.format)
    table = Table(title=f"imported {result.format}: {description}", show_header=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    steps = summary["steps"]
    table.add_row("run", f"{result.run_id} → {result.run_dir}")
    table.add_row("rows", f"{result.rows:,}")
    table.add_row("ranks", f"{len(result.ranks)}: {_short(result.ranks)}")
    table.add_row("steps", f"{steps['count']} ({steps['first']} … {steps['last']})" if steps["count"] else "0")
    table.add_row("metrics", ", ".join(result.metrics))
    table.add_row("files", str(len(result.files)))
    for note in result.notes:
        table.add_row("note", note)
    console.print(table)


def _short(values: list[int], limit: int = 12) -> str:
    text = ", ".join(map(str, values[:limit]))
    return text + (f", … (+{len(values) - limit})" if len(values) > limit else "")
