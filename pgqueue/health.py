"""Is the queue healthy? The check behind ``pgq health`` (probes, cron, monitoring).

:func:`check_health` is a plan (``db/plans.py``) that reads what a probe needs in three
cheap statements — the number of live workers, the paused queues, per queue the age of
its oldest ready job, and what the database itself does to the queue
(:class:`DatabaseHealth`: running jobs that no live worker holds, the age of the xmin
horizon, the jobs table's dead tuples) — and judges it against thresholds: it is the one
definition of "healthy" that the CLI and any HTTP endpoint share. The dashboard's
overview and ``/metrics`` read the same :func:`database_health`. The database being
unreachable is the caller's to report (the plan cannot run); :func:`unavailable` builds
that report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pgqueue.db.plans import Plan, Statement
from pgqueue.db.queries import Queries

__all__ = ["DatabaseHealth", "HealthReport", "QueueAge", "check_health", "database_health",
           "unavailable"]

# A running job whose lease ran out this long ago, or whose worker's own lease did, is
# held by nobody: the rescuer (every second, on every worker) would have taken it back.
# The contract's "expired leases are recovered within lease + 5 s" gives the figure.
UNHELD_GRACE = 5.0


@dataclass(frozen=True)
class QueueAge:
    """How long the oldest ready job of a queue has waited."""

    queue: str
    age_seconds: float


@dataclass(frozen=True)
class DatabaseHealth:
    """What the database does to the queue, beyond the queue's own rows.

    ``unheld_running``: jobs in SQL ``running`` that no live execution holds — the lease
    ran out more than :data:`UNHELD_GRACE` seconds ago, or the worker named in the row
    has no live ``workers`` row. Nothing takes such a job back while it lasts (no worker
    sweeps, or someone keeps renewing a lease without running the job), so it never
    runs. ``horizon_age_seconds`` / ``horizon_age_xids``: how old the oldest snapshot or
    transaction id is that keeps vacuum from removing dead rows (``horizon_holder`` says
    whose; None: nothing holds it); seconds are known for sessions and prepared
    transactions, transaction ids for replication slots and standbys too. A transaction
    younger than a second does not count (every busy session has one).
    ``jobs_dead_tuples`` / ``jobs_live_tuples``: the statistics' estimates for
    ``jobs``, which a held horizon makes grow.
    """

    unheld_running: int
    unheld_running_ids: list[int]  # the first ten, by id
    horizon_age_seconds: float | None
    horizon_age_xids: int | None
    horizon_holder: str | None
    jobs_dead_tuples: int
    jobs_live_tuples: int
    jobs_last_vacuum_at: datetime | None
    now: datetime  # the database's clock when this was read

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``pgq health --json``, ``GET /api/overview``)."""
        seconds = self.horizon_age_seconds
        return {
            "unheld_running": self.unheld_running,
            "unheld_running_ids": self.unheld_running_ids,
            "horizon_age_seconds": None if seconds is None else round(seconds, 3),
            "horizon_age_xids": self.horizon_age_xids,
            "horizon_holder": self.horizon_holder,
            "jobs_dead_tuples": self.jobs_dead_tuples,
            "jobs_live_tuples": self.jobs_live_tuples,
            "jobs_last_vacuum_at": (None if self.jobs_last_vacuum_at is None
                                    else self.jobs_last_vacuum_at.isoformat()),
        }

    def unheld_problem(self) -> str | None:
        """The sentence naming the unheld running jobs, or None when there are none."""
        if not self.unheld_running:
            return None
        ids = ", ".join(map(str, self.unheld_running_ids))
        more = ", ..." if self.unheld_running > len(self.unheld_running_ids) else ""
        return (f"{self.unheld_running} running job(s) held by no live worker (lease "
                f"ran out or worker gone, more than {UNHELD_GRACE:g}s ago): {ids}{more}")

    def horizon_problem(self, max_age: float | None) -> str | None:
        """The sentence naming a horizon held longer than ``max_age`` seconds, or None."""
        seconds = self.horizon_age_seconds
        if max_age is None or seconds is None or seconds <= max_age:
            return None
        return (f"the xmin horizon is held for {_seconds(seconds)} by {self.horizon_holder}, "
                f"longer than {_seconds(max_age)}: vacuum removes no dead row meanwhile "
                f"({self.jobs_dead_tuples} dead tuples in jobs)")


