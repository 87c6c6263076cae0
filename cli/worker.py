"""``pgq worker``: run a worker process for the user's Queue until stopped.

The library does the work (connecting with retries for ``--connect-timeout``, refusing an
out-of-date schema, draining on SIGTERM); this command loads the Queue named by ``-A``,
points it at ``--dsn``/``--schema`` when given, sets up logging and passes the options on.
Durations are passed through as text: the library's parser accepts ``30s``, ``15m``,
``1h``, ``7d`` or plain seconds and reports a bad value in one line.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from .context import cli_context
from .loading import load_queue
from .logs import configure_logging
from .options import AppOption, DsnOption, EmbeddedOption, SchemaOption


class LogLevel(StrEnum):
    """Logging thresholds accepted by ``--log-level``."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def worker(
    ctx: typer.Context,
    app: AppOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", metavar="N", help="Jobs run at once (default 8).",
                     show_default=False),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option("--queues", "-Q", metavar="A,B",
                     help="Comma-separated queues (default: every queue).",
                     show_default=False),
    ] = None,
    shutdown_timeout: Annotated[
        str | None,
        typer.Option("--shutdown-timeout", metavar="DURATION", show_default=False,
                     help="On SIGTERM, wait this long for running jobs (default 30s)."),
    ] = None,
    poll_interval: Annotated[
        str | None,
        typer.Option("--poll-interval", metavar="DURATION", show_default=False,
                     help="Poll this often when no notification arrives (default 5s)."),
    ] = None,
    lease: Annotated[
        str | None,
        typer.Option("--lease", metavar="DURATION", show_default=False,
                     help="Lease per claimed job, renewed by heartbeats (default 30s)."),
    ] = None,
    connect_timeout: Annotated[
        str | None,
        typer.Option("--connect-timeout", metavar="DURATION", show_default=False,
                     help="Keep retrying an unreachable database this long (default 30s)."),
    ] = None,
    burst: Annotated[
        bool, typer.Option("--burst", help="Drain the jobs that are ready, then exit 0.")
    ] = False,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", "-l", case_sensitive=False, help="Log threshold.")
    ] = LogLevel.info,
    dsn: DsnOption = None,
    embedded: EmbeddedOption = False,
    schema: SchemaOption = None,
) -> None:
    """Run a worker: claim jobs from PostgreSQL and run them until stopped."""
    context = cli_context(ctx, dsn=dsn, embedded=embedded, schema=schema)
    if not app:
        raise typer.BadParameter(
            "name your Queue as module:attribute, or set PGQUEUE_APP",
            ctx=ctx,
            param_hint="'-A' / '--app'",
        )
    configure_logging(log_level.value)
    given: dict[str, Any] = {
        "concurrency": concurrency,
        "queues": queues,
        "shutdown_timeout": shutdown_timeout,
        "poll_interval": poll_interval,
        "lease": lease,
        "connect_timeout": connect_timeout,
    }
    settings = {name: value for name, value in given.items() if value is not None}
    queue = load_queue(app)
    # Validate every option before touching the database (or starting an embedded one).
    queue.worker_settings(**settings, burst=burst)
    context.configure(queue)
    status = queue.run_worker(**settings, burst=burst)
    raise typer.Exit(status)


def register(app: typer.Typer) -> None:
    """Add ``worker`` to ``app``."""
    app.command()(worker)
