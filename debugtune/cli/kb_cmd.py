"""`cann-debug kb stats | check | export`: what the knowledge base holds, whether it is well-formed, a backup."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from debugtune.cli.apps import kb_app
from debugtune.cli.common import (
    Col,
    JsonOption,
    StoreOption,
    WideOption,
    console,
    emit_json,
    err_console,
    session_store,
    show_table,
)
from debugtune.kg.knowledge import class_counts


@kb_app.command("stats")
def stats(store: StoreOption = None, json_out: JsonOption = False) -> None:
    """Count the knowledge items per class (causes, symptoms, remedies, causal links, cases, ...)."""
    with session_store(store) as st:
        counts = class_counts(st)
        graphs = {g: st.count(g) for g in st.graphs()}
    if json_out:
        emit_json({"classes": counts, "graphs": graphs})
        return
    show_table([Col("class"), Col("count", "right")], [[cls, f"{n:,}"] for cls, n in counts.items()],
               title="knowledge base")
    console.print(f"{len(graphs)} named graphs, {sum(graphs.values()):,} triples")


@kb_app.command("check")
def check(store: StoreOption = None, json_out: JsonOption = False, wide: WideOption = False) -> None:
    """Validate the ontology and knowledge base against the SHACL shapes; exit 1 on violations."""
    from debugtune.kg.validate import validate_store

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=err_console, transient=True, disable=json_out)
    with progress:
        stage = progress.add_task("loading the ontology and knowledge base", total=None)
        with session_store(store) as st:
            violations = validate_store(st, progress=lambda text: progress.update(stage, description=text))
    if json_out:
        emit_json({"conforms": not violations, "violations": [v.as_dict() for v in violations]})
    elif not violations:
        console.print("[green]0 violations[/]: the knowledge base conforms to ontology/shapes.ttl")
    else:
        show_table(["focus", "path", "message"], [[escape(v.focus), escape(v.path or ""), escape(v.message)]
                                                  for v in violations],
                   title=f"{len(violations)} SHACL violations", wide=wide)
    if violations:
        raise typer.Exit(1)


@kb_app.command("export")
def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the RO-Crate (.zip).")],
    license_id: Annotated[str, typer.Option("--license", help="SPDX licence id or licence URL.")] = "CC-BY-SA-4.0",
    attribution: Annotated[str | None, typer.Option(help="Who to credit.")] = None,
    privacy_safe: Annotated[bool, typer.Option("--privacy-safe/--no-privacy-safe",
                                               help="Scrub names, secrets and paths from the local and package "
                                                    "graphs.")] = True,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Package the whole local knowledge base (ontology, KB, local graph, imported packages) as an RO-Crate."""
    from debugtune.engine.contribute import export_knowledge

    with session_store(store) as st:
        result = export_knowledge(st, out, license_id=license_id, attribution=attribution, privacy_safe=privacy_safe)
    if json_out:
        emit_json(result.as_dict())
        return
    console.print(f"[green]wrote[/] {escape(str(result.path))}: {len(result.graphs)} named graphs, "
                  f"{sum(result.graphs.values())} triples")
    for graph, n in result.graphs.items():
        console.print(f"  {escape(graph)}: {n}")


@kb_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="A cause, symptom, remedy, prevention rule (or its id), case, link or "
                                             "threshold: its local name (GateInitBias) or IRI.")],
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Everything the knowledge base says about one item: definition and sources, causal links in and out, remedies
    and their parameters, cases, calibration, thresholds, detectors and prevention rules (docs/knowledge-base.md)."""
    from debugtune.kb_view import show as gather

    with session_store(store) as st:
        data = gather(st, name)
    if json_out:
        emit_json(data)
        return
    from debugtune.cli.kb_show_text import print_item

    print_item(console, data)
