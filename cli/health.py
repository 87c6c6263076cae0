"""``pgq health``: exit 0 when the queue is healthy, 1 with one line saying what is not.

For Kubernetes exec probes, cron jobs and monitoring checks. Unhealthy means: the
database cannot be reached (or its schema is not migrated), fewer than ``--min-workers``
workers are alive, a queue's oldest ready job has waited longer than
``--max-queue-age``, a ``running`` job is held by no live worker, or the vacuum horizon
has been held longer than ``--max-horizon-age``. The judgement is the library's
(``pgqueue.health.check_health``); this command only chooses the thresholds and prints.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pgqueue.errors import ConfigurationError, DatabaseUnavailable, PgQueueError, first_line
from pgqueue.health import HealthReport, check_health, unavailable
from pgqueue.options import queue_name
from pgqueue.settings import parse_duration

from .context import CliContext, connected
from .errors import is_connection_error
from .output import print_json

# --max-queue-age and --max-horizon-age values that turn their check off.
_OFF = ("off", "none")


def max_age(value: str, what: str = "--max-queue-age") -> float | None:
    """Seconds from a duration option (``5m``, ``90s``, plain seconds), None for off."""
    if value.strip().lower() in _OFF:
        return None
    return parse_duration(value, what=what)


@connected(json=True)
def health(
    context: CliContext,
    max_queue_age: Annotated[
        str,
        typer.Option("--max-queue-age", metavar="DURATION",
                     help="Unhealthy when a queue's oldest ready job has waited longer "
                          "(30s, 5m, 1h; 'off': not checked). Paused queues never count."),
    ] = "5m",
    min_workers: Annotated[
        int,
        typer.Option("--min-workers", metavar="N", min=0,
                     help="Unhealthy with fewer live workers (0: not checked)."),
    ] = 1,
    queues: Annotated[
        str | None,
        typer.Option("--queues", "-Q", metavar="A,B", show_default=False,
                     help="Check the age of these queues only (default: every queue)."),
    ] = None,
    max_horizon_age: Annotated[
        str,
        typer.Option("--max-horizon-age", metavar="DURATION",
                     help="Unhealthy when a session or prepared transaction has held the "
                          "vacuum horizon longer (dead jobs pile up meanwhile; 'off': not "
                          "checked)."),
    ] = "30m",
) -> None:
    """Exit 0 when healthy; else exit 1 with one line naming what is wrong."""
    age = max_age(max_queue_age)
    horizon = max_age(max_horizon_age, "--max-horizon-age")
    names = [queue_name(name.strip()) for name in queues.split(",")] if queues else None
    report = _check(context, max_queue_age=age, min_workers=min_workers, queues=names,
                    max_horizon_age=horizon)
    if context.json:
        print_json(report.to_dict())
    else:
        print(report.summary(), file=sys.stdout if report.healthy else sys.stderr)
    raise typer.Exit(0 if report.healthy else 1)


def _check(context: CliContext, *, max_queue_age: float | None, min_workers: int,
           queues: list[str] | None, max_horizon_age: float | None) -> HealthReport:
    """The report; an unreachable or unmigrated database is a finding, not an error."""
    try:
        with context.session() as queue:
            return queue.run_plan(check_health(queue.queries, max_queue_age=max_queue_age,
                                               min_workers=min_workers, queues=queues,
                                               max_horizon_age=max_horizon_age))
    except ConfigurationError:
        raise  # no DSN, a malformed one: the command line is wrong, not the queue
    except Exception as exc:
        if isinstance(exc, DatabaseUnavailable) or is_connection_error(exc):
            return unavailable(f"database unreachable: {first_line(exc)}")
        if isinstance(exc, PgQueueError):  # SchemaOutOfDate: not migrated (yet)
            return unavailable(first_line(exc))
        raise


def register(app: typer.Typer) -> None:
    """Add ``health`` to ``app``."""
    app.command()(health)
