"""Every SQL statement pgqueue runs, each under the name the code calls it by.

One place to read the claim, the completion and the lease rules. Statements are the
attributes of :class:`Queries`, written with a ``{schema}`` placeholder and rendered once
per schema (:func:`for_schema`), which quotes the name with ``psycopg.sql.Identifier``;
values are always bound parameters. Code refers to a statement as an attribute
(``queries.complete_jobs``), so mypy checks the name and a search for it finds every
caller.

A statement whose rows Python reads field by field declares the type of those rows
next to it (``_Typed``): a ``NamedTuple`` (or, for the claim, the frozen dataclass the
executor runs) whose fields are the statement's output columns, by name and in order.
Its rows come back as that type (:meth:`Query.all`, :meth:`Query.one`), built from each
row's values in order; ``tests/integration/test_queries.py`` prepares every statement on
a real server and checks that its columns are exactly its row type's fields. Statements
run through ``db/plans.py`` (the public API's operations) read rows as dicts by column
name instead.

Fencing: every claim stores a random ``lease_token`` (drawn by the worker, one per claim
statement) in the rows it takes, and every statement that records what happened to a
running job matches the job on ``id`` *and* ``lease_token`` *and* its status. A worker
whose lease was lost (the rescuer re-queued the job and cleared the token, another claim
drew a new one, or a claim was lost in a PostgreSQL crash) therefore changes nothing:
zero rows means "lease lost". Unlike ``(id, attempts, worker_id)``, a token never
repeats, not even when the same worker claims the same attempt again after a crash.
When these statements run (heartbeat, rescue, lease lengths) is in
``pgqueue/worker/timings.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, Final, Generic, NamedTuple, TypeVar, overload

import psycopg
from psycopg import sql
from psycopg.rows import BaseRowFactory, args_row

R = TypeVar("R")

# -- Rows ------------------------------------------------------------------------------------
# The types of the rows the worker reads, one per statement (or family of statements).


class ClaimedJob(NamedTuple):
    """A job a claim took (a row of ``claim_jobs_*``): the fields the executor needs.

    A named tuple, not a frozen dataclass: one is built per claimed job, and a frozen
    dataclass's ``__init__`` (a ``object.__setattr__`` per field) took 1.07 µs where the
    tuple takes 0.17 µs."""

    id: int
    queue: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    attempt: int  # this claim's attempt number, 1-based (jobs.attempts after the claim)
    max_attempts: int
    timeout: float | None
    meta: dict[str, Any]
    run_at: datetime
    created_at: datetime
    token: int  # this claim's lease_token: the fence of every outcome it records
    workflow_id: int | None = None  # the workflow the job is a step of, if any
    limited: bool = False  # claimed under a limit (claim_limited_jobs): its end wakes workers
    # True: the claim started the job (``running``, ``attempt`` counted). False: it holds
    # the job (``claimed``, not started): ``attempt`` is the attempts spent so far, and a
    # start (start_jobs_*) later returns the row again, started.
    started: bool = True


class LockedLimits(NamedTuple):
    """The row of ``lock_limits``: the limited queues and tasks whose rows this claim now
    holds, and those another claim holds (their jobs are left alone this time)."""

    queues: list[str]
    tasks: list[str]
    skipped_queues: list[str]
    skipped_tasks: list[str]


class NextRunAt(NamedTuple):
    """A row of ``next_run_at`` and ``next_limit_at``."""

    # Seconds until the next scheduled job is due (or a limit admits one), by the
    # database's clock — the one claims compare run_at with — so that a worker whose
    # own clock is off neither wakes early and spins nor sleeps past the job; None: none.
    seconds: float | None


class DatabaseClock(NamedTuple):
    """The row of ``database_clock``."""

    now: datetime  # the transaction's now() on the database server


class AgedJobs(NamedTuple):
    """A row of ``age_priorities``."""

    raised: int  # ready jobs whose priority was raised by one


class RecordedOutcome(NamedTuple):
    """A row of ``complete_jobs``: one outcome that changed its job (a fenced-out one
    returns no row)."""

    id: int
    kind: str  # the outcome kind recorded ('dead' for a job moved to dead_jobs)
    queue: str
    ready: bool  # the job is queued again and due now: worth a NOTIFY
    token: int


class WrittenRow(NamedTuple):
    """A row of ``complete_and_start_jobs_*``: an outcome recorded (``kind`` the outcome
    kind recorded, as in RecordedOutcome; only ``id``, ``queue`` and ``token`` set), or a
    job started (``kind`` 'started') or held and no longer startable ('blocked'), whose
    fields from ``id`` on are a ClaimedJob's."""

    kind: str
    ready: bool  # an outcome: the job is queued again and due now (worth a NOTIFY)
    id: int
    queue: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    attempt: int
    max_attempts: int
    timeout: float | None
    meta: dict[str, Any]
    run_at: datetime
    created_at: datetime
    token: int
    workflow_id: int | None
    limited: bool
    started: bool

    def outcome(self) -> RecordedOutcome:
        return RecordedOutcome(self.id, self.kind, self.queue, self.ready, self.token)

    def job(self) -> ClaimedJob:
        return ClaimedJob._make(self[2:])


class HeldJob(NamedTuple):
    """A row of ``heartbeat``: a job (claimed or running) the database says this worker
    holds, of those the worker said it holds; ``lease_token`` is the row's, which differs
    from the worker's when the job was taken back and claimed again."""

    id: int
    lease_token: int
    cancel_requested: bool


class GivenBack(NamedTuple):
    """The one row of ``rescue_expired_jobs`` and ``give_back_orphaned_jobs``: what they did
    with the jobs they took back."""

    requeued: int  # running jobs back to queued, the attempt counted as failed
    dead: int  # running jobs whose attempts were spent: moved to dead_jobs
    cancelled: int  # running jobs whose cancellation had been requested
    released: int  # claimed jobs (never started) back to queued as they were
    queues: str | None  # the queues that got jobs back, comma-separated


class StaleWorker(NamedTuple):
    """A row of ``delete_stale_workers``."""

    id: str


class DueSchedule(NamedTuple):
    """A row of ``select_due_schedules``: a schedule whose tick has come."""

    name: str
    cron: str
    tz: str
    next_run_at: datetime  # the tick due (the job's run_at)
    now: datetime  # the database's clock: the next tick is computed after it


class TickEnqueued(NamedTuple):
    """The one row of ``enqueue_schedule_tick`` and ``skip_schedule_tick``."""

    advanced: int  # 1: this statement took the tick; 0: another worker did (or it changed)
    job_id: int | None  # the tick's job (None: skipped, or its key was already taken)


class NextTick(NamedTuple):
    """The one row of ``next_schedule_due``."""

    seconds: float | None  # until the next active tick, by the database's clock; None: none


class DeclaredSchedule(NamedTuple):
    """A row of ``declare_schedules``: a code schedule this worker now declares."""

    name: str


class Pruned(NamedTuple):
    """The one row of ``prune_finished_jobs``."""

    pruned: int  # jobs deleted (their steps went with them)


# -- Shared fragments ----------------------------------------------------------------------

# Columns of a job row, in the order queries return them (the fields of pgqueue.job.Job).
JOB_COLUMNS: Final = (
    "id", "queue", "task", "args", "kwargs", "status", "priority", "run_at", "attempts",
    "max_attempts", "idempotency_key", "lease_expires_at", "worker_id", "last_error",
    "result", "meta", "timeout", "result_ttl", "cancel_requested", "created_at",
    "started_at", "finished_at", "expires_at", "workflow_id", "waits_for",
    "concurrency_key", "rate_limit_key", "cost",
)
# Columns of a dead job: the ones a live job has too, then the error that killed it and
# when (statements name the columns they insert, so the table's order does not matter).
DEAD_JOB_COLUMNS: Final = (
    "id", "queue", "task", "args", "kwargs", "priority", "run_at", "attempts",
    "max_attempts", "idempotency_key", "worker_id", "last_error", "meta", "timeout",
    "result_ttl", "created_at", "started_at", "finished_at", "workflow_id",
    "concurrency_key", "rate_limit_key", "cost", "error", "failed_at",
)
# The columns a live job shares with a dead one, as a select list over alias j.
_SHARED = ", ".join("j." + c for c in DEAD_JOB_COLUMNS[:-2])


def _bury(**values: str) -> str:
    """Insert the rows of CTE ``dead`` (deleted from jobs, ``RETURNING`` at least the
    shared columns) into dead_jobs: each column from ``dead``'s column of the same name,
    or from the expression ``values`` gives for it."""
    unknown = set(values) - set(DEAD_JOB_COLUMNS)
    assert not unknown, f"not columns of dead_jobs: {sorted(unknown)}"
    return (
        "INSERT INTO {schema}.dead_jobs (" + ", ".join(DEAD_JOB_COLUMNS) + ")\n"
        "SELECT " + ", ".join(values.get(c, c) for c in DEAD_JOB_COLUMNS) + "\n"
        "FROM dead"
    )


# The status users see: ``queued`` rows split by whether they are due and were tried,
# and a claimed job (held by a worker, not started: revision 0012_claimed) is queued.
_API_STATUS = """
    CASE WHEN j.status = 'queued' AND j.run_at > now()
         THEN CASE WHEN j.attempts > 0 THEN 'retrying' ELSE 'scheduled' END
         WHEN j.status = 'claimed' THEN 'queued'
         ELSE j.status END
"""

# A succeeded job whose return value is still to come: ctx.transaction() committed its
# success, and its worker writes the value a moment later (a worker that died in
# between never does: RESULT_GRACE seconds after finished_at the value counts as lost,
# Job.wait() stops waiting for it, and settle_lost_results gives a workflow step's
# successors null instead).
RESULT_GRACE: Final = 10
_RESULT_PENDING = ("(j.status = 'succeeded' AND j.result IS NULL "
                   f"AND j.finished_at > now() - interval '{RESULT_GRACE} seconds')")

_LIVE_SELECT = (
    "SELECT " + ", ".join("j." + c for c in JOB_COLUMNS) + ", " + _API_STATUS + " AS api_status, "
    "NULL::text AS error, NULL::timestamptz AS failed_at, " + _RESULT_PENDING
    + " AS result_pending FROM {schema}.jobs j"
)
_DEAD_SELECT = (
    "SELECT j.id, j.queue, j.task, j.args, j.kwargs, 'dead' AS status, j.priority, j.run_at, "
    "j.attempts, j.max_attempts, j.idempotency_key, NULL::timestamptz AS lease_expires_at, "
    "j.worker_id, j.last_error, NULL::jsonb AS result, j.meta, j.timeout, j.result_ttl, "
    "false AS cancel_requested, j.created_at, j.started_at, j.finished_at, "
    "NULL::timestamptz AS expires_at, j.workflow_id, NULL::integer AS waits_for, "
    "j.concurrency_key, j.rate_limit_key, j.cost, "
    "'dead' AS api_status, j.error, j.failed_at, false AS result_pending "
    "FROM {schema}.dead_jobs j"
)

# A running job whose cancellation was requested ends cancelled even when its attempt
# failed, snoozed or was released before the worker noticed the request: never requeued.
_CANCEL_WINS = "(o.kind IN ('retry', 'snooze', 'release') AND j.cancel_requested)"

# When a new job is due: %(run_at)s if given, else %(run_in)s seconds after now() (the
# transaction's start). One expression for every way of enqueueing, so a job enqueued
# one by one, in bulk or through COPY gets the same run_at.
_RUN_AT = "COALESCE(%(run_at)s::timestamptz, now() + make_interval(secs => %(run_in)s))"

# Why the rescuer took a job back: its last_error, and its error if that made it dead.
# (Unqualified columns: every place that uses it reads only the jobs table.)
_LEASE_EXPIRED = ("format('lease expired: worker %%s stopped heartbeating during attempt %%s', "
                  "worker_id, attempts)")
# Why a live worker's heartbeat gave a job back: the database says the worker holds it,
# the worker has no record of it. Its claim or its outcome was lost: a failover to a
# replica that had not received them, or a restore to an earlier point.
_NOT_HELD = ("format('worker %%s no longer holds attempt %%s (it has no record of it: its '"
             " || 'claim or its outcome was lost, as in a failover to a replica that had not '"
             " || 'received them)', worker_id, attempts)")

# A held job given back to the queue as it was claimed: it never started, so no attempt
# was spent and it keeps its place in claim order (run_at unchanged).
_UNCLAIMED = ("status = 'queued', worker_id = NULL, lease_token = NULL, "
              "lease_expires_at = NULL")


