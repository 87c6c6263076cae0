"""Enqueueing, reading and cancelling jobs, written once as plans (see ``db.plans``).

The Queue runs these on its own pooled connections or on the caller's connection; the
CLI and any dashboard call the Queue, so all of them share exactly this logic. The other
plans of the management layer: ``pgqueue.dead_jobs`` (retry, purge) and
``pgqueue.stats`` (per-queue counts, live workers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pgqueue.arguments import EncodedBatch
from pgqueue.bounds import short_repr
from pgqueue.db.copy_rows import NULL, copy_field, job_rows, splits_into_jobs
from pgqueue.db.plans import CAN_COPY, Copy, Plan, Row, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ConfigurationError, DuplicateJob, JobNotFound
from pgqueue.job import Job

# How often an idempotent insert re-tries when the holder of its key vanishes between
# our insert (which saw it) and our read (which no longer does).
_IDEMPOTENT_INSERT_TRIES = 5


def insert_job(queries: Queries, params: dict[str, Any]) -> Plan[Row]:
    """Insert one job, or return the live job that already holds its idempotency key."""
    for _ in range(_IDEMPOTENT_INSERT_TRIES):
        row = yield Statement(queries.insert_job, params)
        if row is not None:
            return row  # type: ignore[no-any-return]
        holder = yield Statement(queries.select_job_by_idempotency_key, params)
        if holder is not None:
            return holder  # type: ignore[no-any-return]
    raise DuplicateJob(
        f"idempotency key {params['idempotency_key']!r} kept changing hands; try again"
    )


def insert_jobs(queries: Queries, params: dict[str, Any], batch: EncodedBatch) -> Plan[Row]:
    """Insert many jobs; one row back: ``ids`` (input order), ``run_at``, ``created_at``
    and ``ready`` (shared by every job of the batch).

    A batch of at least :data:`COPY_MIN_JOBS` jobs without keyword arguments streams its
    rows with COPY when the connection allows it (see ``db.copy_rows``); any other batch
    is one ``INSERT ... SELECT``. Both write the same columns.
    """
    if (
        batch.count >= COPY_MIN_JOBS
        and batch.kwargs == "[]"
        and splits_into_jobs(batch.args, batch.count)
        and (yield CAN_COPY)
    ):
        row = yield from _copy_jobs(queries, params, batch)
        return row
    row = yield Statement(
        queries.insert_jobs, params | {"args": batch.args, "kwargs": batch.kwargs}
    )
    return row  # type: ignore[no-any-return]


# From how many jobs insert_jobs uses COPY. It costs three more round trips than one
# INSERT and wins them back on PostgreSQL's side, per row; on this project's benchmark
# machine (localhost) the two paths break even near 2,000 jobs and COPY is ~20% faster
# at 20,000 (benchmarks/bulk_enqueue.py, variants annotated and annotated_insert).
COPY_MIN_JOBS = 2000


def _copy_jobs(queries: Queries, params: dict[str, Any], batch: EncodedBatch) -> Plan[Row]:
    start = yield Statement(
        queries.copy_jobs_start,
        {"jobs_table": queries.jobs_table, "run_at": params["run_at"],
         "run_in": params["run_in"]},
    )
    columns, fields = _shared_columns(params, start)
    yield Copy(queries.copy_jobs(("args", *columns)), job_rows(batch.args, fields))
    finish = yield Statement(
        queries.copy_jobs_finish,
        {"jobs_table": queries.jobs_table, "before_id": start["before_id"],
         "count": batch.count},
        binary=True,
    )
    ids = finish["ids"]
    if ids is None:
        ids = list(range(start["before_id"] + 1, finish["last_id"] + 1))
    if len(ids) != batch.count:
        raise RuntimeError(
            f"bulk enqueue wrote {batch.count} jobs but found {len(ids)} ids; the "
            "transaction should be rolled back (please report this)"
        )
    return {"ids": ids, "created_at": start["created_at"], "run_at": start["run_at"],
            "ready": start["ready"]}


def _shared_columns(params: dict[str, Any], start: Row) -> tuple[tuple[str, ...], list[bytes]]:
    """The columns every row of a COPY shares, and their escaped values.

    Columns left out take the table's defaults, as in insert_jobs: id, status, attempts,
    created_at (now(): this transaction's start) — and run_at and meta when they are
    the defaults, which spares PostgreSQL parsing them on every row.
    """
    columns = ["queue", "task", "priority", "max_attempts", "timeout", "result_ttl"]
    fields = [
        copy_field(params["queue"]), copy_field(params["task"]),
        b"%d" % params["priority"], b"%d" % params["max_attempts"],
        NULL if params["timeout"] is None else repr(float(params["timeout"])).encode(),
        b"%d" % params["result_ttl"],
    ]
    if params["meta"] != "{}":
        columns.append("meta")
        fields.append(copy_field(params["meta"]))
    if start["run_at"] != start["created_at"]:
        columns.append("run_at")
        fields.append(copy_field(start["run_at"].isoformat()))
    for name in ("concurrency_key", "rate_limit_key"):
        if params[name] is not None:
            columns.append(name)
            fields.append(copy_field(params[name]))
    if params["cost"] is not None:
        columns.append("cost")
        fields.append(repr(float(params["cost"])).encode())
    return tuple(columns), fields


def get_job(queries: Queries, job_id: int) -> Plan[Row | None]:
    """The live or dead job with this id."""
    row = yield Statement(queries.select_job, {"id": job_id})
    return row  # type: ignore[no-any-return]


def list_jobs(
    queries: Queries,
    *,
    status: str | None,
    queue: str | None,
    task: str | None,
    limit: int,
    cursor: JobCursor | None = None,
) -> Plan[list[Row]]:
    """Newest first, filtered by API status (``dead`` reads dead_jobs), queue and task;
    with ``cursor``, the rows after the one it names (keyset pagination)."""
    params = {"status": status, "queue": queue, "task": task, "limit": limit,
              "before_id": None if cursor is None else cursor.id,
              "before_failed_at": None if cursor is None else cursor.failed_at}
    if status == "dead":
        query = queries.select_dead_jobs
    elif status is not None:
        query = queries.select_live_jobs
    else:
        query = queries.select_jobs
    rows = yield Statement(query, params, fetch="all")
    return rows  # type: ignore[no-any-return]


_MAX_BIGINT = 2**63 - 1


@dataclass(frozen=True)
class JobCursor:
    """Where a page of a job list ends: its last job's id (and, in a list of dead jobs,
    which is ordered by when they failed, its ``failed_at``).

    Sent to clients as an opaque string (:meth:`encode`): ``123``, or ``123@<failed_at>``.
    """

    id: int
    failed_at: datetime | None = None

    def encode(self) -> str:
        """The cursor as a URL-safe string."""
        if self.failed_at is None:
            return str(self.id)
        return f"{self.id}@{self.failed_at.astimezone(UTC).isoformat()}"

    @classmethod
    def decode(cls, text: str) -> JobCursor:
        """The cursor :meth:`encode` wrote; a one-line ConfigurationError for anything else."""
        head, _, tail = text.partition("@")
        try:
            failed_at = datetime.fromisoformat(tail.replace(" ", "+")) if tail else None
            job_id = int(head)
            valid = 0 < job_id <= _MAX_BIGINT and (failed_at is None
                                                     or failed_at.tzinfo is not None)
        except ValueError:
            valid = False
        if not valid:
            raise ConfigurationError(
                f"invalid cursor {short_repr(text)}: use the next_cursor of the previous page"
            )
        return cls(job_id, failed_at)


@dataclass(frozen=True)
class JobPage:
    """One page of a job list and the cursor of the next (None: this is the last)."""

    jobs: list[Job]
    next_cursor: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: ``{"jobs": [...], "next_cursor": ...}`` (the contract's §8 list
        shape, plus the cursor)."""
        return {"jobs": [job.to_dict() for job in self.jobs], "next_cursor": self.next_cursor}


