"""`cann-debug serve`: the SPARQL endpoint, Graph Store, DSL and run reports over HTTP (docs/server.md)."""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
from pathlib import Path
from typing import Annotated

import typer

from debugtune.cli.apps import debug_app
from debugtune.cli.common import StoreOption, console, err_console, fail, session_store
from debugtune.kg.endpoint import Limits

#: what the banner lists: every page and endpoint of ``debugtune.server.create_app`` (tests/test_cli_output.py
#: checks that no GET route is missing)
SERVED = (("dashboard", "/"), ("SPARQL editor", "/sparql-editor"), ("compare runs", "/compare"),
          ("DSL query page", "/query"), ("run report", "/runs/{id}/report"), ("run page", "/runs/{id}/page"),
          ("SPARQL", "/sparql"), ("Graph Store", "/rdf-graphs"), ("DSL (POST)", "/dsl"), ("runs (JSON)", "/runs"),
          ("health", "/health"), ("API docs", "/docs"))


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip("[]").lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, *, allow_update: bool, tls: bool, plain_http_ok: bool) -> str | None:
    """The warning for a bind beyond loopback (None on loopback); fails for updates over plain HTTP there."""
    if is_loopback(host):
        return None
    if allow_update and not tls and not plain_http_ok:
        fail(f"--host {host} serves every machine that reaches this one, and --allow-update over plain HTTP would "
             "send the bearer token in clear text: give --ssl-certfile/--ssl-keyfile, bind 127.0.0.1, or pass "
             "--i-know-this-is-plain-http")
    return (f"--host {host} binds beyond loopback: anyone who reaches this machine can query the store"
            + ("" if tls else " over plain HTTP") + (" and, with the token, change it" if allow_update else ""))


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
    workers: Annotated[int, typer.Option("--workers", help="Query worker processes.")] = 4,
    query_memory_mb: Annotated[int, typer.Option("--query-memory-mb", help="Resident memory a query worker may add "
                                                 "(MiB); a query past it is stopped (0: no cap).")] = 2048,
    allow_service: Annotated[list[str] | None, typer.Option("--allow-service", help="An endpoint IRI that SPARQL "
                             "SERVICE may name (repeat for several); none by default.")] = None,
    ssl_certfile: Annotated[Path | None, typer.Option("--ssl-certfile", help="TLS certificate (PEM).")] = None,
    ssl_keyfile: Annotated[Path | None, typer.Option("--ssl-keyfile", help="TLS private key (PEM).")] = None,
    plain_http_ok: Annotated[bool, typer.Option("--i-know-this-is-plain-http", help="Allow --allow-update on a "
                             "non-loopback --host without TLS.")] = False,
) -> None:
    """Serve /sparql (SPARQL 1.1 Protocol), /rdf-graphs (Graph Store), /dsl, /runs and /health; docs at /docs."""
    import uvicorn

    from debugtune.server import create_app

    if allow_update and token_file is None:
        fail("--allow-update needs --token-file FILE (updates are accepted only with its bearer token)")
    token = read_token(token_file) if token_file is not None else None
    if timeout <= 0 or max_rows < 1 or max_body_mb <= 0 or workers < 1 or query_memory_mb < 0:
        fail("--timeout, --max-rows, --max-body-mb and --workers must be positive")
    if (ssl_certfile is None) != (ssl_keyfile is None):
        fail("give --ssl-certfile and --ssl-keyfile together")
    for path in (ssl_certfile, ssl_keyfile):
        if path is not None and not path.is_file():
            fail(f"{path}: no such file")
    tls = ssl_certfile is not None
    warning = check_exposure(host, allow_update=allow_update, tls=tls, plain_http_ok=plain_http_ok)
    if warning:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    services = tuple(allow_service or ())
    for iri_text in services:
        if not iri_text.startswith(("http://", "https://")) or any(c in iri_text for c in ' <>"{}|^`\\'):
            fail(f"--allow-service {iri_text!r} is not an http(s) IRI")
    limits = Limits(query_timeout_s=timeout, max_rows=max_rows, max_body_bytes=int(max_body_mb * 1024 * 1024),
                    workers=workers, services=services, query_memory_mb=query_memory_mb or None)
    log = logging.StreamHandler()  # the query workers' deaths and kills, one line each (docs/server.md)
    log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("debugtune").addHandler(log)
    with session_store(store, read_only=not allow_update) as st:  # other commands may write meanwhile
        app = create_app(st, allow_update=allow_update, token=token, limits=limits)
        url = f"{'https' if tls else 'http'}://{host}:{port}"
        console.print(f"serving {st.target} at {url} (updates "
                      f"{'enabled with the bearer token' if allow_update else 'disabled'}):", highlight=False)
        for name, route in SERVED:
            console.print(f"  {name:<15} {url}{route}", highlight=False)
        try:
            uvicorn.run(app, host=host, port=port, log_level="warning",
                        ssl_certfile=str(ssl_certfile) if tls else None, ssl_keyfile=str(ssl_keyfile) if tls else None)
        finally:
            app.state.settings.close()
