"""``pgq worker``: run a worker process for the user's Queue until stopped.

The library does the work (connecting with retries for ``--connect-timeout``, refusing an
out-of-date schema, draining on SIGTERM); this command loads the Queue named by ``-A``,
points it at ``--dsn``/``--schema`` when given, sets up logging and passes the options on.
Durations are passed through as text: the library's parser accepts ``30s``, ``15m``,
``1h``, ``7d`` or plain seconds and reports a bad value in one line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from enum import Enum, StrEnum
from typing import Annotated, Any

import typer
from typer.core import TyperOption

from pgqueue.worker import WorkerSettings
from pgqueue.worker.supervisor import default_processes, supervise

from .context import CliContext, connected
from .loading import load_queue
from .logs import configure_logging
from .options import AppOption

# The settings a worker runs with when an option is not given: the help texts quote them.
_DEFAULTS = WorkerSettings()
MAX_PROCESSES = 256


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
    ctx: typer.Context,
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
                          "(default: measured, from 1 to 512: as many jobs as the worker "
                          "ends in 20 ms; 0 allowed)."),
    ] = None,
    processes: Annotated[
        str | None,
        typer.Option("--processes", "-P", metavar="N|auto", show_default=False,
                     help="Run N worker processes under a supervisor, each with its own "
                          "--concurrency slots, connections and workers row (auto: one per "
                          "CPU): for CPU-bound tasks, which share one core in one process. "
                          "A child that dies is restarted and its jobs go back to the "
                          "queue at once; SIGTERM drains every child; with "
                          "--metrics-port P, child i serves on P+i (default: one "
                          "process, no supervisor)."),
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
    id_suffix: Annotated[
        str | None,
        # Set by the supervisor of --processes for each child (WorkerSettings.id_suffix).
        typer.Option("--id-suffix", hidden=True),
    ] = None,
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
        "id_suffix": id_suffix,
    }
    settings = {name: value for name, value in given.items() if value is not None}
    count = _process_count(processes)
    if count is not None and metrics_port and metrics_port + count - 1 > 65535:
        raise typer.BadParameter(
            f"{metrics_port}: with --processes {count} the children serve metrics on "
            f"{metrics_port} to {metrics_port + count - 1}; give a port up to "
            f"{65536 - count}", param_hint="'--metrics-port'")
    queue = load_queue(app)
    # Validate every option before touching the database (or starting an embedded one).
    checked = queue.worker_settings(**settings, burst=burst)
    context.configure(queue)
    if count is None:
        status = queue.run_worker(**settings, burst=burst)
    else:
        status = supervise(
            queue, count, child_command(ctx, context), burst=burst,
            connect_timeout=checked.connect_timeout,
            shutdown_timeout=checked.shutdown_timeout,
        )
    raise typer.Exit(status)


def _process_count(value: str | None) -> int | None:
    """``--processes``: a number from 1 to 256, or ``auto`` (one per CPU)."""
    if value is None:
        return None
    if value.strip().lower() == "auto":
        return default_processes()
    if not value.strip().isdigit() or not 1 <= int(value) <= MAX_PROCESSES:
        raise typer.BadParameter(
            f"{value!r} is not a number of processes: give a whole number from 1 to "
            f"{MAX_PROCESSES}, or auto (one per CPU)", param_hint="'--processes'")
    return int(value)


# Options a child gets from the supervisor itself rather than from its command line.
_NOT_PASSED_ON = frozenset({"processes", "id_suffix", "dsn", "embedded", "schema",
                            "metrics_port"})


def child_command(ctx: typer.Context, context: CliContext) -> Callable[[int, str], list[str]]:
    """How the supervisor starts child ``slot``: ``python -m pgqueue.cli worker`` with
    the options given on this command line (an option taken from the environment, such
    as ``-A`` from ``PGQUEUE_APP``, reaches the child through its environment), minus
    ``--processes``, and with the connection options the command line gave, before or
    after ``worker``."""
    options: list[str] = []
    for param in ctx.command.params:
        name = param.name
        if not isinstance(param, TyperOption) or name is None or name in _NOT_PASSED_ON:
            continue
        source = ctx.get_parameter_source(name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = ctx.params[name]
        flag = max(param.opts, key=len)  # --app rather than -A: readable in ps
        if param.is_flag:
            if value:
                options.append(flag)
        else:
            options += [flag, str(value.value if isinstance(value, Enum) else value)]
    if context.dsn is not None:
        options += ["--dsn", context.dsn]
    if context.embedded:
        options.append("--embedded")
    if context.schema is not None:
        options += ["--schema", context.schema]
    # One metrics endpoint per child, each a scrape target of its own: child i serves on
    # P + i (0 stays 0: every child picks a free port).
    port: int | None = ctx.params.get("metrics_port")

    def command(slot: int, suffix: str) -> list[str]:
        own = [] if port is None else ["--metrics-port", str(port + slot if port else 0)]
        return [sys.executable, "-m", "pgqueue.cli", "worker", *options, *own,
                "--id-suffix", suffix]

    return command


def register(app: typer.Typer) -> None:
    """Add ``worker`` to ``app``."""
    app.command()(worker)
