"""``pgq dashboard``: serve the web dashboard, JSON API and ``/metrics`` with uvicorn."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from .context import CliContext, connected
from .errors import CommandError

TOKEN_VARIABLE = "PGQUEUE_DASHBOARD_TOKEN"  # noqa: S105 (the variable's name)


@connected(json=False)
def dashboard(
    context: CliContext,
    host: Annotated[
        str, typer.Option("--host", metavar="ADDRESS",
                          help="Address to listen on. Anything but a loopback address "
                               f"needs {TOKEN_VARIABLE}."),
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, metavar="PORT", help="Port to listen on.")
    ] = 8080,
    refresh: Annotated[
        float, typer.Option("--refresh", min=0.5, metavar="SECONDS",
                            help="How often open pages update their live part.")
    ] = 3.0,
) -> None:
    """Serve the web dashboard, its JSON API, /metrics and /healthz.

    Listens on 127.0.0.1 unless told otherwise. With PGQUEUE_DASHBOARD_TOKEN set, every
    page, API call and /metrics needs that token (Authorization: Bearer, or the login
    form); bound to any other address it refuses to start without one.
    """
    token = os.environ.get(TOKEN_VARIABLE) or None
    try:
        import uvicorn

        from pgqueue.dashboard import Access, create_app
    except ImportError as exc:
        raise CommandError(
            f"pgq dashboard needs the dashboard extra ({exc.name} is missing): "
            "pip install 'pgqueue[dashboard]'"
        ) from None
    try:
        access = Access.for_bind(host, token)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    with context.session() as queue:
        app = create_app(queue, access, refresh_seconds=refresh)
        where = f"[{host}]" if ":" in host else host
        typer.echo(f"pgqueue dashboard on http://{where}:{port}/ (Ctrl-C stops it)"
                   + ("; token required" if token else ""), err=True)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                    server_header=False)


def register(app: typer.Typer) -> None:
    """Add ``dashboard`` to ``app``."""
    app.command()(dashboard)
