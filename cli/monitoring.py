"""``pgq stats`` and ``pgq workers``: what the queues and the workers are doing now."""

from __future__ import annotations

from datetime import UTC, datetime

import typer

from pgqueue.stats import QueueStats, WorkerInfo, age, when

from .context import CliContext, connected
from .output import output, print_table

STAT_COLUMNS = ("queued", "scheduled", "retrying", "waiting", "running", "succeeded",
                "cancelled", "dead")


@connected(json=True)
def stats(context: CliContext) -> None:
    """Per queue: jobs by status and the age of the oldest ready job."""
    with context.session() as queue:
        found = queue.stats()
    output(context, found, lambda: _stats_table(found))


def _stats_table(found: list[QueueStats]) -> None:
    print_table(
        ["queue", *STAT_COLUMNS, "oldest queued"],
        (
            [entry.queue, *(getattr(entry, name) for name in STAT_COLUMNS),
             age(entry.oldest_queued_age_seconds)]
            for entry in found
        ),
        empty="No jobs yet.",
        right=(*STAT_COLUMNS, "oldest queued"),
    )


@connected(json=True)
def workers(context: CliContext) -> None:
    """Live worker processes and their heartbeats."""
    with context.session() as queue:
        found = queue.workers()
    output(context, found, lambda: _workers_table(found))


def _workers_table(found: list[WorkerInfo]) -> None:
    now = datetime.now(UTC)
    print_table(
        ["id", "hostname", "pid", "queues", "concurrency", "stuck", "started_at",
         "last heartbeat", "status"],
        (
            [worker.id, worker.hostname, worker.pid, ",".join(worker.queues) or "(all)",
             worker.concurrency, worker.stuck, when(worker.started_at),
             f"{(now - worker.last_heartbeat_at).total_seconds():.0f}s ago", worker.status]
            for worker in found
        ),
        empty="No workers running.",
        right=("pid", "concurrency", "stuck"),
    )


def register(app: typer.Typer) -> None:
    """Add ``stats`` and ``workers`` to ``app``."""
    app.command()(stats)
    app.command()(workers)
