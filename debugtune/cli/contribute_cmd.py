"""`cann-tune contribute | import | feedback | sandbox run`: share solved cases as RO-Crate packages."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from debugtune.cli.apps import tune_app
from debugtune.cli.common import JsonOption, StoreOption, console, emit_json, fail, session_store
from debugtune.engine.contribute import ContributeOptions, contribute, record_feedback, run_sandbox
from debugtune.engine.suggest.queries import run_exists_sparql
from debugtune.engine.telemetry.runmeta import RUN_JSON, read_run_json
from debugtune.kg.namespaces import check_run_id
from debugtune.kg.packages import import_package
from debugtune.kg.store import Store

sandbox_app = typer.Typer(no_args_is_help=True, help="A case package's sandbox: run its validation script on request.")
tune_app.add_typer(sandbox_app, name="sandbox")

PackageArgument = Annotated[Path, typer.Argument(help="A case package (.zip).", show_default=False)]


def _busy(message: str, json_out: bool) -> Any:
    return nullcontext() if json_out else console.status(message)


def _resolve_run(st: Store, run: str, json_out: bool) -> tuple[str, str | None]:
    """(run id, run directory): a directory is diagnosed first when the store does not know the run yet."""
    path = Path(run)
    if not path.is_dir():
        try:
            return check_run_id(run), None
        except ValueError:
            fail(f"{run} is neither a run directory nor a run id")
    run_id = str(read_run_json(path).get("run_id") or path.resolve().name) if (path / RUN_JSON).is_file() \
        else path.resolve().name
    if not st.ask(run_exists_sparql(run_id)):
        from debugtune.api import diagnose

        with _busy(f"diagnosing {path} first (the store has no diagnosis of run {run_id})", json_out):
            run_id = diagnose(path, store=st).run
    return run_id, str(path.resolve())


def _spec(sandbox: bool, spec: Path | None) -> dict[str, Any] | None:
    if spec is None:
        return {} if sandbox else None
    try:
        data = json.loads(spec.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        fail(f"{spec}: cannot read the sandbox spec ({err})")
    except json.JSONDecodeError as err:
        fail(f"{spec}:{err.lineno}:{err.colno}: malformed JSON: {err.msg}")
    if not isinstance(data, dict):
        fail(f"{spec}: the sandbox spec must be a JSON object")
    return data


@tune_app.command("contribute")
def contribute_cmd(
    run: Annotated[str, typer.Argument(help="A diagnosed run: its directory or its id in the store.",
                                       show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the package (.zip).")],
    sandbox: Annotated[bool, typer.Option("--sandbox", help="Add a reproducible sandbox; its fault (and remedy, "
                                          "unless the best experiment's parameters are the overrides) come from "
                                          "--sandbox-spec.")] = False,
    sandbox_spec: Annotated[Path | None, typer.Option(
        "--sandbox-spec", help="JSON with the sandbox's fault and remedy overrides, steps, seed (implies --sandbox).")
    ] = None,
    privacy_safe: Annotated[bool, typer.Option("--privacy-safe/--no-privacy-safe",
                                               help="Hash or remove paths, hosts, IPs, users, e-mails, keys and "
                                                    "names.")] = True,
    license_id: Annotated[str, typer.Option("--license", help="SPDX licence id or licence URL.")] = "CC-BY-SA-4.0",
    attribution: Annotated[str | None, typer.Option(help="Who to credit (name, ORCID URL).")] = None,
    cause: Annotated[str | None, typer.Option(help="Confirmed cause (default: the top hypothesis).")] = None,
    remedy: Annotated[str | None, typer.Option(help="Applied remedy (default: the best experiment's).")] = None,
    outcome: Annotated[str, typer.Option(help="success, failure or partial.")] = "success",
    objective: Annotated[str | None, typer.Option(help="Objective that picks the best experiment, name[:min|max].")
                         ] = None,
    redact: Annotated[list[str] | None, typer.Option("--redact", help="A model or project name to hash wherever "
                                                     "it appears (repeatable).")] = None,
    title: Annotated[str | None, typer.Option(help="The case's label.")] = None,
    description: Annotated[str | None, typer.Option(help="What happened, in a sentence or two.")] = None,
    source: Annotated[str | None, typer.Option(help="A public link about the case (issue, logbook).")] = None,
    sandbox_timeout: Annotated[float, typer.Option("--sandbox-timeout", help="Seconds the sandbox may run.")
                               ] = 600.0,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Package a diagnosed run as an RO-Crate case (scrubbed, SHACL-checked) that others can import."""
    options = ContributeOptions(
        license=license_id, attribution=attribution, privacy_safe=privacy_safe,
        redact=tuple(r.strip() for r in redact or () if r.strip()), cause=cause, remedy=remedy, outcome=outcome,
        objective=objective, title=title, description=description, source=source,
        sandbox=_spec(sandbox, sandbox_spec), sandbox_timeout_s=sandbox_timeout)
    with session_store(store) as st:
        run_id, run_dir = _resolve_run(st, run, json_out)
        busy = "building the package" + (" and running its sandbox" if options.sandbox is not None else "")
        with _busy(busy, json_out):
            result = contribute(st, run_id, out, run_dir=run_dir, options=options)
    if json_out:
        emit_json(result.as_dict())
        return
    console.print(f"[green]wrote[/] {escape(str(result.path))} (content hash {result.content_hash[:16]}…)")
    console.print(f"case {escape(result.case)}: cause [bold]{result.cause}[/], remedy [bold]{result.remedy}[/], "
                  f"outcome {result.outcome}")
    for note in result.notes:
        console.print(f"[dim]{escape(note)}[/]")
    kinds = result.privacy.get("by_kind", {})
    console.print("privacy: " + (", ".join(f"{n} {k}" for k, n in kinds.items()) + " hashed or removed"
                                 if kinds else "nothing to remove") if result.privacy.get("privacy_safe")
                  else "[yellow]privacy scrubbing is off (--no-privacy-safe)[/]")
    if result.sandbox is not None:
        console.print(f"sandbox: {escape(result.sandbox.claim)} — held here in {result.sandbox.seconds:.1f} s")


