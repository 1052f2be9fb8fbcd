"""The two Typer applications; command modules register on them and are imported when first needed.

``cann-debug --help`` lists every command from the tables below without importing a command module (each
pulls in its engine stage: the tuner, the diagnosis, FastAPI, ...); ``cann-debug lint`` imports only
``lint_cmd``. ``tests/test_cli_output.py`` checks that each table entry names the command's module and the
first line of its docstring. Help is click's plain formatter: it wraps and never cuts an option name.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup

#: command → (module under debugtune.cli that registers it, the line the command listing shows)
DEBUG_COMMANDS: dict[str, tuple[str, str]] = {
    "kb": ("kb_cmd", "The knowledge base: statistics, SHACL check, export, one item in one place (show)."),
    "import": ("import_cmd", "Import profiler output or training logs into a run directory (nothing is written "
                             "if the input is bad)."),
    "diagnose": ("diagnose_cmd", "Find symptoms in a run's telemetry (all four dimensions unless some are named) "
                                 "and infer the root cause."),
    "root-cause": ("diagnose_cmd", "The most likely root causes of a run: diagnose RUN_DIR, or read the stored "
                                   "diagnosis of RUN_ID."),
    "query": ("query_cmd", "Query the knowledge graph with the tuning DSL (or raw SPARQL with --raw-sparql)."),
    "lint": ("lint_cmd", "Lint launch configurations before they start: exit 1 on any error, 0 otherwise, 2 on "
                         "unreadable input."),
    "report": ("report_cmd", "Write the diagnosis of a run as one self-contained HTML page (plots, cause chain, "
                             "remedies, cost)."),
    "serve": ("serve_cmd", "Serve /sparql (SPARQL 1.1 Protocol), /rdf-graphs (Graph Store), /dsl, /runs and "
                           "/health; docs at /docs."),
    "demo": ("demo_cmd", "The seed journey: diagnose a tiny MoE whose router starts biased, suggest the remedies "
                         "its trial can apply, tune the best one by replay from a checkpoint, package the case for "
                         "the next team, and prevent it."),
}
TUNE_COMMANDS: dict[str, tuple[str, str]] = {
    "auto": ("tune_cmd", "Tune a remedy's parameters with a few experiments, transferring from similar cases in "
                         "the graph."),
    "checkpoint": ("tune_cmd", "Record a replay point for a run that did not declare one: one of its training "
                               "checkpoints becomes RUN_DIR/replay-checkpoint.pt, declaring the trial that replays "
                               "it."),
    "roi": ("tune_cmd", "What problems cost a job of this size, and what a debugging setup saves (docs/roi.md)."),
    "contribute": ("contribute_cmd", "Package a diagnosed run as an RO-Crate case (scrubbed, SHACL-checked) that "
                                     "others can import."),
    "import": ("contribute_cmd", "Import a case package into its own named graph, with provenance (scripts are "
                                 "never run)."),
    "feedback": ("contribute_cmd", "Record whether a case's remedy worked again: updates its Beta posterior used "
                                   "by the ranking."),
    "sandbox": ("contribute_cmd", "A case package's sandbox: run its validation script on request."),
}


class LazyGroup(TyperGroup):
    """A command group whose commands' modules are imported when a command is resolved, not to list them."""

    lazy: ClassVar[dict[str, tuple[str, str]]] = {}
    app: ClassVar[str] = ""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        #: commands already registered on the Typer app, held back until resolved (their module may be
        #: imported by another command's module, e.g. diagnose_cmd by demo_cmd)
        self._built = {n: self.commands.pop(n) for n in self.lazy if n in self.commands}

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.lazy, *(n for n in self.commands if n not in self.lazy)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return self.commands.get(cmd_name)
        text = self.lazy[cmd_name][1]
        return TyperCommand(cmd_name, help=text, short_help=text)  # a listing entry; resolving loads it

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] in self.lazy:
            self.load(args[0])
        return super().resolve_command(ctx, args)

    def load(self, name: str) -> Any:
        """Import the module of ``name`` and build its click command from the Typer app it registered on."""
        if name not in self.commands:
            import_module(f"debugtune.cli.{self.lazy[name][0]}")
            built = typer.main.get_group(globals()[self.app])
            self.commands[name] = built._built[name] if isinstance(built, LazyGroup) else built.commands[name]
        return self.commands[name]


class DebugGroup(LazyGroup):
    lazy = DEBUG_COMMANDS
    app = "debug_app"


class TuneGroup(LazyGroup):
    lazy = TUNE_COMMANDS
    app = "tune_app"


def _root() -> None:
    """A group callback, so that Typer builds a group before any command module has registered."""


debug_app = typer.Typer(
    name="cann-debug", cls=DebugGroup, callback=_root, no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Diagnose training runs: knowledge base, import, diagnose, root-cause, query, lint, report, serve.")
tune_app = typer.Typer(
    name="cann-tune", cls=TuneGroup, callback=_root, no_args_is_help=True, add_completion=False,
    pretty_exceptions_enable=False, rich_markup_mode=None,
    help="Tune and share fixes: Bayesian tuning, case packages, feedback, ROI.")
kb_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                     help="The knowledge base: statistics, SHACL check, export, one item in one place (show).")
debug_app.add_typer(kb_app, name="kb")
