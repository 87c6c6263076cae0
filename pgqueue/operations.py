"""Enqueueing, reading and cancelling jobs, written once as plans (see ``db.plans``).

The Queue runs these on its own pooled connections or on the caller's connection; the
CLI and any dashboard call the Queue, so all of them share exactly this logic. The other
plans of the management layer: ``pgqueue.dead_jobs`` (retry, purge) and
``pgqueue.stats`` (per-queue counts, live workers).
"""

from __future__ import annotations

from typing import Any

from pgqueue.arguments import EncodedBatch
from pgqueue.db.copy_rows import NULL, copy_field, job_rows, splits_into_jobs
from pgqueue.db.plans import CAN_COPY, Copy, Plan, Row, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import DuplicateJob, JobNotFound

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
    queries: Queries, *, status: str | None, queue: str | None, task: str | None, limit: int
) -> Plan[list[Row]]:
    """Newest first, filtered by API status (``dead`` reads dead_jobs), queue and task."""
    params = {"status": status, "queue": queue, "task": task, "limit": limit}
    if status == "dead":
        query = queries.select_dead_jobs
    elif status is not None:
        query = queries.select_live_jobs
    else:
        query = queries.select_jobs
    rows = yield Statement(query, params, fetch="all")
    return rows  # type: ignore[no-any-return]


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