def _give_back(error: str, cancelled: str) -> str:
    """The CTEs that give back the jobs of CTE ``taken`` (a column ``id``, its rows locked)
    and the select list that counts what they did (a ``GivenBack`` row): a running job
    goes back to queued now with the attempt counted as failed and ``error`` as its
    last_error, or to dead_jobs with it when its attempts are spent, or ends cancelled
    (last_error ``cancelled``) if its cancellation had been requested; a claimed job goes
    back as it was."""
    return """
        requeued AS (
            UPDATE {schema}.jobs AS j
               SET status = 'queued', run_at = now(), worker_id = NULL, lease_token = NULL,
                   lease_expires_at = NULL, cancel_requested = false,
                   last_error = """ + error + """
              FROM taken t
             WHERE j.id = t.id AND j.status = 'running' AND j.attempts < j.max_attempts
               AND NOT j.cancel_requested
            RETURNING j.id, j.queue
        ),
        cancelled AS (
            UPDATE {schema}.jobs AS j
               SET status = 'cancelled', finished_at = now(), lease_expires_at = NULL,
                   expires_at = now() + make_interval(secs => j.result_ttl),
                   last_error = """ + cancelled + """
              FROM taken t
             WHERE j.id = t.id AND j.status = 'running' AND j.cancel_requested
            RETURNING j.id
        ),
        dead AS (
            DELETE FROM {schema}.jobs AS j
             USING taken t
             WHERE j.id = t.id AND j.status = 'running' AND j.attempts >= j.max_attempts
               AND NOT j.cancel_requested
            RETURNING """ + _SHARED + """
        ),
        buried AS (
            """ + _bury(last_error=error, finished_at="now()", error=error,
                        failed_at="now()") + """
        ),
        released AS (
            UPDATE {schema}.jobs AS j SET """ + _UNCLAIMED + """
              FROM taken t
             WHERE j.id = t.id AND j.status = 'claimed'
            RETURNING j.id, j.queue
        )
        SELECT (SELECT count(*) FROM requeued) AS requeued, (SELECT count(*) FROM dead) AS dead,
               (SELECT count(*) FROM cancelled) AS cancelled,
               (SELECT count(*) FROM released) AS released,
               (SELECT string_agg(DISTINCT queue, ',')
                  FROM (SELECT queue FROM requeued UNION ALL SELECT queue FROM released) AS q)
                   AS queues
    """


# Delete the steps (job_steps, revision 0009_job_steps) of the jobs in CTE ``jobs``
# (a column ``id``), for a statement that deletes jobs for good. ``= ANY(ARRAY(...))``
# probes job_steps_pkey once per job: a join could pick a scan of every step. There is
# no foreign key to do this (see the revision), and a job that moves to dead_jobs or back
# keeps its steps, so only the statements that end a job run it.
def _delete_steps_of(jobs: str) -> str:
    return f"""
            DELETE FROM {{schema}}.job_steps
             WHERE job_id = ANY(ARRAY(SELECT id FROM {jobs}))
    """


# Keyset pagination of job lists: rows below %(before_id)s (None: from the newest), so
# a page costs the same however deep it is (never OFFSET). A constant, not an OR with
# NULL, keeps it an index range condition on the primary key.
_BEFORE_ID = "COALESCE(%(before_id)s::bigint, 9223372036854775807)"


# Per queue, the counts of its jobs by API status and its oldest ready job's wait:
# CTEs ``live`` and ``dead``, then the select list over them (``live``/``dead`` aliases).
# A claimed job (held by a worker, not started) is waiting: queued.
_QUEUE_COUNTS = """
    WITH live AS (
        SELECT queue,
               count(*) FILTER (WHERE status = 'claimed'
                                OR (status = 'queued' AND run_at <= now())) AS queued,
               count(*) FILTER (WHERE status = 'queued' AND run_at > now()
                                AND attempts = 0) AS scheduled,
               count(*) FILTER (WHERE status = 'queued' AND run_at > now()
                                AND attempts > 0) AS retrying,
               count(*) FILTER (WHERE status = 'waiting') AS waiting,
               count(*) FILTER (WHERE status = 'running') AS running,
               count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
               min(run_at) FILTER (WHERE status = 'claimed'
                                   OR (status = 'queued' AND run_at <= now()))
                   AS oldest_queued_run_at
          FROM {schema}.jobs GROUP BY queue
    ),
    dead AS (SELECT queue, count(*) AS dead FROM {schema}.dead_jobs GROUP BY queue)
"""
_COUNT_COLUMNS = """
    COALESCE(live.queued, 0) AS queued,
    COALESCE(live.scheduled, 0) AS scheduled,
    COALESCE(live.retrying, 0) AS retrying,
    COALESCE(live.waiting, 0) AS waiting,
    COALESCE(live.running, 0) AS running,
    COALESCE(live.succeeded, 0) AS succeeded,
    COALESCE(live.cancelled, 0) AS cancelled,
    COALESCE(dead.dead, 0) AS dead,
    extract(epoch FROM now() - live.oldest_queued_run_at)::float8 AS oldest_queued_age_seconds
"""


# -- Limits (revision 0010_limits; pgqueue/limits.py explains) -----------------------------
# A queue whose jobs the limited claim takes (a paused queue is claimed by nobody).
_QUEUE_LIMITED = ("concurrency IS NOT NULL OR key_concurrency IS NOT NULL "
                  "OR rate_amount IS NOT NULL OR fair")
# A job whose task is limited, or whose task or either key is paused by RateLimited,
# is not the plain claim's: its scopes ('task:T', 'key:K') must not overlap those read
# once per statement (one InitPlan) from task_limits and limit_state.
_SCOPES_CLEAR = (
    "NOT (ARRAY['task:' || task, 'key:' || concurrency_key, 'key:' || rate_limit_key]"
    " && (SELECT ARRAY(SELECT 'task:' || task FROM {schema}.task_limits UNION ALL"
    " SELECT scope FROM {schema}.limit_state WHERE paused_until > now())))"
)


def _claim_limited(*, in_queues: bool) -> str:
    """The claim of jobs under a limit: up to %(limit)s ready jobs of limited queues and
    tasks that every limit of theirs admits, in claim order (round-robin across keys in a
    fair queue).

    Runs after :attr:`Queries.lock_limits` took the limits' rows in the same transaction
    (%(locked_queues)s, %(locked_tasks)s; jobs of the limits another claim holds,
    %(skipped_queues)s and %(skipped_tasks)s, are left alone), so it is the only claim
    of those limits running and its snapshot (taken after the lock) sees every job the
    previous one started: running jobs are counted from ``jobs`` itself. Candidates: the
    head of the claim index for jobs without a concurrency key, and for keyed jobs the
    first jobs of each key (a skip scan of jobs_concurrency_key_idx), so that a busy
    key's backlog does not hide the other keys. Each candidate is counted against its
    queue's, task's and key's running jobs together with the candidates before it,
    whether those are admitted or not: an admission is never optimistic. Rate buckets: a
    job starts when its bucket's ``next_start_at`` (plus the units of the candidates
    before it in the same bucket) is within 50 ms of now, then the bucket moves on by
    ``units * window / amount``; starts are spread evenly and an idle bucket saves
    nothing up for a burst.
    """
    scope = " AND queue = ANY(%(queues)s::text[])" if in_queues else ""
    limited = (" AND (queue IN (SELECT queue FROM lq) OR task IN (SELECT task FROM lt))"
               " AND queue <> ALL (ARRAY(SELECT name FROM {schema}.queues WHERE paused))"
               " AND queue <> ALL (%(skipped_queues)s::text[])"
               " AND task <> ALL (%(skipped_tasks)s::text[])" + scope)
    order = "priority DESC, run_at, id"
    columns = "id, queue, task, concurrency_key, rate_limit_key, cost, priority, run_at"
    return f"""
        WITH RECURSIVE
        lq AS (
            SELECT name AS queue, concurrency, key_concurrency, rate_amount, rate_window,
                   rate_unit, fair
              FROM {{schema}}.queues WHERE name = ANY(%(locked_queues)s::text[])
        ),
        lt AS (
            SELECT task, global_concurrency, key_concurrency, rate_amount, rate_window,
                   rate_unit
              FROM {{schema}}.task_limits WHERE task = ANY(%(locked_tasks)s::text[])
        ),
        keys AS (
            (SELECT concurrency_key AS key, 1 AS n FROM {{schema}}.jobs
              WHERE status = 'queued' AND concurrency_key IS NOT NULL
              ORDER BY concurrency_key LIMIT 1)
            UNION ALL
            SELECT (SELECT j.concurrency_key FROM {{schema}}.jobs j
                     WHERE j.status = 'queued' AND j.concurrency_key > keys.key
                     ORDER BY j.concurrency_key LIMIT 1), keys.n + 1
              FROM keys WHERE keys.key IS NOT NULL AND keys.n < %(max_keys)s
        ),
        candidate AS (
            (SELECT {columns} FROM (
                 SELECT {columns} FROM {{schema}}.jobs
                  WHERE status = 'queued' AND run_at <= now(){scope}
                  ORDER BY {order} LIMIT %(scan)s) AS head
              WHERE concurrency_key IS NULL {limited})
            UNION ALL
            SELECT head.* FROM keys CROSS JOIN LATERAL (
                SELECT {columns} FROM {{schema}}.jobs
                 WHERE status = 'queued' AND concurrency_key = keys.key AND run_at <= now()
                       {limited}
                 ORDER BY {order}
                 -- Each key's share of the claim (at least two): enough for a fair round
                 -- over all keys, without sorting limit x keys candidates.
                 LIMIT (SELECT GREATEST(2, ceil(%(limit)s::float8 / GREATEST(count(*), 1)))::int
                          FROM keys WHERE key IS NOT NULL)) AS head
             WHERE keys.key IS NOT NULL
        ),
        running AS (
            SELECT queue, task, concurrency_key, started_at FROM {{schema}}.jobs
             WHERE status = 'running'
               AND (queue IN (SELECT queue FROM lq) OR task IN (SELECT task FROM lt))
        ),
        rated AS (
            SELECT c.*, q.concurrency AS queue_cap, q.key_concurrency AS queue_key_cap,
                   t.global_concurrency AS task_cap, t.key_concurrency AS task_key_cap,
                   COALESCE(q.fair, false) AS fair,
                   CASE WHEN t.rate_amount IS NOT NULL
                        THEN COALESCE('key:' || c.rate_limit_key, 'task:' || c.task)
                        WHEN q.rate_amount IS NOT NULL
                        THEN COALESCE('key:' || c.rate_limit_key, 'queue:' || c.queue)
                   END AS bucket,
                   COALESCE(t.rate_window / t.rate_amount, q.rate_window / q.rate_amount)
                       AS per_unit,
                   CASE WHEN COALESCE(t.rate_unit, q.rate_unit) IS NULL THEN 1
                        ELSE COALESCE(c.cost, 1) END AS units
              FROM candidate c
              LEFT JOIN lq q ON q.queue = c.queue
              LEFT JOIN lt t ON t.task = c.task
        ),
        ranked AS (
            SELECT r.*,
                   row_number() OVER (PARTITION BY r.queue ORDER BY {order}) AS n_queue,
                   row_number() OVER (PARTITION BY r.task ORDER BY {order}) AS n_task,
                   row_number() OVER (PARTITION BY r.queue, r.concurrency_key
                                      ORDER BY {order}) AS n_queue_key,
                   row_number() OVER (PARTITION BY r.task, r.concurrency_key
                                      ORDER BY {order}) AS n_task_key,
                   COALESCE(sum(r.units) OVER (PARTITION BY r.bucket ORDER BY {order}
                                               ROWS BETWEEN UNBOUNDED PRECEDING
                                               AND 1 PRECEDING), 0) AS units_before
              FROM rated r
        ),
        running_queue AS (SELECT queue, count(*) AS n FROM running GROUP BY queue),
        running_task AS (SELECT task, count(*) AS n FROM running GROUP BY task),
        running_queue_key AS (
            SELECT queue, concurrency_key, count(*) AS n, max(started_at) AS last_started
              FROM running
             WHERE concurrency_key IS NOT NULL GROUP BY queue, concurrency_key
        ),
        running_task_key AS (
            SELECT task, concurrency_key, count(*) AS n FROM running
             WHERE concurrency_key IS NOT NULL GROUP BY task, concurrency_key
        ),
        admitted AS (
            -- Fair: a key's turn counts the jobs it already has running, and between
            -- keys at the same turn the one whose last job started earliest goes first:
            -- keys take turns even when claims are small (a claim of one job would
            -- otherwise take the oldest key's head at every tie).
            SELECT r.id, r.bucket, r.units * r.per_unit AS charge,
                   CASE WHEN r.fair THEN r.n_queue_key + COALESCE(rqk.n, 0) ELSE 0 END
                       AS turn,
                   CASE WHEN r.fair THEN rqk.last_started END AS last_started
              FROM ranked r
              LEFT JOIN {{schema}}.limit_state s ON s.scope = r.bucket
              LEFT JOIN running_queue rq ON rq.queue = r.queue
              LEFT JOIN running_task rt ON rt.task = r.task
              LEFT JOIN running_queue_key rqk
                     ON rqk.queue = r.queue AND rqk.concurrency_key = r.concurrency_key
              LEFT JOIN running_task_key rtk
                     ON rtk.task = r.task AND rtk.concurrency_key = r.concurrency_key
             WHERE (r.queue_cap IS NULL OR r.n_queue + COALESCE(rq.n, 0) <= r.queue_cap)
               AND (r.task_cap IS NULL OR r.n_task + COALESCE(rt.n, 0) <= r.task_cap)
               AND (r.queue_key_cap IS NULL OR r.concurrency_key IS NULL
                    OR r.n_queue_key + COALESCE(rqk.n, 0) <= r.queue_key_cap)
               AND (r.task_key_cap IS NULL OR r.concurrency_key IS NULL
                    OR r.n_task_key + COALESCE(rtk.n, 0) <= r.task_key_cap)
               AND (r.bucket IS NULL
                    OR GREATEST(s.next_start_at, now())
                       + make_interval(secs => r.units_before * r.per_unit)
                       <= now() + interval '50 milliseconds')
               AND NOT EXISTS (
                   SELECT FROM {{schema}}.limit_state p
                    WHERE p.paused_until > now()
                      AND p.scope IN (r.bucket, 'task:' || r.task, 'queue:' || r.queue,
                                      'key:' || r.concurrency_key, 'key:' || r.rate_limit_key))
             ORDER BY turn, last_started NULLS FIRST, {order}
             LIMIT %(limit)s
        ),
        locked AS (
            SELECT j.id FROM {{schema}}.jobs j
             WHERE j.id IN (SELECT id FROM admitted) AND j.status = 'queued'
               FOR UPDATE SKIP LOCKED
        ),
        claimed AS (
            UPDATE {{schema}}.jobs AS j
               SET status = 'running', attempts = j.attempts + 1, worker_id = %(worker_id)s,
                   lease_token = %(token)s,
                   lease_expires_at = now() + make_interval(secs => %(lease)s),
                   started_at = now(), cancel_requested = false
              FROM locked
             WHERE j.id = locked.id
            RETURNING {_claimed_columns("true", "true")}
        ),
        charged AS (
            -- now() is the same all through the transaction: EXCLUDED.next_start_at - now()
            -- is this claim's charge, added to the bucket as it is when the row is locked.
            INSERT INTO {{schema}}.limit_state AS s (scope, next_start_at)
            SELECT a.bucket, now() + make_interval(secs => sum(a.charge))
              FROM admitted a JOIN claimed c ON c.id = a.id
             WHERE a.bucket IS NOT NULL
             GROUP BY a.bucket
            ON CONFLICT (scope) DO UPDATE
               SET next_start_at = GREATEST(s.next_start_at, now())
                                   + (EXCLUDED.next_start_at - now())
        )
        -- In the order admitted: the worker starts them in the order given.
        SELECT c.* FROM claimed c JOIN admitted a ON a.id = c.id
         ORDER BY a.turn, a.last_started NULLS FIRST, c.priority DESC, c.run_at, c.id
    """