def database_health(queries: Queries) -> Plan[DatabaseHealth]:
    """Read :class:`DatabaseHealth` (one statement; no scan of the jobs table)."""
    row = yield Statement(queries.select_database_health, {"grace": UNHELD_GRACE},
                          fetch="one")
    return DatabaseHealth(
        unheld_running=int(row["unheld_running"]),
        unheld_running_ids=[int(i) for i in row["unheld_running_ids"]],
        horizon_age_seconds=row["horizon_age_seconds"],
        horizon_age_xids=None if row["horizon_age_xids"] is None
        else int(row["horizon_age_xids"]),
        horizon_holder=row["horizon_holder"],
        jobs_dead_tuples=int(row["jobs_dead_tuples"]),
        jobs_live_tuples=int(row["jobs_live_tuples"]),
        jobs_last_vacuum_at=row["jobs_last_vacuum_at"],
        now=row["now"],
    )


@dataclass(frozen=True)
class HealthReport:
    """What a health check found; ``healthy`` when ``problems`` is empty.

    ``problems`` are sentences naming what is wrong, worst first.
    """

    problems: list[str]
    live_workers: int | None = None  # None: the database could not be read
    oldest_ready: list[QueueAge] = field(default_factory=list)  # oldest first
    paused_queues: list[str] = field(default_factory=list)
    database: DatabaseHealth | None = None

    @property
    def healthy(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: ``healthy: …`` or ``unhealthy: <every problem>``."""
        if self.problems:
            return "unhealthy: " + "; ".join(self.problems)
        oldest = self.oldest_ready[0] if self.oldest_ready else None
        waiting = (f"oldest ready job {_seconds(oldest.age_seconds)} old in queue "
                   f"{oldest.queue!r}" if oldest else "no job waiting")
        return f"healthy: {self.live_workers} live worker(s), {waiting}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``pgq health --json``)."""
        return {
            "healthy": self.healthy,
            "problems": self.problems,
            "live_workers": self.live_workers,
            "oldest_ready": [{"queue": q.queue, "age_seconds": round(q.age_seconds, 3)}
                             for q in self.oldest_ready],
            "paused_queues": self.paused_queues,
            "database": None if self.database is None else self.database.to_dict(),
        }


def check_health(
    queries: Queries,
    *,
    max_queue_age: float | None = 300.0,
    min_workers: int = 1,
    queues: list[str] | None = None,
    max_horizon_age: float | None = 1800.0,
) -> Plan[HealthReport]:
    """Unhealthy when fewer than ``min_workers`` workers are alive, when the oldest
    ready job of a queue (of ``queues`` only, when given; paused queues never count) has
    waited longer than ``max_queue_age`` seconds (None: not checked), when a running job
    is held by no live worker, or when the xmin horizon has been held longer than
    ``max_horizon_age`` seconds (None: not checked)."""
    found = yield Statement(queries.select_health, {}, fetch="one")
    rows = yield Statement(queries.select_oldest_ready, {"queues": queues}, fetch="all")
    database = yield from database_health(queries)
    paused = set(found["paused_queues"])
    ages = [QueueAge(row["queue"], max(0.0, row["age_seconds"])) for row in rows]
    problems = []
    live = int(found["live_workers"])
    if live < min_workers:
        problems.append(f"{live} live worker(s), fewer than {min_workers}")
    if max_queue_age is not None:
        problems += [
            f"oldest queued job in queue {age.queue!r} is {_seconds(age.age_seconds)} old, "
            f"older than {_seconds(max_queue_age)}"
            for age in ages if age.queue not in paused and age.age_seconds > max_queue_age
        ]
    problems += filter(None, [database.unheld_problem(),
                              database.horizon_problem(max_horizon_age)])
    return HealthReport(problems=problems, live_workers=live, oldest_ready=ages,
                        paused_queues=sorted(paused), database=database)


def unavailable(problem: str) -> HealthReport:
    """The report when the database cannot be read at all (unreachable, not migrated)."""
    return HealthReport(problems=[problem])


def _seconds(value: float) -> str:
    """A duration as people read it: ``42s``, ``12m30s``, ``3h05m``."""
    total = int(value)
    if total < 60:
        return f"{value:.0f}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    return f"{total // 3600}h{total % 3600 // 60:02d}m"
