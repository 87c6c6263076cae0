"""Checkpointed steps inside a job: pgqueue.job_steps holds each completed ctx.step().

Revision ID: 0009_job_steps
Revises: 0008_schedules
Create Date: 2026-12-04

``ctx.step("charge-card", fn, *args)`` runs ``fn`` once per job: its JSON result is
stored here under (job id, step name), and when the job runs again (a retry after a
later failure, a rescue after a crash, ``pgq dead retry``) the stored result is returned
instead of calling ``fn``.

* Written by the worker running the job, fenced like every write of a running job: the
  insert takes the job's row ``FOR SHARE`` only while it is ``running`` under the
  writer's ``lease_token``, so a worker that lost its lease records nothing, and the
  token cannot change under a step being recorded.
* No foreign key to ``jobs``: a job moves to ``dead_jobs`` (a ``DELETE`` from ``jobs``)
  and back, and its steps must survive both moves (a dead job retried resumes after its
  last completed step). The statements that delete a job for good (the pruner,
  ``pgq dead purge``, ``Queue.purge_queue``) delete its steps in the same statement.
* Primary key ``(job_id, name)``: the one lookup (a job's steps, read once per
  execution at its first ``ctx.step``) and the deletes by job id use its prefix.

Workers of ``0006`` keep working against this schema (they never read the table).
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0009_job_steps"
down_revision = "0008_schedules"
branch_labels = None
depends_on = None

UPGRADE = [
    """
    CREATE TABLE {schema}.job_steps (
        job_id      bigint      NOT NULL,
        name        text        NOT NULL,
        result      jsonb,
        created_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT job_steps_pkey PRIMARY KEY (job_id, name),
        CONSTRAINT job_steps_name_check CHECK (length(name) BETWEEN 1 AND 200)
    )
    """,
    "COMMENT ON TABLE {schema}.job_steps IS "
    "'pgqueue checkpointed steps: the stored result of each completed ctx.step() of a job, "
    "kept while the job is in jobs or dead_jobs.'",
    "COMMENT ON COLUMN {schema}.job_steps.job_id IS "
    "'The job (jobs.id or dead_jobs.id); no foreign key, the job moves between the two.'",
    "COMMENT ON COLUMN {schema}.job_steps.result IS "
    "'The step function''s return value as JSON; NULL when it returned None.'",
]

DOWNGRADE = [
    "DROP TABLE IF EXISTS {schema}.job_steps",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
