"""Dead jobs: retrying them (same id, attempts from 0) and purging old ones.

Plans (see ``db.plans``) behind ``Queue.retry_dead``, ``Queue.retry_dead_job`` and
``Queue.purge_dead``. Why a dead job was not retried is a :class:`RefusalReason`, so
callers decide on a value, never on the wording of a message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pgqueue.db.plans import Plan, Row, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import DuplicateJob, JobNotFound

__all__ = [
    "DeadRetryResult",
    "RefusalReason",
    "RetryRefusal",
    "dead_queue_counts",
    "purge_dead",
    "retry_dead",
    "retry_dead_job",
]


class RefusalReason(StrEnum):
    """Why a dead job was left where it is."""

    NOT_FOUND = "not_found"  # no dead job has this id (never existed, retried, purged)
    KEY_HELD = "idempotency_key_held"  # a newer live job holds its idempotency key


@dataclass(frozen=True)
class RetryRefusal:
    """One dead job that a retry left dead, and why."""

    id: int
    reason: RefusalReason
    idempotency_key: str | None = None  # the key held by another job (KEY_HELD)

    @property
    def message(self) -> str:
        """The reason in words, for people."""
        if self.reason is RefusalReason.NOT_FOUND:
            return "no dead job with this id"
        return (
            f"idempotency key {self.idempotency_key!r} is held by a live job; "
            "the dead job stays where it is"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``{"id", "reason"}`` with the reason in words."""
        return {"id": self.id, "reason": self.message}


@dataclass(frozen=True)
class DeadRetryResult:
    """What a retry of dead jobs did: ids moved back to jobs, and ids left dead with why."""

    retried: list[int]
    refused: dict[int, RetryRefusal]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``pgq dead retry --json``, refusals ordered by id."""
        return {
            "retried": self.retried,
            "refused": [self.refused[job_id].to_dict() for job_id in sorted(self.refused)],
        }


def retry_dead(
    queries: Queries, *, ids: Sequence[int] | None, queue: str | None
) -> Plan[DeadRetryResult]:
    """Move dead jobs back to ``queued`` keeping their ids; attempts start again at 0.

    A retried workflow step resumes its workflow: the steps its death stopped come back
    ``waiting`` for it, unless another step they depend on is still dead.
    """
    params = {"ids": list(ids) if ids is not None else None, "queue": queue}
    rows = yield Statement(queries.retry_dead_jobs, params, fetch="all")
    retried = [row["id"] for row in rows if row["revived"]]
    steps = [row["id"] for row in rows if row["revived"] and row["workflow_id"] is not None]
    if steps:
        stopped = yield Statement(queries.select_stopped_workflow_steps, {"ids": steps},
                                  fetch="all")
        if stopped:
            yield Statement(queries.retry_dead_jobs,
                            {"ids": [row["id"] for row in stopped], "queue": None}, fetch="all")
        workflows = sorted({row["workflow_id"] for row in rows if row["id"] in steps})
        yield Statement(queries.stop_dead_workflow_steps, {"workflow_ids": workflows})
    refused = {
        row["id"]: RetryRefusal(row["id"], RefusalReason.KEY_HELD, row["idempotency_key"])
        for row in rows
        if not row["revived"]
    }
    if ids is not None:
        found = {row["id"] for row in rows}
        for missing in ids:
            if missing not in found:
                refused[missing] = RetryRefusal(missing, RefusalReason.NOT_FOUND)
    return DeadRetryResult(retried, refused)


def retry_dead_job(queries: Queries, job_id: int) -> Plan[Row]:
    """Retry one dead job and read it back; a refusal raises (JobNotFound, DuplicateJob)."""
    outcome = yield from retry_dead(queries, ids=[job_id], queue=None)
    refusal = outcome.refused.get(job_id)
    if refusal is not None and refusal.reason is RefusalReason.NOT_FOUND:
        raise JobNotFound(f"no dead job with id {job_id}")
    if refusal is not None:
        raise DuplicateJob(f"cannot retry dead job {job_id}: {refusal.message}")
    row = yield Statement(queries.select_job, {"id": job_id})
    if row is None:  # the retry wrote it in this same transaction: a bug if reached
        raise JobNotFound(f"no job with id {job_id}")
    return row  # type: ignore[no-any-return]


def purge_dead(queries: Queries, *, older_than: float, queue: str | None) -> Plan[int]:
    """Delete dead jobs that failed more than ``older_than`` seconds ago, and their steps;
    return the count of jobs."""
    row = yield Statement(queries.purge_dead_jobs, {"older_than": older_than, "queue": queue})
    return int(row["purged"])


def dead_queue_counts(queries: Queries) -> Plan[dict[str, int]]:
    """Each queue that has dead jobs, and how many (ordered by queue name)."""
    rows = yield Statement(queries.dead_queue_counts, {}, fetch="all")
    return {row["queue"]: int(row["dead"]) for row in rows}
