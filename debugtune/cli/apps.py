"""The two Typer applications; command modules register on them."""

import typer

debug_app = typer.Typer(
    name="cann-debug", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Diagnose training runs: knowledge base, import, diagnose, root-cause, query, lint, report, serve.")
tune_app = typer.Typer(
    name="cann-tune", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Tune and share fixes: Bayesian tuning, case packages, feedback, ROI.")
kb_app = typer.Typer(no_args_is_help=True, help="The knowledge base: statistics, SHACL check, export.")
debug_app.add_typer(kb_app, name="kb")
