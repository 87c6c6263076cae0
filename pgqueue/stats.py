"""What the queues and the workers are doing now: ``Queue.stats()`` and ``Queue.workers()``.

Plans (see ``db.plans``) and the typed results they return. Each result has one
``to_dict()``, the JSON shape of the contract's §8: ``pgq stats --json`` and
``pgq workers --json`` print it, and an HTTP API must serve the same, so the two
cannot drift.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pgqueue.db.plans import Plan, Row, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ConfigurationError
from pgqueue.health import DatabaseHealth, database_health

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

__all__ = [
    "Overview", "QueueOverview", "QueueStats", "ThroughputPoint", "WorkerInfo", "WorkerStatus",
    "age", "last_line", "list_workers", "overview", "queue_stats", "throughput", "when",
]


@dataclass(frozen=True)
class QueueStats:
    """One queue: its jobs by API status, and how long its oldest ready job has waited.

    A queue appears once it has a live or a dead job.
    """

    queue: str
    queued: int
    scheduled: int
    retrying: int
    waiting: int  # workflow steps waiting for the steps they come after
    running: int
    succeeded: int
    cancelled: int
    dead: int
    oldest_queued_age_seconds: float | None  # None: no job of this queue is ready

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: an object of ``pgq stats --json``."""
        return asdict(self)


def queue_stats(queries: Queries) -> Plan[list[QueueStats]]:
    """Per queue, ordered by name: counts by API status and the oldest ready job's age."""
    rows = yield Statement(queries.queue_stats, {}, fetch="all")
    return [_build(QueueStats, row) for row in rows]


# ``alive`` while a worker's row lease runs; ``expired`` once it has run out (the process
# is gone or stuck, and the next maintenance round removes the row).
WorkerStatus = Literal["alive", "expired"]


@dataclass(frozen=True)
class WorkerInfo:
    """One row of ``pgqueue.workers`` (a worker process) and its status at read time."""

    id: str
    hostname: str
    pid: int
    queues: list[str]  # empty: every queue
    concurrency: int
    stuck: int  # threads stuck in a sync call whose attempt ended (their slots are taken)
    started_at: datetime
    last_heartbeat_at: datetime
    lease_expires_at: datetime
    status: WorkerStatus

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: an object of ``pgq workers --json`` (the table's columns plus
        ``status``, datetimes in ISO 8601)."""
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in asdict(self).items()
        }


def list_workers(queries: Queries) -> Plan[list[WorkerInfo]]:
    """Worker processes in the order they started; the database's clock decides alive
    or expired (the one that set the leases)."""
    rows = yield Statement(queries.select_workers, {}, fetch="all")
    return [
        _build(WorkerInfo, row | {"status": "alive" if row["alive"] else "expired"})
        for row in rows
    ]


@dataclass(frozen=True)
class QueueOverview:
    """One queue on the dashboard's overview: its unfinished and dead jobs by API status.

    Finished jobs (succeeded, cancelled) are left out on purpose: counting them reads the
    whole table (they are most of it), while every count here comes from an index whose
    size follows the backlog. ``pgq stats`` / ``GET /api/stats`` count everything.
    """

    queue: str
    paused: bool
    queued: int
    scheduled: int
    retrying: int
    waiting: int
    running: int
    dead: int
    oldest_queued_age_seconds: float | None  # None: no job of this queue is ready

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: an object of ``overview["queues"]``."""
        return asdict(self)


@dataclass(frozen=True)
class Overview:
    """What the dashboard's overview shows: queues (cheap counts), worker processes, and
    what the database does to the queue (running jobs no worker holds, the vacuum
    horizon, dead tuples: :class:`~pgqueue.health.DatabaseHealth`)."""

    queues: list[QueueOverview]
    workers: list[WorkerInfo]
    database: DatabaseHealth
    now: datetime  # the database's clock, which decided the worker statuses

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``{"queues": [...], "workers": [...], "database": {...},
        "now": ...}``."""
        return {"queues": [entry.to_dict() for entry in self.queues],
                "workers": [worker.to_dict() for worker in self.workers],
                "database": self.database.to_dict(),
                "now": self.now.isoformat()}


def overview(queries: Queries) -> Plan[Overview]:
    """The overview's queues, workers and database health (see :class:`QueueOverview`
    for what is counted)."""
    rows = yield Statement(queries.overview_counts, {}, fetch="all")
    workers = yield from list_workers(queries)
    database = yield from database_health(queries)
    return Overview([_build(QueueOverview, row) for row in rows], workers, database,
                    database.now)


@dataclass(frozen=True)
class ThroughputPoint:
    """How many jobs of one queue had one outcome in one minute, over every worker (and
    every task, unless the plan was asked for one).

    ``outcome`` is ``succeeded``, ``failed`` (an attempt failed; the job runs again),
    ``dead``, ``cancelled`` or ``snoozed``. Read from ``job_counts``, which workers fill
    at each heartbeat (so the current minute lags by up to one heartbeat interval) and
    which outlives the pruning of finished jobs.
    """

    minute: datetime  # the start of the minute
    queue: str
    outcome: str
    count: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``minute`` in ISO 8601)."""
        return {"minute": self.minute.isoformat(), "queue": self.queue,
                "outcome": self.outcome, "count": self.count}


def throughput(
    queries: Queries, *, minutes: int = 60, queue: str | None = None,
    task: str | None = None,
) -> Plan[list[ThroughputPoint]]:
    """Outcomes per minute over the last ``minutes`` minutes (the current one included),
    by queue (only ``queue`` when given) and outcome, oldest first; of every task, or of
    ``task`` only.

    Sparse: a minute, queue and outcome with no job has no point (a chart fills zeros).
    """
    if not 1 <= minutes <= 7 * 24 * 60:
        raise ConfigurationError(f"minutes must be between 1 and {7 * 24 * 60} (7 days), "
                         f"got {minutes!r}")
    params = {"minutes": minutes, "queue": queue, "task": task}
    rows = yield Statement(queries.select_throughput, params, fetch="all")
    return [_build(ThroughputPoint, row) for row in rows]


def _build(kind: type[T], row: Row) -> T:
    """``kind`` from the row's columns of the same names (a row may hold more)."""
    return kind(**{f.name: row[f.name] for f in fields(kind)})


def age(seconds: float | None, *, days: bool = False) -> str:
    """A wait for a table cell: ``4.2s``, ``12m``, ``3.1h`` (with ``days``, ``2.0d`` from
    two days on), or ``-``."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if days and seconds >= 172800:
        return f"{seconds / 86400:.1f}d"
    return f"{seconds / 3600:.1f}h"


def when(value: datetime | None) -> str:
    """A timestamp for a table cell: UTC to the second, or ``-``."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def last_line(text: str | None) -> str:
    """The last line of a traceback: the exception itself, which is what a table needs
    (or ``-``)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "-"
