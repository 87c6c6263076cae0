"""Per-minute outcome counts: pgqueue.job_counts, which survives the pruning of jobs.

Revision ID: 0011_job_counts
Revises: 0009_job_steps
Create Date: 2026-12-04

Throughput ("how many jobs succeeded, failed, died per minute over the last hour") cannot
be read from ``jobs``: the pruner deletes finished rows after their ``result_ttl``. Each
worker counts the outcomes it records in memory, by minute, queue, task and outcome, and adds
them here with one upsert per heartbeat (never on the claim or completion path).

* One row per ``(minute, queue, task, outcome, worker_id)``: every worker writes only its own
  rows, so workers never wait for each other's row locks; readers sum over workers.
* ``minute`` leads the primary key: the reads (the last N minutes) and the retention
  delete (everything older than 7 days, by maintenance) are ranges on its prefix.
* No foreign key to ``workers``: a worker's row is deleted when it stops, its counts stay.

Workers of earlier revisions keep working against this schema (they never touch the
table); their outcomes are simply not counted.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0011_job_counts"
down_revision = "0009_job_steps"
branch_labels = None
depends_on = None

UPGRADE = [
    """
    CREATE TABLE {schema}.job_counts (
        minute      timestamptz NOT NULL,
        queue       text        NOT NULL,
        task        text        NOT NULL,
        outcome     text        NOT NULL,
        worker_id   text        NOT NULL,
        count       bigint      NOT NULL,
        CONSTRAINT job_counts_pkey PRIMARY KEY (minute, queue, task, outcome, worker_id),
        CONSTRAINT job_counts_count_check CHECK (count >= 0)
    )
    """,
    "COMMENT ON TABLE {schema}.job_counts IS "
    "'pgqueue throughput: job outcomes per minute, queue, task and worker, kept 7 days after "
    "the jobs themselves are pruned.'",
    "COMMENT ON COLUMN {schema}.job_counts.minute IS "
    "'The start of the minute the outcomes were recorded in.'",
    "COMMENT ON COLUMN {schema}.job_counts.outcome IS "
    "'succeeded, failed (an attempt failed, the job retries), dead, cancelled or snoozed.'",
    "COMMENT ON COLUMN {schema}.job_counts.worker_id IS "
    "'The worker that recorded the outcomes (workers.id while it runs).'",
]

DOWNGRADE = [
    "DROP TABLE IF EXISTS {schema}.job_counts",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