def _claimable(*, in_queues: bool) -> str:
    """The condition on a jobs row for the plain claim to take it: queued and due, not
    blocked (``_UNBLOCKED``), and (``in_queues``) in %(queues)s."""
    where = "status = 'queued' AND run_at <= now()\n AND " + _UNBLOCKED
    if in_queues:
        where += " AND queue = ANY(%(queues)s::text[])"
    return where


def _unblocked() -> str:
    """Not of a paused or limited queue, not of a limited task, not of a paused task or
    key: what the plain claim requires of a job, and a held job's start too (its queue
    may have been paused since it was claimed)."""
    # Paused and limited queues (revisions 0006_queues, 0010_limits): an array read once
    # per statement from the small queues table (an InitPlan), compared with each row the
    # walk meets. Limited tasks and the tasks and keys paused by RateLimited: one more
    # array, of scopes ('task:T', 'key:K'), from task_limits and limit_state. Their jobs
    # are left to claim_limited_jobs. Each table the statement names costs every claim
    # its executor set-up even when nothing is found (measured with a prepared claim of 8
    # of 20,000 ready jobs: 1.11 ms with no check, 1.11 ms with the paused check, 1.44 ms
    # with a check per table and scope kind); two arrays keep it to three tables.
    return ("queue <> ALL (ARRAY(SELECT name FROM {schema}.queues WHERE paused OR "
            + _QUEUE_LIMITED + "))\n AND " + _SCOPES_CLEAR)


_UNBLOCKED = _unblocked()


# The columns of a ClaimedJob, from a jobs row j (after its update) and the claim's
# ``started`` (SQL expression).
def _claimed_columns(limited: str, started: str) -> str:
    return ("j.id, j.queue, j.task, j.args, j.kwargs, j.priority, j.attempts AS attempt, "
            "j.max_attempts, j.timeout, j.meta, j.run_at, j.created_at, "
            f"j.lease_token AS token, j.workflow_id, {limited} AS limited, {started} AS started")


def _claim(*, in_queues: bool, after: bool) -> str:
    """A claim: up to %(limit)s ready jobs, highest priority first, skipping rows another
    worker is claiming right now. The first %(start)s of them, in claim order, start
    (``running``, their attempt counted); the others are held (``claimed``): the worker
    starts them later, as its slots free, with start_jobs_*.

    Each variant is its own statement so that each gets its own simple plan.
    ``in_queues`` limits the claim to %(queues)s. ``after`` resumes behind the last job
    this producer claimed, (%(after_priority)s, %(after_run_at)s, %(after_id)s) in claim
    order, within that priority: every job claimed since the last vacuum leaves a dead
    entry at the head of jobs_claim_idx, and a claim from the head walks all of them
    (measured: 12 index pages after 1,600 claimed jobs, 284 after 57,000). Resuming
    turns that walk into an index range condition. The producer falls back to a claim
    from the head whenever a resumed one comes back short and whenever it is woken, so a
    job that lands behind the cursor waits at most until then (see producer.py).
    """
    where = _claimable(in_queues=in_queues)
    if after:
        where += ("\n AND priority = %(after_priority)s::smallint"
                  "\n AND (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint)")
    # Which rows start is decided by their rank in claim order (the window's sort of at
    # most %(limit)s rows; the claim connection turns JIT off, which the sort's disabled
    # cost would otherwise set off on PostgreSQL < 18).
    return f"""
        WITH claimable AS MATERIALIZED (
            SELECT id, priority, run_at FROM {{schema}}.jobs
             WHERE {where}
             ORDER BY priority DESC, run_at, id
             LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED
        ),
        ranked AS (
            SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id)
                       <= %(start)s AS started
              FROM claimable
        )
        UPDATE {{schema}}.jobs AS j
           SET status = CASE WHEN r.started THEN 'running' ELSE 'claimed' END,
               attempts = j.attempts + r.started::int, worker_id = %(worker_id)s,
               lease_token = %(token)s, lease_expires_at = now() + make_interval(secs => %(lease)s),
               started_at = CASE WHEN r.started THEN now() ELSE j.started_at END,
               cancel_requested = false
          FROM ranked r
         WHERE j.id = r.id
        RETURNING {_claimed_columns("false", "r.started")}
    """


def _starting(*, in_queues: bool) -> str:
    """CTEs that start jobs this worker holds, for %(n)s free slots (``started``, its rows
    those of a ClaimedJob; ``held`` with ``unblocked`` false: the held jobs that may no
    longer start). Started: the best of the held jobs it
    offers (%(offered)s, ``[[id, token], ...]``, still ``claimed`` under that token) and of
    the ready jobs of higher priority than the worst of them (%(floor)s) that the plain
    claim could take, in claim order. A job of higher priority enqueued after the held
    ones were claimed starts before them (claimed here, started at once, under
    %(token)s); a held job that was cancelled, released or taken back since is not
    started. Held jobs offered and not started stay held, but for those the plain claim
    would not take any more (their queue was paused or limited, their task limited or
    paused since they were claimed): those come back unstarted (``started`` false) for
    the worker to give back.

    The higher-priority look is an index range at the top of jobs_claim_idx (priorities
    above the floor): in a queue of one priority it reads one index page and finds
    nothing.
    """
    return f"""
        offered AS (
            SELECT (o->>0)::bigint AS id, (o->>1)::bigint AS token
              FROM jsonb_array_elements(%(offered)s::jsonb) AS o
        ),
        held AS (
            SELECT j.id, j.priority, j.run_at, j.lease_token AS token,
                   {_UNBLOCKED} AS unblocked
              FROM offered o CROSS JOIN LATERAL ({_BY_ID.format(id="o.id")}) AS j
             WHERE j.status = 'claimed' AND j.lease_token = o.token
        ),
        better AS MATERIALIZED (
            SELECT id, priority, run_at, NULL::bigint AS token FROM {{schema}}.jobs
             WHERE {_claimable(in_queues=in_queues)}
               AND priority > %(floor)s::smallint
             ORDER BY priority DESC, run_at, id
             LIMIT %(n)s
             FOR UPDATE SKIP LOCKED
        ),
        picked AS (
            SELECT * FROM (SELECT id, priority, run_at, token FROM held WHERE unblocked
                           UNION ALL SELECT * FROM better) AS candidate
             ORDER BY priority DESC, run_at, id
             LIMIT %(n)s
        ),
        started AS (
            UPDATE {{schema}}.jobs AS j
               SET status = 'running', attempts = j.attempts + 1, worker_id = %(worker_id)s,
                   lease_token = COALESCE(p.token, %(token)s),
                   lease_expires_at = now() + make_interval(secs => %(lease)s),
                   started_at = now(), cancel_requested = false
              FROM picked p
             WHERE j.id = p.id
               AND CASE WHEN p.token IS NULL THEN j.status = 'queued'
                        ELSE j.status = 'claimed' AND j.lease_token = p.token END
            RETURNING {_claimed_columns("false", "true")}
        )
    """


# One jobs row by id, for a LATERAL join from a list of ids: OFFSET 0 keeps the planner
# from folding it into a join, so each id is one primary-key lookup whatever the other
# conditions on the row. Folded, a condition such as ``status = 'claimed'`` matches the
# predicate of jobs_lease_idx, and with statistics that under-count held rows (they were
# taken while the jobs were queued) the planner scans that index — every held and running
# row of every worker — for each batch: 12 ms a batch with 2,400 rows running.
_BY_ID = "SELECT * FROM {{schema}}.jobs WHERE id = {id} OFFSET 0"

# Recording a batch of outcomes (complete_jobs): CTEs ``outcome`` (the batch),
# ``updated`` (jobs that stay in jobs), ``dead`` (moved to dead_jobs) and ``buried``.
#
# Statements that find a batch's jobs by the ids of a JSON array say so twice: as a join
# (which pairs each row with its token and kind) and as ``id = ANY(ARRAY(...))``, which
# makes the scan of jobs a primary-key lookup of just those ids. With the join alone the
# planner, which estimates 100 rows for any jsonb_array_elements, may hash-join against a
# scan of every held and running row of every worker (jobs_lease_idx): measured 5 ms of
# server CPU a batch with 2,400 rows running, instead of under 1.
_RECORD = """outcome AS (
            SELECT (o->>0)::bigint AS id, (o->>1)::bigint AS token, o->>2 AS kind,
                   (o->>3)::jsonb AS result, o->>4 AS error, (o->>5)::float8 AS delay,
                   (o->>6)::jsonb AS progress
              FROM jsonb_array_elements(%(outcomes)s::jsonb) AS o
        ),
        updated AS (
            UPDATE {schema}.jobs AS j
               SET status = CASE WHEN """ + _CANCEL_WINS + """ THEN 'cancelled'
                                 ELSE CASE o.kind
                                WHEN 'succeeded' THEN 'succeeded'
                                WHEN 'result' THEN 'succeeded'
                                WHEN 'cancelled' THEN 'cancelled'
                                WHEN 'progress' THEN 'running'
                                ELSE 'queued' END END,
                   result = CASE WHEN o.kind IN ('succeeded', 'result')
                                 THEN COALESCE(o.result, 'null'::jsonb) ELSE j.result END,
                   attempts = CASE WHEN o.kind IN ('snooze', 'release') THEN j.attempts - 1
                                   ELSE j.attempts END,
                   run_at = CASE WHEN o.kind IN ('retry', 'snooze')
                                     THEN now() + make_interval(secs => o.delay)
                                 WHEN o.kind = 'release' THEN now()
                                 ELSE j.run_at END,
                   last_error = COALESCE(o.error, j.last_error),
                   finished_at = CASE WHEN o.kind IN ('succeeded', 'cancelled')
                                           OR """ + _CANCEL_WINS + """ THEN now()
                                      WHEN o.kind IN ('progress', 'result') THEN j.finished_at
                                      ELSE NULL END,
                   expires_at = CASE WHEN o.kind IN ('succeeded', 'cancelled')
                                          OR """ + _CANCEL_WINS + """
                                         THEN now() + make_interval(secs => j.result_ttl)
                                     WHEN o.kind IN ('progress', 'result') THEN j.expires_at
                                     ELSE NULL END,
                   lease_expires_at = CASE WHEN o.kind = 'progress' THEN j.lease_expires_at
                                           ELSE NULL END,
                   worker_id = CASE WHEN o.kind IN ('retry', 'snooze', 'release', 'unclaim')
                                    THEN NULL ELSE j.worker_id END,
                   lease_token = CASE WHEN o.kind IN ('retry', 'snooze', 'release', 'unclaim')
                                      THEN NULL ELSE j.lease_token END,
                   cancel_requested = CASE WHEN o.kind = 'progress' THEN j.cancel_requested
                                           ELSE false END,
                   meta = CASE WHEN o.progress IS NULL THEN j.meta
                               ELSE jsonb_set(j.meta, '{{progress}}', o.progress) END
              FROM outcome o
             WHERE j.id = ANY(ARRAY(SELECT id FROM outcome))
               AND j.id = o.id AND j.lease_token = o.token
               AND j.status = CASE o.kind WHEN 'result' THEN 'succeeded'
                                          WHEN 'unclaim' THEN 'claimed' ELSE 'running' END
               AND o.kind <> 'dead'
            RETURNING j.id, o.kind, j.queue, j.status = 'queued' AND j.run_at <= now() AS ready,
                      o.token
        ),
        dead AS (
            DELETE FROM {schema}.jobs AS j
             USING outcome o
             WHERE %(any_dead)s::boolean AND j.id = ANY(ARRAY(SELECT id FROM outcome))
               AND j.id = o.id AND j.lease_token = o.token
               AND j.status = 'running' AND o.kind = 'dead'
            RETURNING """ + _SHARED + """, o.error AS final_error,
                      CASE WHEN o.progress IS NULL THEN j.meta
                           ELSE jsonb_set(j.meta, '{{progress}}', o.progress) END AS final_meta,
                      o.token
        ),
        buried AS (
            """ + _bury(last_error="final_error", meta="final_meta", finished_at="now()",
                        error="final_error", failed_at="now()") + """
        )
"""


