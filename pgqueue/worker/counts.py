"""Outcome counts per minute: kept in memory, written to ``job_counts`` by the heartbeat.

Throughput must outlive the pruning of finished jobs, yet cost nothing on the claim and
completion path. So the worker counts each outcome it records (a dict increment in the
completer's callback) by minute, queue, task and outcome, and adds what it counted to its own
rows of ``job_counts`` with one statement per heartbeat (``queries.record_job_counts``)
and once more when it stops. Counts whose write failed on a lost connection are kept for
the next try; other errors (a role without the grant, say) drop them with a warning: a
worker never stops for its statistics.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, Final

import psycopg

from pgqueue.db.queries import Queries
from pgqueue.errors import first_line
from pgqueue.worker.backoff import is_retryable
from pgqueue.worker.outcome import OutcomeKind

logger = logging.getLogger("pgqueue.worker")

# How long maintenance keeps job_counts rows (the dashboard shows an hour; a week lets
# an operator compare today with the same hour last week).
RETENTION: Final = 7 * 24 * 3600.0

# The outcome each recorded kind counts as (the `outcome` column, and the label of
# pgqueue_jobs_processed_total). A shutdown release and a progress report are not
# outcomes of the job's processing and are not counted.
COUNTED: Final[dict[OutcomeKind, str]] = {
    "succeeded": "succeeded",
    "result": "succeeded",  # succeeded by ctx.transaction(); the value recorded now
    "retry": "failed",  # the attempt failed, the job runs again later
    "dead": "dead",
    "cancelled": "cancelled",
    "snooze": "snoozed",
}

Key = tuple[int, str, str, str]  # (minute as a Unix time, queue, task, outcome)


class OutcomeCounts:
    """Counts by minute, queue, task and outcome since the last write."""

    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._counts: dict[Key, int] = {}

    def add(self, queue: str, task: str, kind: OutcomeKind) -> None:
        """Count one recorded outcome of ``kind`` (kinds that are not counted are ignored)."""
        outcome = COUNTED.get(kind)
        if outcome is None:
            return
        key = (int(self._clock() // 60) * 60, queue, task, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1

    def __bool__(self) -> bool:
        return bool(self._counts)

    def take(self) -> dict[Key, int]:
        """What was counted since the last take (and forget it)."""
        taken, self._counts = self._counts, {}
        return taken

    def give_back(self, taken: dict[Key, int]) -> None:
        """Counts whose write failed: added to those counted since, for the next try."""
        for key, count in taken.items():
            self._counts[key] = self._counts.get(key, 0) + count

    async def write(self, conn: psycopg.AsyncConnection[Any], queries: Queries,
                    worker_id: str) -> None:
        """Add the counts to this worker's rows; raises a retryable error (counts kept)."""
        if not self._counts:
            return
        taken = self.take()
        try:
            await conn.execute(queries.record_job_counts, parameters(taken, worker_id))
        except Exception as exc:
            if is_retryable(exc):
                self.give_back(taken)
                raise
            logger.warning("Could not record %d outcome count(s) in job_counts (%s); they "
                           "are dropped (throughput will miss them).", sum(taken.values()),
                           first_line(exc))


def parameters(taken: dict[Key, int], worker_id: str) -> dict[str, Any]:
    """The parameters of ``queries.record_job_counts`` for ``taken``."""
    keys = list(taken)
    return {
        "worker_id": worker_id,
        "minutes": [datetime.fromtimestamp(minute, UTC) for minute, _, _, _ in keys],
        "queues": [queue for _, queue, _, _ in keys],
        "tasks": [task for _, _, task, _ in keys],
        "outcomes": [outcome for _, _, _, outcome in keys],
        "counts": [taken[key] for key in keys],
    }
