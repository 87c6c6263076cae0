"""Is the queue healthy? The check behind ``pgq health`` (probes, cron, monitoring).

:func:`check_health` is a plan (``db/plans.py``) that reads what a probe needs in two
cheap statements — the number of live workers, the paused queues, and per queue the age
of its oldest ready job — and judges it against thresholds: it is the one definition of
"healthy" that the CLI and any HTTP endpoint share. The database being unreachable is
the caller's to report (the plan cannot run); :func:`unavailable` builds that report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pgqueue.db.plans import Plan, Statement
from pgqueue.db.queries import Queries

__all__ = ["HealthReport", "QueueAge", "check_health", "unavailable"]


@dataclass(frozen=True)
class QueueAge:
    """How long the oldest ready job of a queue has waited."""

    queue: str
    age_seconds: float


@dataclass(frozen=True)
class HealthReport:
    """What a health check found; ``healthy`` when ``problems`` is empty.

    ``problems`` are sentences naming what is wrong, worst first.
    """

    problems: list[str]
    live_workers: int | None = None  # None: the database could not be read
    oldest_ready: list[QueueAge] = field(default_factory=list)  # oldest first
    paused_queues: list[str] = field(default_factory=list)

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
        }


def check_health(
    queries: Queries,
    *,
    max_queue_age: float | None = 300.0,
    min_workers: int = 1,
    queues: list[str] | None = None,
) -> Plan[HealthReport]:
    """Unhealthy when fewer than ``min_workers`` workers are alive, or when the oldest
    ready job of a queue (of ``queues`` only, when given; paused queues never count) has
    waited longer than ``max_queue_age`` seconds (None: not checked)."""
    found = yield Statement(queries.select_health, {}, fetch="one")
    rows = yield Statement(queries.select_oldest_ready, {"queues": queues}, fetch="all")
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
    return HealthReport(problems=problems, live_workers=live, oldest_ready=ages,
                        paused_queues=sorted(paused))


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