def _complete_and_start(*, in_queues: bool) -> str:
    """complete_jobs and start_jobs_* in one statement (see complete_and_start_jobs_*)."""
    # An outcome's row: its id, queue and token, the job's other fields null (named and
    # typed here: the first branch of a UNION names its columns).
    outcome_columns = (
        "u.kind, u.ready, u.id, u.queue, NULL::text AS task, NULL::jsonb AS args, "
        "NULL::jsonb AS kwargs, NULL::smallint AS priority, NULL::integer AS attempt, "
        "NULL::integer AS max_attempts, NULL::float8 AS timeout, NULL::jsonb AS meta, "
        "NULL::timestamptz AS run_at, NULL::timestamptz AS created_at, u.token, "
        "NULL::bigint AS workflow_id, NULL::boolean AS limited, NULL::boolean AS started")
    return ("WITH " + _RECORD + ",\n" + _starting(in_queues=in_queues) + f"""
        SELECT {outcome_columns}
          FROM (SELECT id, kind, queue, ready, token FROM updated
                UNION ALL SELECT id, 'dead', queue, false, token FROM dead) AS u
        UNION ALL
        SELECT 'started', false, started.* FROM started
        UNION ALL
        SELECT 'blocked', false, {_claimed_columns("false", "false")}
          FROM {{schema}}.jobs j JOIN held h ON h.id = j.id
         WHERE NOT h.unblocked
    """)


# -- Statements ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Query(Generic[R]):
    """A rendered statement whose rows come back as ``R`` (built from each row's values,
    in order: see the module docstring for how that order is checked)."""

    sql: bytes
    row: Callable[..., R]
    _factory: BaseRowFactory[R] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_factory", args_row(self.row))

    async def all(
        self, conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any], *,
        prepare: bool | None = None,
    ) -> list[R]:
        """Run the statement; every row it returns."""
        async with conn.cursor(row_factory=self._factory) as cursor:
            await cursor.execute(self.sql, params, prepare=prepare)
            return await cursor.fetchall()

    async def one(
        self, conn: psycopg.AsyncConnection[Any], params: Mapping[str, Any], *,
        prepare: bool | None = None,
    ) -> R:
        """Run a statement that returns exactly one row; that row."""
        rows = await self.all(conn, params, prepare=prepare)
        if len(rows) != 1:
            raise RuntimeError(f"expected one row, got {len(rows)} (please report this)")
        return rows[0]


class _Template:
    """A statement of :class:`Queries` as written, with its ``{schema}`` placeholder."""

    name: str

    def __init__(self, template: str) -> None:
        self.template = template

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    def text(self, schema: sql.Identifier) -> bytes:
        """The statement for ``schema``, without its indentation."""
        return _dedent(sql.SQL(self.template).format(schema=schema).as_string()).encode()

    def render(self, schema: sql.Identifier) -> bytes | Query[Any]:
        """What the attribute holds on a :class:`Queries` for ``schema``."""
        return self.text(schema)


class _Plain(_Template):
    """A statement whose rows, if any, nobody reads by position: its text, as bytes."""

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> _Plain: ...
    @overload
    def __get__(self, instance: Queries, owner: type[Any]) -> bytes: ...
    def __get__(self, instance: Queries | None, owner: type[Any]) -> _Plain | bytes:
        if instance is None:
            return self
        return instance.rendered(self.name)  # type: ignore[return-value]


class _Typed(_Template, Generic[R]):
    """A statement whose rows the worker reads: a :class:`Query` with its row type."""

    def __init__(self, row: Callable[..., R], template: str) -> None:
        super().__init__(template)
        self.row = row

    def render(self, schema: sql.Identifier) -> Query[R]:
        return Query(self.text(schema), self.row)

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> _Typed[R]: ...
    @overload
    def __get__(self, instance: Queries, owner: type[Any]) -> Query[R]: ...
    def __get__(self, instance: Queries | None, owner: type[Any]) -> _Typed[R] | Query[R]:
        if instance is None:
            return self
        return instance.rendered(self.name)  # type: ignore[return-value]


