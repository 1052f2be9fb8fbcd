"""`cann-debug report`: the diagnosis of a run as one self-contained HTML page (docs/report.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from debugtune.cli.apps import debug_app
from debugtune.cli.common import JsonOption, StoreOption, console, emit_json, err_console, session_store
from debugtune.kg.sparql import literal
from debugtune.kg.store import Store

REPORT_FILE = "report.html"


def known_run(store: Store, run_id: str) -> bool:
    """Whether the store holds a diagnosed run with this id."""
    return bool(store.ask(f"ASK {{ ?r a dt:TrainingRun ; dt:runId {literal(run_id)} }}"))


def resolve_report_run(store: Store, run: str, *, rediagnose: bool = False) -> tuple[str, Path | None]:
    """(run id, run directory) of RUN — a run directory, a raw profiler/log folder or a stored run id.

    A directory whose run the store does not hold yet (or any one with ``rediagnose``) is diagnosed first.
    """
    from debugtune.api import diagnose, resolve_run
    from debugtune.engine.telemetry import read_run_json
    from debugtune.engine.telemetry.runmeta import RUN_JSON

    path = Path(run)
    if not path.exists():
        from debugtune.engine.suggest.similarity import require_run

        require_run(store, run)  # names the closest stored runs when unknown
        dirs = store.select(f"SELECT ?dir WHERE {{ ?r a dt:TrainingRun ; dt:runId {literal(run)} ; dt:runDir ?dir }}")
        return run, next((Path(d) for d in dirs.column("dir") if d and Path(d).is_dir()), None)
    run_dir, fmt = resolve_run(path, store)
    run_dir = run_dir.resolve()
    run_id = read_run_json(run_dir).get("run_id") if (run_dir / RUN_JSON).is_file() else None
    if fmt or rediagnose or not isinstance(run_id, str) or not known_run(store, run_id):
        run_id = diagnose(run_dir, store=store).run
    return run_id, run_dir


def default_output(run_id: str, run_dir: Path | None) -> Path:
    """``<run_dir>/report.html`` when the run directory is writable, else ``./<run id>-report.html``."""
    if run_dir is not None and run_dir.is_dir() and os.access(run_dir, os.W_OK):
        return run_dir / REPORT_FILE
    return Path.cwd() / f"{run_id}-{REPORT_FILE}"


def write_report(store: Store, run: str, *, html: Path | None = None, card_hour_cost: float | None = None,
                 maximize: list[str] | None = None, rediagnose: bool = False) -> tuple[Path, dict]:
    """Diagnose when needed, render and write the report; returns (path, summary as in ``--json``)."""
    from debugtune.engine.report import build_report

    run_id, run_dir = resolve_report_run(store, run, rediagnose=rediagnose)
    report = build_report(store, run_id, run_dir=run_dir, card_hour_cost=card_hour_cost, maximize=maximize or ())
    path = report.write(html or default_output(run_id, run_dir))
    return path, {"html": str(path), **report.as_dict()}


def print_summary(path: Path, summary: dict) -> None:
    table = Table(title=f"report of run {summary['run']}")
    table.add_column("section")
    table.add_column("shows")
    for info in summary["sections"].values():
        shown = f"{info['figures']} plot(s)" if info["figures"] else "rendered"
        table.add_row(escape(info["title"]), shown if info["state"] == "rendered" else
                      f"[dim]absent: {escape(info.get('note', ''))}[/]")
    console.print(table)
    cost = summary.get("cost")
    if cost:
        console.print(f"cost of the problem: {cost['lost_card_hours']:.4g} card-hours since onset "
                      f"(${cost['lost_cost']:,.2f}); stopping at detection saves {cost['saved_card_hours']:.4g}",
                      highlight=False)
    console.print(f"wrote {escape(str(path))} ({summary['bytes'] / 1e6:.1f} MB, self-contained)", highlight=False)


@debug_app.command("report")
def report(
    run: Annotated[str, typer.Argument(help="A run directory, a profiler/log folder, or a stored run id.",
                                       show_default=False)],
    html: Annotated[Path | None, typer.Option("--html", help="Where to write the page "
                                              "(default: <run dir>/report.html).")] = None,
    card_hour_cost: Annotated[float | None, typer.Option(
        "--card-hour-cost", min=0.0, help="Price of one card-hour for the cost section (default: the KB's).")] = None,
    maximize: Annotated[list[str] | None, typer.Option(
        "--maximize", help="A tuning objective that is maximised (repeat); others are minimised.")] = None,
    rediagnose: Annotated[bool, typer.Option("--rediagnose", help="Diagnose the run again first.")] = False,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Write the diagnosis of a run as one self-contained HTML page (plots, cause chain, remedies, cost)."""
    stored_run = not Path(run).exists() and not rediagnose  # a stored run's report only reads the store
    with session_store(store, read_only=stored_run) as st, \
            err_console.status("diagnosing and drawing the report", spinner="dots"):
        path, summary = write_report(st, run, html=html, card_hour_cost=card_hour_cost, maximize=maximize,
                                     rediagnose=rediagnose)
    if json_out:
        emit_json(summary)
    else:
        print_summary(path, summary)


def latest_run_dir(store: Store) -> Path | None:
    """The directory of the most recently diagnosed run the store holds whose directory is on this machine."""
    rows = store.select("""SELECT ?dir (MAX(STR(?t)) AS ?when) WHERE {
        ?r a dt:TrainingRun ; dt:runDir ?dir . OPTIONAL { ?f dt:inRun ?r ; sosa:resultTime ?t }
    } GROUP BY ?dir ORDER BY DESC(?when)""").dicts()
    return next((Path(r["dir"]) for r in rows if r["dir"] and Path(r["dir"]).is_dir()), None)


def demo_report(store: Store, run_dir: str | Path | None = None) -> Path | None:
    """The demo's last step: write the report of the seed scenario's run (default: the run diagnosed last)
    and print its path."""
    run_dir = run_dir if run_dir is not None else latest_run_dir(store)
    if run_dir is None:
        console.print("no diagnosed run in the store yet, so no report")
        return None
    with err_console.status("drawing the report", spinner="dots"):
        path, _ = write_report(store, str(run_dir))
    console.print(f"[bold]report[/] of the seed scenario: {escape(str(path))} (open it in a browser)",
                  highlight=False)
    return path
