"""Command-line interfaces `cann-debug` and `cann-tune` (typer + rich)."""

from __future__ import annotations

import sys

from debugtune.cli import (  # noqa: F401  (each module registers its commands)
    contribute_cmd,
    demo_cmd,
    diagnose_cmd,
    import_cmd,
    kb_cmd,
    lint_cmd,
    query_cmd,
    report_cmd,
    serve_cmd,
    tune_cmd,
)
from debugtune.cli.apps import debug_app, tune_app
from debugtune.cli.common import err_console
from debugtune.kg.errors import DebugtuneError


def _run(app) -> None:
    try:
        app()
    except DebugtuneError as err:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


def debug_main() -> None:
    """Entry point of `cann-debug`."""
    _run(debug_app)


def tune_main() -> None:
    """Entry point of `cann-tune`."""
    _run(tune_app)
