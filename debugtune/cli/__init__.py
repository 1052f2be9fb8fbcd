"""Command-line interfaces `cann-debug` and `cann-tune` (typer + rich)."""

from __future__ import annotations

import gzip
import sys
import zlib

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
from debugtune.kg.input_errors import failure_message


def _run(app) -> None:
    try:
        app()
    except DebugtuneError as err:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False)
        sys.exit(2)
    except (RecursionError, MemoryError, OverflowError, UnicodeError, zlib.error, gzip.BadGzipFile) as err:
        # an input no reader guarded against (kg.input_errors guards every reader of outside input): still
        # one line and exit 2, never a traceback that reads as exit 1 (for lint, "violations found")
        from rich.markup import escape

        message = failure_message(err) or str(err)
        err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
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
