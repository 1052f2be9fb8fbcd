"""`cann-debug serve`: the SPARQL endpoint, Graph Store, DSL and run reports over HTTP (docs/server.md)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated

import typer

from debugtune.cli.apps import debug_app
from debugtune.cli.common import StoreOption, console, err_console, fail, session_store
from debugtune.kg.endpoint import Limits


def read_token(path: Path) -> str:
    """The bearer token in ``path`` (first line, stripped); warns when others may read the file."""
    try:
        token = path.read_text(encoding="utf-8").strip().splitlines()[0].strip() if path.stat().st_size else ""
    except (OSError, UnicodeDecodeError, IndexError) as err:
        fail(f"{path}: cannot read the token file: {err}")
    if len(token) < 16:
        fail(f"{path}: the token must be at least 16 characters long (e.g. `openssl rand -hex 32 > {path}`)")
    if os.name == "posix" and path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        err_console.print(f"[yellow]warning:[/] {path} is readable by other users; chmod 600 it", highlight=False)
    return token


@debug_app.command("serve")
def serve(
    store: StoreOption = None,
    host: Annotated[str, typer.Option("--host", help="Interface to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port.")] = 7878,
    token_file: Annotated[Path | None, typer.Option("--token-file", help="File holding the bearer token that "
                                                    "updates must present.")] = None,
    allow_update: Annotated[bool, typer.Option("--allow-update", help="Accept SPARQL updates and Graph Store "
                                               "writes (with the token).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Per-query time limit in seconds.")] = 30.0,
    max_rows: Annotated[int, typer.Option("--max-rows", help="Most result rows (or triples) a query may "
                                          "return.")] = 100_000,
    max_body_mb: Annotated[float, typer.Option("--max-body-mb", help="Largest request body in MiB.")] = 16.0,
    workers: Annotated[int, typer.Option("--workers", help="Query worker threads.")] = 4,
) -> None:
    """Serve /sparql (SPARQL 1.1 Protocol), /rdf-graphs (Graph Store), /dsl, /runs and /health; docs at /docs."""
    import uvicorn

    from debugtune.server import create_app

    if allow_update and token_file is None:
        fail("--allow-update needs --token-file FILE (updates are accepted only with its bearer token)")
    token = read_token(token_file) if token_file is not None else None
    if timeout <= 0 or max_rows < 1 or max_body_mb <= 0 or workers < 1:
        fail("--timeout, --max-rows, --max-body-mb and --workers must be positive")
    limits = Limits(query_timeout_s=timeout, max_rows=max_rows, max_body_bytes=int(max_body_mb * 1024 * 1024),
                    workers=workers)
    with session_store(store) as st:
        app = create_app(st, allow_update=allow_update, token=token, limits=limits)
        url = f"http://{host}:{port}"
        console.print(f"serving {st.target} at {url}: SPARQL {url}/sparql, Graph Store {url}/rdf-graphs, "
                      f"DSL {url}/dsl, API docs {url}/docs; updates "
                      f"{'enabled (bearer token)' if allow_update else 'disabled'}", highlight=False)
        uvicorn.run(app, host=host, port=port, log_level="warning")