class Queries:
    """Every statement, rendered for one schema (see :func:`for_schema`).

    Rendering happens once per schema, when the object is made; statements are bytes
    (or a :class:`Query` carrying bytes) so psycopg can prepare them and mypy accepts
    them as queries.
    """

    # -- Enqueue -----------------------------------------------------------------------
    # One job. A live job holding the same idempotency key makes this insert nothing;
    # the caller then reads the holder with select_job_by_idempotency_key.
    insert_job = _Plain("""
        INSERT INTO {schema}.jobs AS j
            (queue, task, args, kwargs, priority, run_at, max_attempts, idempotency_key,
             meta, timeout, result_ttl, concurrency_key, rate_limit_key, cost)
        VALUES (%(queue)s, %(task)s, %(args)s::jsonb, %(kwargs)s::jsonb, %(priority)s,
                """ + _RUN_AT + """,
                %(max_attempts)s, %(idempotency_key)s, %(meta)s::jsonb, %(timeout)s,
                %(result_ttl)s, %(concurrency_key)s, %(rate_limit_key)s, %(cost)s)
        ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL AND status <> 'cancelled'
        DO NOTHING
        RETURNING """ + ", ".join("j." + c for c in JOB_COLUMNS) + ", " + _API_STATUS)
    select_job_by_idempotency_key = _Plain(_LIVE_SELECT + """
        WHERE j.idempotency_key = %(idempotency_key)s AND j.status <> 'cancelled'
    """)
    # Many jobs of one task with shared options: one statement whatever the count.
    # %(args)s is one JSON array with an args list per job; %(kwargs)s one with a kwargs
    # object per job, or [] when no job has any. Ids come from the identity sequence in
    # input order (ORDER BY ord) and come back as one array, in that order.
    insert_jobs = _Plain("""
        WITH inserted AS (
            INSERT INTO {schema}.jobs
                (queue, task, args, kwargs, priority, run_at, max_attempts, meta, timeout,
                 result_ttl, concurrency_key, rate_limit_key, cost)
            SELECT %(queue)s, %(task)s, item.args, COALESCE(item.kwargs, '{{}}'::jsonb),
                   %(priority)s,
                   """ + _RUN_AT + """,
                   %(max_attempts)s, %(meta)s::jsonb, %(timeout)s, %(result_ttl)s,
                   %(concurrency_key)s, %(rate_limit_key)s, %(cost)s
              FROM ROWS FROM (jsonb_array_elements(%(args)s::jsonb),
                              jsonb_array_elements(%(kwargs)s::jsonb))
                   WITH ORDINALITY AS item(args, kwargs, ord)
             ORDER BY item.ord
            RETURNING id
        )
        SELECT array_agg(id ORDER BY id) AS ids, now() AS created_at,
               """ + _RUN_AT + """
                   AS run_at,
               """ + _RUN_AT + """
                   <= now() AS ready
          FROM inserted
    """)
    # A bulk insert that streams its rows with COPY (operations.insert_jobs) runs these
    # two around it, in the same transaction. The first takes one id from the jobs
    # sequence: every id the COPY draws comes after it. It also gives the timestamps,
    # computed as insert_jobs computes them.
    copy_jobs_start = _Plain("""
        SELECT nextval(pg_get_serial_sequence(%(jobs_table)s, 'id')) AS before_id,
               now() AS created_at,
               """ + _RUN_AT + """
                   AS run_at,
               """ + _RUN_AT + """
                   <= now() AS ready
    """)
    # The COPY's ids: when no other session drew from the sequence meanwhile, exactly
    # (before_id, last_id], and ids is NULL; otherwise the ids in that range of the rows
    # this COPY wrote, found by their xmin (one statement, one (sub)transaction id).
    copy_jobs_finish = _Plain("""
        SELECT s.last_id,
               CASE WHEN s.last_id - %(before_id)s = %(count)s THEN NULL
                    ELSE (SELECT array_agg(j.id ORDER BY j.id) FROM {schema}.jobs AS j
                           WHERE j.id > %(before_id)s AND j.id <= s.last_id
                             AND j.xmin = (SELECT mine.xmin FROM {schema}.jobs AS mine
                                            WHERE mine.id = s.last_id))
               END AS ids
          FROM (SELECT currval(pg_get_serial_sequence(%(jobs_table)s, 'id')) AS last_id) AS s
    """)
    # -- Claim (see _claim) ------------------------------------------------------------
    claim_jobs_any_queue = _Typed(ClaimedJob, _claim(in_queues=False, after=False))
    claim_jobs_in_queues = _Typed(ClaimedJob, _claim(in_queues=True, after=False))
    claim_jobs_any_queue_after = _Typed(ClaimedJob, _claim(in_queues=False, after=True))
    claim_jobs_in_queues_after = _Typed(ClaimedJob, _claim(in_queues=True, after=True))
    # -- Limits (revision 0010_limits; pgqueue/limits.py explains) ----------------------
    # The limited claim's first statement: takes the row of every limit no other claim
    # holds (SKIP LOCKED: claims never wait for each other), so that the claims of one
    # limit take turns and each one's snapshot, taken after the lock, sees the jobs the
    # previous one started. No limits at all: the worker skips the claim itself (and
    # asks again a little later).
    # It also turns JIT off for the rest of the transaction. The claim connection disables
    # sorts (the plain claim must walk its index), which before PostgreSQL 18 adds 1e10
    # to the estimate of every sort a plan keeps; the limited claim ranks its candidates
    # with sorts, so its estimate passed the JIT thresholds and each claim compiled itself
    # (1.5 s a claim on PostgreSQL 15; 5 ms without JIT). Sorts stay disabled: enabled,
    # the planner reads each key's head by a bitmap scan and a sort instead of walking
    # jobs_concurrency_key_idx (23 ms instead of 5 with 20,000 jobs over 50 keys). And it
    # gives the claim custom plans again (the connection forces generic ones for the
    # plain claims, connections.CLAIMS): the limited claim's best plan depends on its
    # arrays of limits and keys.
    lock_limits = _Typed(LockedLimits, """
        WITH planner AS (SELECT set_config('jit', 'off', true) AS jit,
                                set_config('plan_cache_mode', 'auto', true) AS plans),
        q AS (
            SELECT name FROM {schema}.queues WHERE NOT paused AND (""" + _QUEUE_LIMITED + """)
               FOR UPDATE SKIP LOCKED
        ),
        t AS (SELECT task FROM {schema}.task_limits FOR UPDATE SKIP LOCKED)
        SELECT ARRAY(SELECT name FROM q) AS queues, ARRAY(SELECT task FROM t) AS tasks,
               ARRAY(SELECT name FROM {schema}.queues
                      WHERE NOT paused AND (""" + _QUEUE_LIMITED + """)
                        AND name NOT IN (SELECT name FROM q)) AS skipped_queues,
               ARRAY(SELECT task FROM {schema}.task_limits
                      WHERE task NOT IN (SELECT task FROM t)) AS skipped_tasks
          FROM planner WHERE planner.jit = 'off'
    """)
    claim_limited_jobs_any_queue = _Typed(ClaimedJob, _claim_limited(in_queues=False))
    claim_limited_jobs_in_queues = _Typed(ClaimedJob, _claim_limited(in_queues=True))
    # When a rate bucket next admits a job or a pause ends: a worker waiting on limits
    # sleeps until then (capped by its poll interval).
    next_limit_at = _Typed(NextRunAt, """
        SELECT EXTRACT(EPOCH FROM min(t) - clock_timestamp())::float8 AS seconds FROM (
            SELECT next_start_at AS t FROM {schema}.limit_state WHERE next_start_at > now()
            UNION ALL
            SELECT paused_until FROM {schema}.limit_state WHERE paused_until > now()
        ) AS upcoming
    """)
    # What a batch of outcomes does to limits, run by the completer in the batch's
    # transaction before complete_jobs (which may move the jobs away): ctx.charge()
    # corrects the job's cost bucket by what it used minus what its claim charged, and
    # RateLimited pauses its scope (its key, else its rate bucket, else its task) until
    # retry_after. now() is the transaction's: EXCLUDED.next_start_at - now() is the
    # correction, applied to the bucket as it is when its row is locked.
    apply_limit_outcomes = _Plain("""
        WITH given AS (
            SELECT * FROM unnest(%(ids)s::bigint[], %(charges)s::float8[],
                                 %(pause_keys)s::text[], %(pauses)s::float8[])
                   AS g(id, charge, pause_key, pause)
        ),
        job AS (
            SELECT g.*, j.task,
                   CASE WHEN t.rate_amount IS NOT NULL
                        THEN COALESCE('key:' || j.rate_limit_key, 'task:' || j.task)
                        WHEN q.rate_amount IS NOT NULL
                        THEN COALESCE('key:' || j.rate_limit_key, 'queue:' || j.queue)
                   END AS bucket,
                   COALESCE(t.rate_window / t.rate_amount, q.rate_window / q.rate_amount)
                       AS per_unit,
                   COALESCE(t.rate_unit, q.rate_unit) IS NOT NULL AS by_cost,
                   COALESCE(j.cost, 1) AS estimate
              FROM given g JOIN {schema}.jobs j ON j.id = g.id
              LEFT JOIN {schema}.task_limits t ON t.task = j.task
              LEFT JOIN {schema}.queues q ON q.name = j.queue
        ),
        change AS (
            SELECT bucket AS scope, (charge - estimate) * per_unit AS seconds,
                   NULL::float8 AS pause
              FROM job WHERE charge IS NOT NULL AND bucket IS NOT NULL AND by_cost
            UNION ALL
            SELECT COALESCE('key:' || pause_key, bucket, 'task:' || task), NULL, pause
              FROM job WHERE pause IS NOT NULL
        )
        INSERT INTO {schema}.limit_state AS s (scope, next_start_at, paused_until)
        SELECT scope, now() + make_interval(secs => sum(seconds)),
               now() + make_interval(secs => max(pause))
          FROM change GROUP BY scope
        ON CONFLICT (scope) DO UPDATE
           SET next_start_at = CASE WHEN EXCLUDED.next_start_at IS NULL THEN s.next_start_at
                                    ELSE GREATEST(s.next_start_at, now())
                                         + (EXCLUDED.next_start_at - now()) END,
               paused_until = GREATEST(s.paused_until, EXCLUDED.paused_until)
    """)
    # A worker's tasks' limits, declared when it starts (Queue.task's options): one row
    # per limited task, and no row for a task of this worker that has none (any more).
    declare_task_limits = _Plain("""
        WITH given AS (
            SELECT * FROM jsonb_to_recordset(%(limits)s::jsonb) AS g(
                task text, global_concurrency integer, key_concurrency integer,
                rate_limit text, rate_amount float8, rate_window float8, rate_unit text)
        ),
        removed AS (
            DELETE FROM {schema}.task_limits
             WHERE task = ANY(%(tasks)s::text[]) AND task NOT IN (SELECT task FROM given)
        )
        INSERT INTO {schema}.task_limits AS t
            (task, global_concurrency, key_concurrency, rate_limit, rate_amount, rate_window,
             rate_unit)
        SELECT task, global_concurrency, key_concurrency, rate_limit, rate_amount,
               rate_window, rate_unit FROM given
        ON CONFLICT (task) DO UPDATE
           SET global_concurrency = EXCLUDED.global_concurrency,
               key_concurrency = EXCLUDED.key_concurrency, rate_limit = EXCLUDED.rate_limit,
               rate_amount = EXCLUDED.rate_amount, rate_window = EXCLUDED.rate_window,
               rate_unit = EXCLUDED.rate_unit, updated_at = now()
         WHERE (t.global_concurrency, t.key_concurrency, t.rate_limit)
               IS DISTINCT FROM (EXCLUDED.global_concurrency, EXCLUDED.key_concurrency,
                                 EXCLUDED.rate_limit)
    """)
    # Rate buckets and pauses whose times have passed mean nothing: a missing row reads as
    # a bucket that admits a job now.
    prune_limit_state = _Plain("""
        DELETE FROM {schema}.limit_state
         WHERE (next_start_at IS NULL OR next_start_at < now())
           AND (paused_until IS NULL OR paused_until < now())
    """)
    # Task limits and scopes paused now, for Queue.limits() and pgq queues list.
    select_task_limits = _Plain("""
        SELECT task, global_concurrency, key_concurrency, rate_limit FROM {schema}.task_limits
         ORDER BY task
    """)
    select_paused_scopes = _Plain("""
        SELECT scope, paused_until FROM {schema}.limit_state WHERE paused_until > now()
         ORDER BY scope
    """)
    # When the next scheduled job becomes due, so an idle worker sleeps until then.
    # A row due in the future was due later than it was created: the second condition
    # adds nothing to the answer and lets the planner use jobs_scheduled_idx.
    next_run_at = _Typed(NextRunAt, """
        SELECT EXTRACT(EPOCH FROM min(run_at) - clock_timestamp())::float8 AS seconds
          FROM {schema}.jobs
         WHERE status = 'queued' AND run_at > now() AND run_at > created_at
           AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))
    """)
    # -- Completion (the completer is the only caller) ---------------------------------
    # Records a batch of outcomes in one statement, fenced on id, lease token and
    # status. Kinds: succeeded, retry, snooze, release, cancelled, progress (meta only,
    # job keeps running), result (value of a job already marked succeeded by
    # ctx.transaction()), dead (moved to dead_jobs), unclaim (a held job that never
    # started, back to queued as it was claimed). Returns the rows it changed. A
    # None result is stored as JSON null, so that SQL NULL in a succeeded row means "not
    # recorded yet": marked succeeded by ctx.transaction(), its value still to come (the
    # workflow triggers of 0007_workflows and Job.wait() wait for it).
    #
    # ``any_dead``: whether the batch holds a dead outcome. Without one, the DELETE is
    # not even started: its plan may walk every running row (jobs_lease_idx) to find
    # none, 0.35 ms per batch with 100 rows running, growing with every worker's jobs.
    #
    # The batch is one JSON array of [id, token, kind, result, error, delay, progress]
    # (``completer.outcome_params``; result and progress as JSON text), not seven
    # arrays: psycopg dumps an array element by element in Python (a regular expression
    # per text element), which cost the worker more CPU per job than anything but the
    # task itself; orjson writes the whole batch in one C call.
    complete_jobs = _Typed(RecordedOutcome, "WITH " + _RECORD + """
        SELECT id, kind, queue, ready, token FROM updated
        UNION ALL
        SELECT id, 'dead', queue, false, token FROM dead
    """)
    # The same, and in the same statement the start of held jobs for the slots this
    # batch frees (start_jobs_*): the slots' outcomes and their next jobs commit
    # together, one round trip (a transaction of two statements was measured at three
    # times one statement's client time per batch). Rows: the outcomes recorded, then
    # the jobs started ('started') and the held ones that may no longer start
    # ('blocked').
    complete_and_start_jobs_any_queue = _Typed(WrittenRow, _complete_and_start(in_queues=False))
    complete_and_start_jobs_in_queues = _Typed(WrittenRow, _complete_and_start(in_queues=True))
    # Before a batch that finishes workflow steps: lock the waiting steps that follow
    # them, all at once and in id order. The triggers of revision 0007_workflows lock the
    # successors of each finished step as its row is updated, in the order the batch
    # updates rows; two batches finishing steps of the same workflows could take those
    # locks in opposite orders and deadlock. Taken here first, in one order, they cannot.
    lock_workflow_successors = _Plain("""
        SELECT j.id FROM {schema}.jobs j
         WHERE j.id IN (SELECT child_id FROM {schema}.workflow_edges
                         WHERE parent_id = ANY(%(ids)s::bigint[]))
           AND j.status = 'waiting'
         ORDER BY j.id
           FOR UPDATE
    """)
    # -- ctx.transaction(): the task's writes and its completion commit together --------
    lock_running_job = _Plain("""
        SELECT id FROM {schema}.jobs
         WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
           FOR UPDATE
    """)
    mark_succeeded_in_transaction = _Plain("""
        UPDATE {schema}.jobs
           SET status = 'succeeded', finished_at = now(), lease_expires_at = NULL,
               expires_at = now() + make_interval(secs => result_ttl),
               cancel_requested = false
         WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
        RETURNING id
    """)
    # -- ctx.step(): checkpointed steps (revision 0009_job_steps) -----------------------
    # A job's stored steps, read once per execution, at its first ctx.step().
    select_job_steps = _Plain("""
        SELECT name, result FROM {schema}.job_steps WHERE job_id = %(id)s
    """)
    # Record a completed step, fenced like every write of a running job: only while the
    # row is running under this claim's token, and FOR SHARE so that nobody (the rescuer,
    # a claim: both take rows FOR UPDATE SKIP LOCKED) changes the token until the step has
    # committed. No row back: the lease was lost. A step already stored under the name
    # (recorded concurrently, which the fence leaves no way to, or by hand) wins: its
    # result is the one returned, so every run sees one value per step.
    record_job_step = _Plain("""
        WITH held AS (
            SELECT id FROM {schema}.jobs
             WHERE id = %(id)s AND lease_token = %(token)s AND status = 'running'
               FOR SHARE
        )
        INSERT INTO {schema}.job_steps AS s (job_id, name, result)
        SELECT id, %(name)s, %(result)s::jsonb FROM held
        ON CONFLICT (job_id, name) DO UPDATE SET result = s.result
        RETURNING s.result
    """)
    # -- Heartbeat ---------------------------------------------------------------------
    # One statement: upsert this worker's row and extend the lease of every job it says it
    # holds (%(held)s, ``[[id, token], ...]``: claimed, running, or ended with its outcome
    # still to be written), and only those. Returns the rows of those jobs the database
    # still gives this worker, with their current token, so the worker learns of lost
    # leases and cancellations. A row of this worker's that it does not list is not
    # extended: its claim or outcome was lost (a failover, a restore), and
    # give_back_orphaned_jobs returns it to the queue rather than let a live worker's
    # heartbeats keep it running for ever.
    # It never waits for a row lock: a job row that another transaction has locked — a
    # task's ctx.transaction(), which can last longer than the lease, or an outcome being
    # written — is skipped (nobody can rescue a locked row) and reported as held from the
    # statement's snapshot. Waiting would stall every other lease of this worker behind
    # that lock, and the rescuer would take those jobs from a live worker.
    heartbeat = _Typed(HeldJob, """
        WITH worker AS (
            INSERT INTO {schema}.workers
                (id, hostname, pid, queues, concurrency, lease_expires_at, stuck)
            VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(queues)s::text[], %(concurrency)s,
                    now() + make_interval(secs => %(lease)s), %(stuck)s)
            ON CONFLICT (id) DO UPDATE
               SET last_heartbeat_at = now(), lease_expires_at = EXCLUDED.lease_expires_at,
                   stuck = EXCLUDED.stuck
            RETURNING id
        ),
        mine AS (
            SELECT (h->>0)::bigint AS id, (h->>1)::bigint AS token
              FROM jsonb_array_elements(%(held)s::jsonb) AS h
        ),
        held AS (
            SELECT j.id, j.lease_token, j.cancel_requested, m.token = j.lease_token AS ours
              FROM mine m CROSS JOIN LATERAL (""" + _BY_ID.format(id="m.id") + """) AS j
             WHERE j.worker_id = %(worker_id)s AND j.status IN ('running', 'claimed')
        ),
        unlocked AS (
            SELECT u.id FROM held h CROSS JOIN LATERAL (
                SELECT id FROM {schema}.jobs
                 WHERE id = h.id AND worker_id = %(worker_id)s
                   AND status IN ('running', 'claimed')
                 FOR UPDATE SKIP LOCKED) AS u
             WHERE h.ours
        ),
        extended AS (
            UPDATE {schema}.jobs AS j
               SET lease_expires_at = now() + make_interval(secs => %(lease)s)
              FROM worker, unlocked
             WHERE j.id = ANY(ARRAY(SELECT id FROM unlocked)) AND j.id = unlocked.id
               AND j.worker_id = worker.id
            RETURNING j.id, j.lease_token, j.cancel_requested
        )
        SELECT id, lease_token, cancel_requested FROM extended
        UNION ALL
        SELECT id, lease_token, cancel_requested FROM held
         WHERE id NOT IN (SELECT id FROM extended)
    """)
    # The jobs the database says this worker holds and the worker does not (see
    # heartbeat): given back now, a running one with the attempt counted as failed and a
    # last_error that says why. Only rows whose lease this worker has not renewed or taken
    # for %(grace)s seconds: a claim of its own that commits while the heartbeat runs is
    # not in the list the heartbeat was given, and its lease is fresh.
    give_back_orphaned_jobs = _Typed(GivenBack, """
        WITH mine AS (
            SELECT (h->>0)::bigint AS id FROM jsonb_array_elements(%(held)s::jsonb) AS h
        ),
        taken AS (
            SELECT id FROM {schema}.jobs
             WHERE worker_id = %(worker_id)s AND status IN ('running', 'claimed')
               AND id NOT IN (SELECT id FROM mine)
               AND lease_expires_at
                   < now() + make_interval(secs => %(lease)s::float8 - %(grace)s::float8)
               FOR UPDATE SKIP LOCKED
        ),""" + _give_back(_NOT_HELD, "'cancelled: its worker no longer held it while its "
                           "cancellation was requested'") + """
    """)
    delete_worker = _Plain("DELETE FROM {schema}.workers WHERE id = %(worker_id)s")
    # The database's clock, for a decision taken in Python about time (a schedule's
    # next tick): every lease, run_at and tick is compared with now() on the server, so
    # a client whose own clock is off must compute from this one.
    database_clock = _Typed(DatabaseClock, "SELECT now() AS now")
    # -- Health (pgqueue/health.py: pgq health, probes) ----------------------------------
    # Workers whose lease runs (alive), and per queue that is not paused the age of its
    # oldest ready job: the queued rows (the claim index's partial rows) and the claimed
    # ones (held by a worker, not started: jobs_lease_idx's).
    select_health = _Plain("""
        SELECT (SELECT count(*) FROM {schema}.workers WHERE lease_expires_at > now())
                   AS live_workers,
               ARRAY(SELECT name FROM {schema}.queues WHERE paused ORDER BY name)
                   AS paused_queues
    """)
    select_oldest_ready = _Plain("""
        SELECT j.queue, extract(epoch FROM now() - min(j.run_at))::float8 AS age_seconds
          FROM {schema}.jobs j
         WHERE (j.status = 'claimed' OR (j.status = 'queued' AND j.run_at <= now()))
           AND (%(queues)s::text[] IS NULL OR j.queue = ANY(%(queues)s::text[]))
         GROUP BY j.queue
         ORDER BY age_seconds DESC, j.queue
    """)
    # What the database itself does to the queue (pgqueue/health.py, DatabaseHealth):
    #
    # * running jobs that no live execution holds: the lease ran out more than
    #   %(grace)s seconds ago (the rescuer should have taken it back by then), or the
    #   worker named has no row whose lease runs (the worker is gone). A lease runs out
    #   and is rescued within a second while any worker lives; a row stuck here means
    #   no worker sweeps, or a lease that is renewed by nobody who runs the job;
    # * the xmin horizon: the oldest snapshot or transaction id that keeps vacuum from
    #   removing dead rows of this database — a session (only those of this database
    #   hold back its tables; other roles' sessions are visible with pg_read_all_stats),
    #   a prepared transaction, a replication slot, a standby's hot_standby_feedback.
    #   Its age in seconds is known for sessions and prepared transactions only; the
    #   age in transaction ids for all. This session's own snapshot is left out, and so
    #   are transactions younger than a second (every busy session has one: reporting
    #   them would make a reading that is never zero);
    # * the jobs table's dead and live tuples and its last vacuum (the statistics
    #   collector's estimates, as autovacuum reads them);
    # * the database's clock, by which the dashboard's overview states ages.
    select_database_health = _Plain("""
        WITH holders AS (
            SELECT 'session ' || pid || ' (' || COALESCE(state, 'unknown state')
                   || COALESCE(', ' || NULLIF(application_name, ''), '') || ')' AS holder,
                   extract(epoch FROM now() - xact_start)::float8 AS seconds,
                   GREATEST(age(backend_xmin), age(backend_xid)) AS xids
              FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
               AND xact_start < now() - interval '1 second'
            UNION ALL
            SELECT 'prepared transaction ' || quote_literal(gid),
                   extract(epoch FROM now() - prepared)::float8, age(transaction)
              FROM pg_prepared_xacts WHERE database = current_database()
            UNION ALL
            SELECT 'replication slot ' || quote_literal(slot_name), NULL, age(xmin)
              FROM pg_replication_slots WHERE xmin IS NOT NULL
            UNION ALL
            SELECT 'standby feedback from ' || COALESCE(NULLIF(application_name, ''),
                                                        host(client_addr), 'a standby'),
                   NULL, age(backend_xmin)
              FROM pg_stat_replication WHERE backend_xmin IS NOT NULL
        ),
        unheld AS (
            SELECT j.id FROM {schema}.jobs j
             WHERE j.status = 'running'
               AND (j.lease_expires_at < now() - make_interval(secs => %(grace)s)
                    OR NOT EXISTS (
                        SELECT 1 FROM {schema}.workers w
                         WHERE w.id = j.worker_id
                           AND w.lease_expires_at > now() - make_interval(secs => %(grace)s)))
        )
        SELECT (SELECT count(*) FROM unheld) AS unheld_running,
               ARRAY(SELECT id FROM unheld ORDER BY id LIMIT 10) AS unheld_running_ids,
               (SELECT max(seconds) FROM holders) AS horizon_age_seconds,
               (SELECT max(xids) FROM holders) AS horizon_age_xids,
               (SELECT holder FROM holders ORDER BY xids DESC, seconds DESC NULLS LAST
                 LIMIT 1) AS horizon_holder,
               pg_stat_get_dead_tuples('{schema}.jobs'::regclass) AS jobs_dead_tuples,
               pg_stat_get_live_tuples('{schema}.jobs'::regclass) AS jobs_live_tuples,
               GREATEST(pg_stat_get_last_autovacuum_time('{schema}.jobs'::regclass),
                        pg_stat_get_last_vacuum_time('{schema}.jobs'::regclass))
                   AS jobs_last_vacuum_at,
               now() AS now
    """)
    # -- Throughput counts (revision 0011_job_counts; pgqueue/worker/counts.py) ---------
    # A worker's outcome counts since its last flush, added to its own rows (one per
    # minute, queue, task and outcome): no other worker writes them, so this never waits.
    record_job_counts = _Plain("""
        INSERT INTO {schema}.job_counts AS c (minute, queue, task, outcome, worker_id, count)
        SELECT minute, queue, task, outcome, %(worker_id)s, count
          FROM unnest(%(minutes)s::timestamptz[], %(queues)s::text[], %(tasks)s::text[],
                      %(outcomes)s::text[], %(counts)s::bigint[])
               AS t(minute, queue, task, outcome, count)
        ON CONFLICT (minute, queue, task, outcome, worker_id) DO UPDATE
           SET count = c.count + EXCLUDED.count
    """)
    # Counts past their retention (maintenance, with the pruner): a range of the primary
    # key's first column.
    prune_job_counts = _Plain("""
        DELETE FROM {schema}.job_counts
         WHERE minute < now() - make_interval(secs => %(retention)s)
    """)
    # Outcomes per minute and queue over the last %(minutes)s minutes (this one
    # included), summed over tasks (or of one task) and workers; only minutes with
    # outcomes have rows.
    select_throughput = _Plain("""
        SELECT minute, queue, outcome, sum(count)::bigint AS count
          FROM {schema}.job_counts
         WHERE minute >= date_trunc('minute', now())
                         - make_interval(mins => %(minutes)s - 1)
           AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
           AND (%(task)s::text IS NULL OR task = %(task)s::text)
         GROUP BY minute, queue, outcome
         ORDER BY minute, queue, outcome
    """)
    # ``alive`` by the database's clock, which decided the lease: a reader whose own
    # clock is off must not call a live worker expired.
    select_workers = _Plain("""
        SELECT id, hostname, pid, queues, concurrency, stuck, started_at, last_heartbeat_at,
               lease_expires_at, lease_expires_at > now() AS alive
          FROM {schema}.workers ORDER BY started_at, id
    """)
    # -- Maintenance (any worker may run these; SKIP LOCKED keeps them from fighting) ---
    # Expired leases: a running job's counts as a failed attempt (back to queued at once,
    # or dead when the attempts are spent); a claimed job goes back as it was (it never
    # started).
    rescue_expired_jobs = _Typed(GivenBack, """
        WITH taken AS (
            SELECT id FROM {schema}.jobs
             WHERE status IN ('running', 'claimed') AND lease_expires_at < now()
             ORDER BY lease_expires_at
             LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED
        ),""" + _give_back(_LEASE_EXPIRED, "'cancelled: lease expired while cancellation "
                           "was requested'") + """
    """)
    # A worker process that is known to be gone (its supervisor saw it exit: pgq worker
    # --processes) holds its jobs no longer: end their leases now, so that the rescue
    # above takes them at once instead of after the lease. Fenced like every write of a
    # held job: only rows still claimed or running under that worker change.
    expire_worker_leases = _Plain("""
        UPDATE {schema}.jobs SET lease_expires_at = now()
         WHERE worker_id = %(worker_id)s AND status IN ('running', 'claimed')
    """)
    delete_stale_workers = _Typed(StaleWorker, """
        DELETE FROM {schema}.workers
         WHERE lease_expires_at < now() - make_interval(secs => %(grace)s)
        RETURNING id
    """)
    # Finished rows past their result_ttl, and their steps; bounded so one run never
    # holds locks for long.
    prune_finished_jobs = _Typed(Pruned, """
        WITH pruned AS (
            DELETE FROM {schema}.jobs AS j
             WHERE j.id = ANY(ARRAY(
                SELECT id FROM {schema}.jobs
                 WHERE expires_at IS NOT NULL AND expires_at < now()
                 ORDER BY expires_at
                 LIMIT %(limit)s
                 FOR UPDATE SKIP LOCKED))
            RETURNING j.id
        ),
        steps AS (""" + _delete_steps_of("pruned") + """)
        SELECT count(*) AS pruned FROM pruned
    """)
    # Workflow steps whose value was lost (see _RESULT_PENDING): recorded as null, which
    # fires the workflow trigger, so the steps after them run instead of waiting forever;
    # last_error says what happened. Found through jobs_result_lost_idx (a handful of rows
    # at most: those of ctx.transaction() steps between their commit and their value).
    settle_lost_results = _Plain("""
        UPDATE {schema}.jobs AS j
           SET result = 'null'::jsonb,
               last_error = 'the worker stopped after ctx.transaction() committed and before '
                            || 'it recorded the return value: the steps after this one '
                            || 'received null'
         WHERE j.id = ANY(ARRAY(
            SELECT id FROM {schema}.jobs
             WHERE status = 'succeeded' AND result IS NULL AND workflow_id IS NOT NULL
               AND finished_at < now() - make_interval(secs => %(grace)s)
             LIMIT 100
             FOR UPDATE SKIP LOCKED))
    """)
    notify_ready = _Plain("SELECT pg_notify(%(channel)s, %(queues)s)")
    # -- Periodic jobs (revision 0008_schedules; pgqueue/schedules.py explains) ---------
    # A schedule is active while it is a run-time one or some live worker declares it.
    # Ticks are computed in Python (pgqueue/cron.py) and passed in.
    select_due_schedules = _Typed(DueSchedule, """
        SELECT name, cron, tz, next_run_at, now() AS now FROM {schema}.schedules
         WHERE next_run_at <= now() AND NOT paused
           AND (source = 'runtime' OR declared_until > now())
         ORDER BY next_run_at, name
         LIMIT %(limit)s
    """)
    # One tick, exactly once: the row is taken only if it still holds the tick this
    # worker saw (SKIP LOCKED: a worker doing the same tick right now is skipped, and a
    # row it advanced no longer matches); the job is inserted from the row, with the
    # tick as run_at and a per-tick idempotency key as a second guard, and the row moves
    # on to the next tick, all in this one statement.
    enqueue_schedule_tick = _Typed(TickEnqueued, """
        WITH due AS (
            SELECT s.name, s.task, s.args, s.kwargs, s.queue, s.priority, s.max_attempts,
                   s.meta, s.timeout, s.result_ttl, s.next_run_at
              FROM {schema}.schedules s
             WHERE s.name = %(name)s AND s.next_run_at = %(tick)s AND NOT s.paused
               AND (s.source = 'runtime' OR s.declared_until > now())
               FOR UPDATE SKIP LOCKED
        ),
        inserted AS (
            INSERT INTO {schema}.jobs AS j
                (queue, task, args, kwargs, priority, run_at, max_attempts, idempotency_key,
                 meta, timeout, result_ttl)
            SELECT queue, task, args, kwargs, priority, next_run_at, max_attempts, %(key)s,
                   meta, timeout, result_ttl
              FROM due
            ON CONFLICT (idempotency_key)
               WHERE idempotency_key IS NOT NULL AND status <> 'cancelled'
            DO NOTHING
            RETURNING j.id
        ),
        advanced AS (
            UPDATE {schema}.schedules AS s
               SET next_run_at = %(next_run_at)s, last_run_at = due.next_run_at,
                   last_job_id = COALESCE((SELECT id FROM inserted), s.last_job_id)
              FROM due
             WHERE s.name = due.name
            RETURNING s.name
        )
        SELECT (SELECT count(*) FROM advanced)::int AS advanced,
               (SELECT id FROM inserted) AS job_id
    """)
    # A tick whose job could not be inserted (its queue is full: QueueFull) is skipped,
    # or every worker would try it again at once, forever.
    skip_schedule_tick = _Typed(TickEnqueued, """
        WITH advanced AS (
            UPDATE {schema}.schedules AS s SET next_run_at = %(next_run_at)s
             WHERE s.name = %(name)s AND s.next_run_at = %(tick)s
            RETURNING s.name
        )
        SELECT (SELECT count(*) FROM advanced)::int AS advanced, NULL::bigint AS job_id
    """)
    next_schedule_due = _Typed(NextTick, """
        SELECT EXTRACT(EPOCH FROM min(next_run_at) - clock_timestamp())::float8 AS seconds
          FROM {schema}.schedules
         WHERE NOT paused AND (source = 'runtime' OR declared_until > now())
    """)
    # A worker's code schedules, at its start: new ones are inserted; existing code ones
    # take this worker's definition (the newest deployment's), and a changed cron or time
    # zone starts again from the next tick of the new one. A run-time schedule of the
    # same name is left alone (its name is not returned).
    declare_schedules = _Typed(DeclaredSchedule, """
        INSERT INTO {schema}.schedules AS s
            (name, cron, tz, task, args, kwargs, queue, priority, max_attempts, timeout,
             result_ttl, meta, source, next_run_at, declared_until)
        SELECT d.name, d.cron, d.tz, d.task, '[]', '{{}}', d.queue, d.priority,
               d.max_attempts, d.timeout, d.result_ttl, d.meta, 'code', d.next_run_at,
               now() + make_interval(secs => %(lease)s)
          FROM jsonb_to_recordset(%(schedules)s::jsonb) AS d(
               name text, cron text, tz text, task text, queue text, priority smallint,
               max_attempts integer, timeout double precision, result_ttl integer,
               meta jsonb, next_run_at timestamptz)
        ON CONFLICT (name) DO UPDATE
           SET cron = EXCLUDED.cron, tz = EXCLUDED.tz, task = EXCLUDED.task,
               queue = EXCLUDED.queue, priority = EXCLUDED.priority,
               max_attempts = EXCLUDED.max_attempts, timeout = EXCLUDED.timeout,
               result_ttl = EXCLUDED.result_ttl, meta = EXCLUDED.meta,
               declared_until = GREATEST(s.declared_until, EXCLUDED.declared_until),
               next_run_at = CASE WHEN s.cron = EXCLUDED.cron AND s.tz = EXCLUDED.tz
                                  THEN s.next_run_at ELSE EXCLUDED.next_run_at END,
               updated_at = CASE WHEN (s.cron, s.tz, s.task, s.queue, s.priority,
                                       s.max_attempts, s.timeout, s.result_ttl, s.meta)
                                      IS NOT DISTINCT FROM
                                      (EXCLUDED.cron, EXCLUDED.tz, EXCLUDED.task,
                                       EXCLUDED.queue, EXCLUDED.priority,
                                       EXCLUDED.max_attempts, EXCLUDED.timeout,
                                       EXCLUDED.result_ttl, EXCLUDED.meta)
                                 THEN s.updated_at ELSE now() END
         WHERE s.source = 'code'
        RETURNING s.name
    """)
    # While it runs, a worker keeps its code schedules active (every heartbeat interval).
    renew_schedules = _Plain("""
        UPDATE {schema}.schedules
           SET declared_until = GREATEST(declared_until,
                                         now() + make_interval(secs => %(lease)s))
         WHERE name = ANY(%(names)s::text[]) AND source = 'code'
    """)
    select_schedules = _Plain("""
        SELECT name, cron, tz, task, args, kwargs, queue, priority, max_attempts, timeout,
               result_ttl, meta, source, paused,
               (source = 'runtime' OR declared_until > now()) AS active,
               next_run_at, last_run_at, last_job_id, declared_until, created_at, updated_at
          FROM {schema}.schedules
         WHERE %(name)s::text IS NULL OR name = %(name)s::text
         ORDER BY name
    """)
    # q.schedule / pgq periodic add: a new run-time schedule, or a new definition for
    # one (starting from its next tick); a code schedule of that name is left alone (no
    # row comes back).
    upsert_schedule = _Plain("""
        INSERT INTO {schema}.schedules AS s
            (name, cron, tz, task, args, kwargs, queue, priority, max_attempts, timeout,
             result_ttl, meta, source, next_run_at)
        VALUES (%(name)s, %(cron)s, %(tz)s, %(task)s, %(args)s::jsonb, %(kwargs)s::jsonb,
                %(queue)s, %(priority)s, %(max_attempts)s, %(timeout)s, %(result_ttl)s,
                %(meta)s::jsonb, 'runtime', %(next_run_at)s)
        ON CONFLICT (name) DO UPDATE
           SET cron = EXCLUDED.cron, tz = EXCLUDED.tz, task = EXCLUDED.task,
               args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, queue = EXCLUDED.queue,
               priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
               timeout = EXCLUDED.timeout, result_ttl = EXCLUDED.result_ttl,
               meta = EXCLUDED.meta, next_run_at = EXCLUDED.next_run_at,
               updated_at = now()
         WHERE s.source = 'runtime'
        RETURNING s.name
    """)
    delete_schedule = _Plain("""
        DELETE FROM {schema}.schedules WHERE name = %(name)s RETURNING name, source
    """)
    pause_schedule = _Plain("""
        UPDATE {schema}.schedules SET paused = true, updated_at = now()
         WHERE name = %(name)s AND NOT paused
    """)
    # Resuming starts from the tick after now (the ticks missed while paused are not
    # enqueued); matched on the cron and time zone the tick was computed from.
    resume_schedule = _Plain("""
        UPDATE {schema}.schedules
           SET paused = false, next_run_at = %(next_run_at)s, updated_at = now()
         WHERE name = %(name)s AND paused AND cron = %(cron)s AND tz = %(tz)s
    """)
    # -- Reading jobs ------------------------------------------------------------------
    select_job = _Plain(_LIVE_SELECT + " WHERE j.id = %(id)s UNION ALL " + _DEAD_SELECT
    + " WHERE j.id = %(id)s")
    select_jobs = _Plain("SELECT * FROM (" + _LIVE_SELECT + " UNION ALL " + _DEAD_SELECT + """
        ) AS listed
         WHERE (%(status)s::text IS NULL OR api_status = %(status)s::text)
           AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
           AND (%(task)s::text IS NULL OR task = %(task)s::text)
           AND id < """ + _BEFORE_ID + """
         ORDER BY id DESC
         LIMIT %(limit)s
    """)
    # The status hints below only restate the API status in terms of the row's status;
    # planned with the status given, they fold into the predicate of a partial index
    # (running: jobs_lease_idx; waiting: jobs_workflow_idx), so a list of a rare status
    # need not walk the primary key through every other row.
    select_live_jobs = _Plain(_LIVE_SELECT + """
         WHERE (%(status)s::text IS NULL OR """ + _API_STATUS + """ = %(status)s::text)
           AND (%(status)s::text IS DISTINCT FROM 'running' OR j.status = 'running')
           AND (%(status)s::text IS DISTINCT FROM 'waiting'
                OR (j.status = 'waiting' AND j.workflow_id IS NOT NULL))
           AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
           AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
           AND j.id < """ + _BEFORE_ID + """
         ORDER BY j.id DESC
         LIMIT %(limit)s
    """)
    select_dead_jobs = _Plain(_DEAD_SELECT + """
         WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
           AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
           AND (j.failed_at, j.id) < (
               COALESCE(%(before_failed_at)s::timestamptz, 'infinity'), """ + _BEFORE_ID + """)
         ORDER BY j.failed_at DESC, j.id DESC
         LIMIT %(limit)s
    """)
    # -- pgqueue.testing -----------------------------------------------------------------
    # drain(q, now=...): the jobs due by %(now)s (a time ahead of the clock) become ready
    # now, each moved back by the same amount, so they keep their claim order. Jobs due
    # later keep their run_at: a second drain with a later time finds them as they were.
    make_due_jobs_ready = _Plain("""
        UPDATE {schema}.jobs
           SET run_at = run_at - (%(now)s::timestamptz - now())
         WHERE status = 'queued' AND run_at > now() AND run_at <= %(now)s::timestamptz
    """)
    # The dashboard's overview: per queue, its unfinished jobs by API status, its dead
    # jobs and its oldest ready job's wait, plus whether it is paused (a queue with only
    # finished jobs does not appear). Unlike queue_stats it never counts finished rows,
    # which are most of a busy table: every branch reads a partial index (jobs_claim_idx,
    # jobs_lease_idx, jobs_workflow_idx) or dead_jobs_queue_idx, so its cost follows the
    # backlog, not the table (tests/integration/test_dashboard_api.py EXPLAINs it;
    # benchmarks/dashboard.py times it with a million jobs).
    overview_counts = _Plain("""
        WITH counted AS (
            SELECT queue,
                   count(*) FILTER (WHERE run_at <= now()) AS queued,
                   count(*) FILTER (WHERE run_at > now() AND attempts = 0) AS scheduled,
                   count(*) FILTER (WHERE run_at > now() AND attempts > 0) AS retrying,
                   0 AS waiting, 0 AS running, 0 AS dead,
                   min(run_at) FILTER (WHERE run_at <= now()) AS oldest_queued_run_at
              FROM {schema}.jobs WHERE status = 'queued' GROUP BY queue
            UNION ALL
            -- Held jobs (claimed, not started) are waiting: queued.
            SELECT queue, count(*) FILTER (WHERE status = 'claimed'), 0, 0, 0,
                   count(*) FILTER (WHERE status = 'running'), 0,
                   min(run_at) FILTER (WHERE status = 'claimed')
              FROM {schema}.jobs WHERE status IN ('running', 'claimed') GROUP BY queue
            UNION ALL
            -- Only workflow steps wait: the predicate lets jobs_workflow_idx serve it.
            SELECT queue, 0, 0, 0, count(*), 0, 0, NULL
              FROM {schema}.jobs WHERE status = 'waiting' AND workflow_id IS NOT NULL
             GROUP BY queue
            UNION ALL
            SELECT queue, 0, 0, 0, 0, 0, count(*), NULL
              FROM {schema}.dead_jobs GROUP BY queue
        ),
        summed AS (
            SELECT queue, sum(queued)::bigint AS queued, sum(scheduled)::bigint AS scheduled,
                   sum(retrying)::bigint AS retrying, sum(waiting)::bigint AS waiting,
                   sum(running)::bigint AS running, sum(dead)::bigint AS dead,
                   min(oldest_queued_run_at) AS oldest_queued_run_at
              FROM counted GROUP BY queue
        )
        SELECT COALESCE(c.queue, q.name) AS queue, COALESCE(q.paused, false) AS paused,
               COALESCE(c.queued, 0) AS queued, COALESCE(c.scheduled, 0) AS scheduled,
               COALESCE(c.retrying, 0) AS retrying, COALESCE(c.waiting, 0) AS waiting,
               COALESCE(c.running, 0) AS running, COALESCE(c.dead, 0) AS dead,
               extract(epoch FROM now() - c.oldest_queued_run_at)::float8
                   AS oldest_queued_age_seconds
          FROM summed c FULL JOIN {schema}.queues q ON q.name = c.queue
         ORDER BY 1
    """)
    # Dead jobs per queue, by queue name (the dead jobs page's queue picker): an
    # index-only scan of dead_jobs_queue_idx.
    dead_queue_counts = _Plain("""
        SELECT queue, count(*) AS dead FROM {schema}.dead_jobs GROUP BY queue ORDER BY queue
    """)
    queue_stats = _Plain(_QUEUE_COUNTS + """
        SELECT COALESCE(live.queue, dead.queue) AS queue, """ + _COUNT_COLUMNS + """
          FROM live FULL JOIN dead ON live.queue = dead.queue
         ORDER BY 1
    """)
    # -- Queues as objects (revision 0006_queues) ---------------------------------------
    # Every queue that has jobs or a settings row: its settings and counts.
    select_queues = _Plain(_QUEUE_COUNTS + """,
        counted AS (
            SELECT COALESCE(live.queue, dead.queue) AS queue, """ + _COUNT_COLUMNS + """
              FROM live FULL JOIN dead ON live.queue = dead.queue
        )
        SELECT COALESCE(c.queue, s.name) AS name, COALESCE(s.paused, false) AS paused,
               s.max_queued, s.priority_aging, s.concurrency, s.key_concurrency,
               s.rate_limit, COALESCE(s.fair, false) AS fair,
               COALESCE(c.queued, 0) AS queued, COALESCE(c.scheduled, 0) AS scheduled,
               COALESCE(c.retrying, 0) AS retrying, COALESCE(c.waiting, 0) AS waiting,
               COALESCE(c.running, 0) AS running,
               COALESCE(c.succeeded, 0) AS succeeded, COALESCE(c.cancelled, 0) AS cancelled,
               COALESCE(c.dead, 0) AS dead, c.oldest_queued_age_seconds
          FROM counted c FULL JOIN {schema}.queues s ON s.name = c.queue
         WHERE %(name)s::text IS NULL OR COALESCE(c.queue, s.name) = %(name)s::text
         ORDER BY 1
    """)
    pause_queue = _Plain("""
        INSERT INTO {schema}.queues AS q (name, paused) VALUES (%(name)s, %(paused)s)
        ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
         WHERE q.paused IS DISTINCT FROM EXCLUDED.paused
    """)
    # The settings given (%(given)s names them) take their new value, the others keep
    # theirs; a new row gets the given ones and the defaults.
    set_queue_settings = _Plain("""
        INSERT INTO {schema}.queues AS q
            (name, max_queued, priority_aging, concurrency, key_concurrency, rate_limit,
             rate_amount, rate_window, rate_unit, fair)
        VALUES (%(name)s, %(max_queued)s, %(priority_aging)s, %(concurrency)s,
                %(key_concurrency)s, %(rate_limit)s, %(rate_amount)s, %(rate_window)s,
                %(rate_unit)s, COALESCE(%(fair)s, false))
        ON CONFLICT (name) DO UPDATE
           SET max_queued = CASE WHEN 'max_queued' = ANY(%(given)s::text[])
                    THEN EXCLUDED.max_queued ELSE q.max_queued END,
               priority_aging = CASE WHEN 'priority_aging' = ANY(%(given)s::text[])
                    THEN EXCLUDED.priority_aging ELSE q.priority_aging END,
               concurrency = CASE WHEN 'concurrency' = ANY(%(given)s::text[])
                    THEN EXCLUDED.concurrency ELSE q.concurrency END,
               key_concurrency = CASE WHEN 'key_concurrency' = ANY(%(given)s::text[])
                    THEN EXCLUDED.key_concurrency ELSE q.key_concurrency END,
               rate_limit = CASE WHEN 'rate_limit' = ANY(%(given)s::text[])
                    THEN EXCLUDED.rate_limit ELSE q.rate_limit END,
               rate_amount = CASE WHEN 'rate_amount' = ANY(%(given)s::text[])
                    THEN EXCLUDED.rate_amount ELSE q.rate_amount END,
               rate_window = CASE WHEN 'rate_window' = ANY(%(given)s::text[])
                    THEN EXCLUDED.rate_window ELSE q.rate_window END,
               rate_unit = CASE WHEN 'rate_unit' = ANY(%(given)s::text[])
                    THEN EXCLUDED.rate_unit ELSE q.rate_unit END,
               fair = CASE WHEN 'fair' = ANY(%(given)s::text[])
                    THEN EXCLUDED.fair ELSE q.fair END,
               updated_at = now()
    """)
    # Priority aging (maintenance): each queue with priority_aging whose step has passed
    # since it was last aged is taken by one worker (FOR UPDATE SKIP LOCKED: the others
    # skip it), marked aged now, and each of its ready jobs that has waited a step gains
    # one priority per step since the queue was last aged, at most one per step it has
    # waited (steps shorter than a maintenance round add several at once). Returns how
    # many jobs were raised.
    age_priorities = _Typed(AgedJobs, """
        WITH due AS (
            SELECT name, priority_aging AS step, aged_at
              FROM {schema}.queues
             WHERE priority_aging IS NOT NULL
               AND (aged_at IS NULL
                    OR aged_at <= now() - make_interval(secs => priority_aging))
               FOR UPDATE SKIP LOCKED
        ),
        marked AS (
            UPDATE {schema}.queues q SET aged_at = now() FROM due WHERE q.name = due.name
        ),
        raised AS (
            UPDATE {schema}.jobs j
               SET priority = LEAST(32767, j.priority + LEAST(
                       floor(extract(epoch FROM now() - j.run_at) / due.step),
                       floor(extract(epoch FROM now() - COALESCE(due.aged_at, j.run_at))
                             / due.step)))::smallint
              FROM due
             WHERE j.queue = due.name AND j.status = 'queued' AND j.priority < 32767
               AND j.run_at <= now() - make_interval(secs => due.step)
            RETURNING j.id
        )
        SELECT count(*) AS raised FROM raised
    """)
    # -- Workflows (revision 0007_workflows; the triggers there do the rest) -------------
    # A whole workflow in one statement: ids drawn in step order (so a step's id is above
    # those of the steps it depends on: every writer that locks several steps locks them
    # in id order), one jobs row per step, one workflow_edges row per dependency and the
    # workflows row. %(steps)s is a JSON array of step objects, %(edges)s one of
    # [parent, child, position, input] with 1-based step numbers. When a live job holds
    # one of %(keys)s (the steps' idempotency keys), nothing is inserted and the holder
    # comes back instead.
    insert_workflow = _Plain("""
        WITH held AS (
            SELECT j.id, j.workflow_id FROM {schema}.jobs j
             WHERE j.idempotency_key = ANY(%(keys)s::text[]) AND j.status <> 'cancelled'
             ORDER BY j.id
             LIMIT 1
        ),
        step AS (
            SELECT s.ord, s.value,
                   nextval(pg_get_serial_sequence(%(jobs_table)s, 'id')) AS id
              FROM jsonb_array_elements(%(steps)s::jsonb) WITH ORDINALITY AS s(value, ord)
             WHERE NOT EXISTS (SELECT FROM held)
             ORDER BY s.ord
        ),
        first AS (SELECT min(id) AS id FROM step),
        workflow AS (
            INSERT INTO {schema}.workflows (id, kind, outputs, returns_list)
            SELECT first.id, %(kind)s,
                   ARRAY(SELECT step.id FROM unnest(%(outputs)s::int[]) WITH ORDINALITY
                                              AS o(ord, position)
                           JOIN step ON step.ord = o.ord ORDER BY o.position),
                   %(returns_list)s
              FROM first WHERE first.id IS NOT NULL
        ),
        inserted AS (
            INSERT INTO {schema}.jobs
                (id, workflow_id, status, waits_for, queue, task, args, kwargs, priority,
                 run_at, max_attempts, idempotency_key, meta, timeout, result_ttl,
                 concurrency_key, rate_limit_key, cost)
            SELECT step.id, first.id,
                   CASE WHEN (step.value->>'waits_for')::int > 0 THEN 'waiting' ELSE 'queued' END,
                   (step.value->>'waits_for')::int,
                   step.value->>'queue', step.value->>'task', step.value->'args',
                   step.value->'kwargs', (step.value->>'priority')::smallint,
                   COALESCE((step.value->>'run_at')::timestamptz,
                            now() + make_interval(secs => (step.value->>'run_in')::float8)),
                   (step.value->>'max_attempts')::int, step.value->>'idempotency_key',
                   step.value->'meta', (step.value->>'timeout')::float8,
                   (step.value->>'result_ttl')::int, step.value->>'concurrency_key',
                   step.value->>'rate_limit_key', (step.value->>'cost')::float8
              FROM step, first
        ),
        edge AS (
            INSERT INTO {schema}.workflow_edges (workflow_id, parent_id, child_id, position, input)
            SELECT first.id, parent.id, child.id, (e.value->>2)::int, e.value->>3
              FROM jsonb_array_elements(%(edges)s::jsonb) AS e(value)
              JOIN step parent ON parent.ord = (e.value->>0)::int
              JOIN step child ON child.ord = (e.value->>1)::int
             CROSS JOIN first
        )
        SELECT (SELECT id FROM first) AS workflow_id,
               ARRAY(SELECT id FROM step ORDER BY ord) AS ids,
               (SELECT workflow_id FROM held) AS held_workflow_id,
               (SELECT id FROM held) AS held_job_id
    """)
    select_workflow = _Plain("""
        SELECT id, kind, outputs, returns_list, created_at
          FROM {schema}.workflows WHERE id = %(id)s
    """)
    # Each step of a workflow, live or dead, with the steps it depends on.
    select_workflow_steps = _Plain("""
        SELECT s.*,
               ARRAY(SELECT e.parent_id FROM {schema}.workflow_edges e
                      WHERE e.child_id = s.id ORDER BY e.position) AS depends_on
          FROM (""" + _LIVE_SELECT + """ WHERE j.workflow_id = %(id)s
                UNION ALL """ + _DEAD_SELECT + """ WHERE j.workflow_id = %(id)s) AS s
         ORDER BY s.id
    """)
    # Cancelling a workflow: its steps that have not started end cancelled (in id
    # order, the locking order of every writer of several steps), and its running ones
    # are asked to stop, as `pgq jobs cancel` does for one job.
    cancel_workflow_steps = _Plain("""
        WITH locked AS (
            SELECT id FROM {schema}.jobs
             WHERE workflow_id = %(id)s AND status IN ('queued', 'claimed', 'waiting')
             ORDER BY id
               FOR UPDATE
        ),
        cancelled AS (
            UPDATE {schema}.jobs AS j
               SET status = 'cancelled', finished_at = now(),
                   last_error = format('cancelled with its workflow %%s', %(id)s::bigint),
                   expires_at = now() + make_interval(secs => j.result_ttl),
                   worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
              FROM locked WHERE j.id = locked.id
            RETURNING j.id
        ),
        requested AS (
            UPDATE {schema}.jobs SET cancel_requested = true
             WHERE workflow_id = %(id)s AND status = 'running'
            RETURNING id
        )
        SELECT (SELECT count(*) FROM cancelled) AS cancelled,
               (SELECT count(*) FROM requested) AS requested
    """)
    # -- Cancelling ---------------------------------------------------------------------
    # A job that has not started ends cancelled at once, whoever holds it: a worker that
    # claimed it ahead of its slots (claimed) never starts it, for its start is fenced on
    # the claimed status (start_jobs_*).
    cancel_queued_job = _Plain("""
        UPDATE {schema}.jobs
           SET status = 'cancelled', finished_at = now(), last_error = 'cancelled before it ran',
               expires_at = now() + make_interval(secs => result_ttl),
               worker_id = NULL, lease_token = NULL, lease_expires_at = NULL
         WHERE id = %(id)s AND status IN ('queued', 'claimed', 'waiting')
        RETURNING id
    """)
    request_cancel_running_job = _Plain("""
        UPDATE {schema}.jobs SET cancel_requested = true
         WHERE id = %(id)s AND status = 'running'
        RETURNING id
    """)
    # -- Dead jobs ---------------------------------------------------------------------
    # Back to jobs with the same id and attempts reset to 0. A job whose idempotency key
    # a newer live job holds is not moved (ON CONFLICT DO NOTHING) and stays dead. A
    # workflow step comes back waiting when a step it depends on has not succeeded
    # (it was stopped by that step's death), else queued.
    retry_dead_jobs = _Plain("""
        WITH candidates AS (
            SELECT * FROM {schema}.dead_jobs
             WHERE (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
               AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
             FOR UPDATE SKIP LOCKED
        ),
        revived AS (
            INSERT INTO {schema}.jobs AS j
                (id, queue, task, args, kwargs, status, priority, run_at, attempts,
                 max_attempts, idempotency_key, meta, timeout, result_ttl, created_at,
                 last_error, workflow_id, waits_for, concurrency_key, rate_limit_key, cost)
            SELECT c.id, c.queue, c.task, c.args, c.kwargs,
                   CASE WHEN w.waits_for > 0 THEN 'waiting' ELSE 'queued' END,
                   c.priority, now(), 0, c.max_attempts, c.idempotency_key, c.meta, c.timeout,
                   c.result_ttl, c.created_at, c.error, c.workflow_id, w.waits_for,
                   c.concurrency_key, c.rate_limit_key, c.cost
              FROM candidates c
              LEFT JOIN LATERAL (
                  SELECT count(*) AS waits_for FROM {schema}.workflow_edges e
                   WHERE e.child_id = c.id AND NOT e.done) AS w ON c.workflow_id IS NOT NULL
            ON CONFLICT (idempotency_key)
               WHERE idempotency_key IS NOT NULL AND status <> 'cancelled'
            DO NOTHING
            RETURNING j.id
        ),
        removed AS (
            DELETE FROM {schema}.dead_jobs AS d USING revived r WHERE d.id = r.id
            RETURNING d.id
        )
        SELECT c.id, c.idempotency_key, (r.id IS NOT NULL) AS revived, c.workflow_id
          FROM candidates c LEFT JOIN removed r ON r.id = c.id
         ORDER BY c.id
    """)
    # After retry_dead_jobs revived workflow steps (%(ids)s): the steps downstream of them
    # that their death stopped (in dead_jobs, never started), which retry_dead_jobs then
    # brings back too (waiting, as their predecessors have not succeeded); then the
    # steps of those workflows still dead stop their own downstream again
    # (stop_dead_workflow_steps), so a step with another dead predecessor goes back.
    select_stopped_workflow_steps = _Plain("""
        WITH RECURSIVE downstream(id) AS (
            SELECT child_id FROM {schema}.workflow_edges WHERE parent_id = ANY(%(ids)s::bigint[])
            UNION
            SELECT e.child_id FROM {schema}.workflow_edges e JOIN downstream d ON e.parent_id = d.id
        )
        SELECT d.id FROM {schema}.dead_jobs d JOIN downstream ON downstream.id = d.id
         WHERE d.started_at IS NULL AND d.attempts = 0
         ORDER BY d.id
    """)
    stop_dead_workflow_steps = _Plain("""
        SELECT coalesce(sum({schema}.workflow_stop_downstream(d.id, d.task, d.error)), 0)
               AS stopped
          FROM {schema}.dead_jobs d
         WHERE d.workflow_id = ANY(%(workflow_ids)s::bigint[]) AND d.started_at IS NOT NULL
    """)
    # Deleted for good, with their steps (a move to jobs keeps them: retry_dead_jobs).
    purge_dead_jobs = _Plain("""
        WITH purged AS (
            DELETE FROM {schema}.dead_jobs
             WHERE failed_at < now() - make_interval(secs => %(older_than)s)
               AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
            RETURNING id
        ),
        steps AS (""" + _delete_steps_of("purged") + """)
        SELECT count(*) AS purged FROM purged
    """)

    # Queue.purge_queue: every job of a queue but the running ones (they finish first),
    # with their steps.
    purge_queue_jobs = _Plain("""
        WITH purged AS (
            DELETE FROM {schema}.jobs WHERE queue = %(queue)s AND status <> 'running'
            RETURNING id
        ),
        steps AS (""" + _delete_steps_of("purged") + """)
        SELECT count(*) AS purged FROM purged
    """)
    purge_queue_dead_jobs = _Plain("""
        WITH purged AS (
            DELETE FROM {schema}.dead_jobs WHERE queue = %(queue)s RETURNING id
        ),
        steps AS (""" + _delete_steps_of("purged") + """)
        SELECT count(*) AS purged FROM purged
    """)

    def __init__(self, schema: str) -> None:
        self.schema = schema
        # ``schema.jobs``, quoted: a parameter for functions that take a table's name.
        self.jobs_table = sql.Identifier(schema, "jobs").as_string()
        identifier = sql.Identifier(schema)
        # In the instance's __dict__, which attribute lookup reads before the class's
        # descriptors: after this, queries.<name> costs a dict lookup.
        for name, template in self.templates().items():
            self.__dict__[name] = template.render(identifier)

    @classmethod
    def templates(cls) -> dict[str, _Template]:
        """Every statement as written, by name."""
        return {name: value for name, value in vars(cls).items()
                if isinstance(value, _Template)}

    def rendered(self, name: str) -> bytes | Query[Any]:
        """The statement ``name`` for this schema (what ``queries.<name>`` reads)."""
        value: bytes | Query[Any] = self.__dict__[name]
        return value

    def copy_jobs(self, columns: tuple[str, ...]) -> bytes:
        """``COPY schema.jobs (columns) FROM STDIN`` (the names quoted, the result cached)."""
        return _copy_jobs(self.schema, columns)


def _dedent(statement: str) -> str:
    """The statement without its indentation, which is there for people, not PostgreSQL.

    psycopg caches its conversion of a query's ``%(name)s`` placeholders only for queries
    up to 4,096 bytes; indented, ``complete_jobs`` is 4,800 and was parsed again on every
    batch. No statement here has a string literal spanning lines, so nothing else changes.
    """
    return re.sub(r"\n[ \t]+", "\n", statement.strip())


@cache
def _copy_jobs(schema: str, columns: tuple[str, ...]) -> bytes:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(schema, "jobs"), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    return statement.as_string().encode()


@cache
def for_schema(schema: str) -> Queries:
    """The rendered statements for ``schema`` (cached)."""
    return Queries(schema)
