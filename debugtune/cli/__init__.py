"""Command-line interfaces `cann-debug` and `cann-tune` (typer + rich).

Importing this package loads only typer and the command tables (``apps``); a command's module, and the
engine stage it drives, are imported when that command runs (docs/cli.md, bench/cli_latency.py).
"""

from __future__ import annotations

import gzip
import sys
import zlib

from debugtune.cli.apps import debug_app, tune_app

# an input no reader guarded against (kg.input_errors guards every reader of outside input): still one line
# and exit 2, never a traceback that reads as exit 1 (for lint, "violations found")
_UNGUARDED = (RecursionError, MemoryError, OverflowError, UnicodeError, zlib.error, gzip.BadGzipFile)


def _run(app) -> None:
    try:
        app()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as err:
        from debugtune.kg.errors import DebugtuneError

        if isinstance(err, DebugtuneError):
            message = str(err)
        elif isinstance(err, _UNGUARDED):
            from debugtune.kg.input_errors import failure_message

            message = failure_message(err) or str(err)
        else:
            raise
        from rich.markup import escape

        from debugtune.cli.common import err_console

        err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        sys.exit(2)


def debug_main() -> None:
    """Entry point of `cann-debug`."""
    _run(debug_app)


def tune_main() -> None:
    """Entry point of `cann-tune`."""
    _run(tune_app)
