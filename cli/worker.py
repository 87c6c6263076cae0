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

from pgqueue.worker import WorkerSettings

from .context import CliContext, connected
from .loading import load_queue
from .logs import configure_logging
from .options import AppOption

# The settings a worker runs with when an option is not given: the help texts quote them.
_DEFAULTS = WorkerSettings()


def _duration(option: str, what: str) -> Any:
    """A duration option for the setting of the same name, passed on as text (the
    library parses and checks it); its help quotes the setting's default."""
    default = getattr(_DEFAULTS, option.removeprefix("--").replace("-", "_"))
    return typer.Option(option, metavar="DURATION", show_default=False,
                        help=f"{what} (default {default:g}s).")


class LogLevel(StrEnum):
    """Logging thresholds accepted by ``--log-level``."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    """Log line formats accepted by ``--log-format``."""

    text = "text"
    json = "json"


@connected(json=False)
def worker(
    context: CliContext,
    app: AppOption = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", metavar="N", show_default=False, min=1, max=10_000,
                     help=f"Jobs run at once (default {_DEFAULTS.concurrency}, or the sum of "
                          "the --queues slots)."),
    ] = None,
    prefetch: Annotated[
        int | None,
        typer.Option("--prefetch", metavar="K", show_default=False, min=0, max=10_000,
                     help="Jobs claimed beyond the slots: started as slots free, and ended "
                          "jobs whose outcome is not yet committed; SQL never shows more "
                          "than concurrency + K running for this worker "
                          "(default: as many as --concurrency; 0 allowed)."),
    ] = None,
    queues: Annotated[
        str | None,
        typer.Option("--queues", "-Q", metavar="A,B",
                     help="Comma-separated queues, claimed in this order: the first until "
                          "it has nothing ready, then the next; within a queue, higher "
                          "priority first (default: every queue, by priority). name:N runs "
                          "at most N of that queue's jobs at once; --concurrency stays the "
                          "total and defaults to the sum of the N's.",
                     show_default=False),
    ] = None,
    shutdown_timeout: Annotated[
        str | None,
        _duration("--shutdown-timeout", "On SIGTERM, wait this long for running jobs"),
    ] = None,
    poll_interval: Annotated[
        str | None,
        _duration("--poll-interval", "Poll this often when no notification arrives"),
    ] = None,
    lease: Annotated[
        str | None,
        _duration("--lease", "Lease per claimed job, renewed by heartbeats"),
    ] = None,
    connect_timeout: Annotated[
        str | None,
        _duration("--connect-timeout", "Keep retrying an unreachable database this long"),
    ] = None,
    burst: Annotated[
        bool, typer.Option("--burst", help="Drain the jobs that are ready, then exit 0.")
    ] = False,
    listen_dsn: Annotated[
        str | None,
        typer.Option("--listen-dsn", metavar="DSN", show_default=False,
                     help="LISTEN for ready jobs on a connection to this DSN: PostgreSQL "
                          "itself when --dsn leads to a pooler in transaction mode "
                          "(pool_mode=transaction), which cannot deliver notifications."),
    ] = None,
    no_listen: Annotated[
        bool, typer.Option("--no-listen",
                           help="Do not LISTEN; poll every --poll-interval instead (a job "
                                "then waits up to that long to start).")
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", metavar="P", show_default=False, min=0, max=65535,
                     help="Serve Prometheus metrics at /metrics and a health check at "
                          "/healthz (200, or 503 while starting, failing heartbeats or "
                          "draining) on this port; needs pgqueue[metrics]."),
    ] = None,
    metrics_host: Annotated[
        str | None,
        typer.Option("--metrics-host", metavar="ADDRESS", show_default=False,
                     help="Address for --metrics-port (default 127.0.0.1; 0.0.0.0 for a "
                          "scraper or probe from outside the host or pod)."),
    ] = None,
    log_level: Annotated[
        LogLevel, typer.Option("--log-level", "-l", case_sensitive=False, help="Log threshold.")
    ] = LogLevel.info,
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", case_sensitive=False,
                                help="text: one line per record, fields as key=value; json: "
                                     "one JSON object per line.")
    ] = LogFormat.text,
    log_succeeded: Annotated[
        bool, typer.Option("--log-succeeded",
                           help="An INFO line per succeeded job (failures always get one).")
    ] = False,
) -> None:
    """Run a worker: claim jobs from PostgreSQL and run them until stopped."""
    if not app:
        raise typer.BadParameter(
            "name your Queue as module:attribute, or set PGQUEUE_APP",
            param_hint="'-A' / '--app'",
        )
    configure_logging(log_level.value, json_lines=log_format is LogFormat.json)
    given: dict[str, Any] = {
        "concurrency": concurrency,
        "prefetch": prefetch,
        "queues": queues,
        "shutdown_timeout": shutdown_timeout,
        "poll_interval": poll_interval,
        "lease": lease,
        "connect_timeout": connect_timeout,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "log_succeeded": log_succeeded or None,
        "listen_dsn": listen_dsn,
        "listen": False if no_listen else None,
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