def job_page(
    queries: Queries,
    *,
    status: str | None,
    queue: str | None,
    task: str | None,
    limit: int,
    cursor: str | None,
) -> Plan[JobPage]:
    """A page of :func:`list_jobs` (``limit`` jobs at most) and the next page's cursor.

    Reads one row more than it returns, to know whether a next page exists.
    """
    after = None if cursor is None else JobCursor.decode(cursor)
    if after is not None and status == "dead" and after.failed_at is None:
        raise ConfigurationError(
            f"invalid cursor {short_repr(cursor)} for dead jobs: use the next_cursor of the "
            "previous page"
        )
    rows = yield from list_jobs(queries, status=status, queue=queue, task=task,
                                limit=limit + 1, cursor=after)
    jobs = [Job.from_row(row) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = jobs[-1]
        next_cursor = JobCursor(last.id, last.failed_at if status == "dead" else None).encode()
    return JobPage(jobs, next_cursor)


def purge_queue(queries: Queries, queue: str) -> Plan[int]:
    """Delete every job of ``queue`` except running ones, and its dead jobs (with their
    steps); the count of jobs."""
    live = yield Statement(queries.purge_queue_jobs, {"queue": queue})
    dead = yield Statement(queries.purge_queue_dead_jobs, {"queue": queue})
    return int(live["purged"]) + int(dead["purged"])


def cancel_job(queries: Queries, job_id: int) -> Plan[Row]:
    """Queued → cancelled now; running → cancellation requested; finished → unchanged."""
    done = yield Statement(queries.cancel_queued_job, {"id": job_id})
    if done is None:
        yield Statement(queries.request_cancel_running_job, {"id": job_id})
    row = yield Statement(queries.select_job, {"id": job_id})
    if row is None:
        raise JobNotFound(f"no job with id {job_id}")
    return row  # type: ignore[no-any-return]