@tune_app.command("import")
def import_cmd(
    package: PackageArgument,
    allow_clash: Annotated[bool, typer.Option("--allow-clash", help="Import even when the package says something "
                                              "new about knowledge-base identifiers (kept in its own graph).")
                           ] = False,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Import a case package into its own named graph, with provenance (scripts are never run)."""
    with session_store(store) as st:
        result = import_package(st, package, allow_clash=allow_clash)
    if json_out:
        emit_json(result.as_dict())
        return
    if result.already_imported:
        console.print(f"already imported: {escape(result.graph)} ({result.triples} triples); nothing changed")
        return
    console.print(f"[green]imported[/] {escape(str(package))} into {escape(result.graph)}: {result.triples} triples, "
                  f"{len(result.cases)} case(s)")
    for case in result.cases:
        console.print(f"  case {escape(case)}")
    console.print(f"licence {', '.join(result.licenses)}")
    for clash in result.clashes:
        console.print(f"[yellow]clash kept in the package graph:[/] {escape(str(clash))}")
    if result.has_sandbox:
        console.print(f"[dim]it has a sandbox; run it (only if you trust it) with: "
                      f"cann-tune sandbox run {escape(str(package))}[/]")


@tune_app.command("feedback")
def feedback_cmd(
    case: Annotated[str, typer.Argument(help="A case IRI or local name, an imported package (.zip) or its hash.",
                                        show_default=False)],
    outcome: Annotated[str, typer.Option(help="success or failure: did the case's remedy work for you?")],
    reporter: Annotated[str | None, typer.Option(
        help="Who reports (stored hashed; default: this user at this host). Feedback counts once per case and "
             "reporter.")] = None,
    store: StoreOption = None,
    json_out: JsonOption = False,
) -> None:
    """Record whether a case's remedy worked again: updates its Beta posterior used by the ranking."""
    with session_store(store) as st:
        result = record_feedback(st, case, outcome, reporter=reporter)
    if json_out:
        emit_json(result.as_dict())
        return
    if result.counted:
        console.print(f"recorded {outcome} for case {escape(result.case)}")
    else:
        console.print(f"[yellow]already counted[/]: this reporter gave feedback on case {escape(result.case)} on "
                      f"{escape(str(result.earlier))}; feedback counts once per case and reporter, nothing changed")
    for r in result.remedies:
        console.print(f"  {r['remedy']}: {r['successes']} successes, {r['failures']} failures, "
                      f"posterior success rate {r['success_rate']:.3f}")


@sandbox_app.command("run")
def sandbox_run(
    package: PackageArgument,
    timeout: Annotated[float, typer.Option(help="Seconds before the script is stopped.")] = 600.0,
    json_out: JsonOption = False,
) -> None:
    """Run a package's validation script in a temporary folder and check its claim; exit 1 if it did not hold."""
    with _busy(f"running the sandbox of {package}", json_out):
        verdict = run_sandbox(package, timeout_s=timeout)
    if json_out:
        emit_json(verdict.as_dict())
    else:
        table = Table(title="checks")
        for col in ("figure", "claim", "measured", "ok"):
            table.add_column(col)
        for c in verdict.checks:
            table.add_row(c["path"], f"{c['op']} {c['value']:g}", f"{c['measured']:.4g}" if isinstance(
                c["measured"], int | float) else str(c["measured"]), "yes" if c["ok"] else "[red]no[/]")
        console.print(table)
        off = [d for d in verdict.differences if not d["within"]]
        for d in off:
            console.print(f"[yellow]{d['path']}: expected {d['expected']:.4g}, measured {d['measured']}[/]")
        state = "[green]the claim held[/]" if verdict.held else "[red]the claim did not hold[/]"
        console.print(f"{state}: {escape(verdict.claim)} ({verdict.seconds:.1f} s"
                      f"{'' if verdict.reproduced else '; figures outside the stated tolerance'})")
    if not verdict.held:
        raise typer.Exit(1)
