"""Prefetched jobs get a status of their own: 'claimed' (held by a worker, not started).

Revision ID: 0012_claimed
Revises: 0011_job_counts
Create Date: 2026-12-04

A worker claims a few jobs ahead of its free slots (its prefetch allowance), so that a slot
that frees has a job at hand. Until this revision those jobs read ``running`` the moment
they were claimed: SQL showed hundreds of running rows under a worker with two slots, a
job the user had just enqueued could not be cancelled as queued, and a higher-priority job
enqueued later started after them. Now:

* ``claimed``: the job is held by ``worker_id`` under ``lease_expires_at`` and
  ``lease_token``, as a running job is, but has not started. ``attempts`` is unchanged and
  ``started_at`` is null: it is not an attempt yet. The API status of a claimed job is
  ``queued``, and cancelling it ends it ``cancelled`` at once.
* ``running``: started. A worker moves a job from ``claimed`` to ``running`` in the
  statement that finds it a slot, fenced on its token: a job cancelled, released or taken
  back meanwhile is simply not started. So at every moment a worker's ``running`` rows are
  no more than its slots.

The rescuer also finds expired leases of claimed jobs (the lease index now covers both
statuses) and returns them to ``queued`` untouched: no attempt was spent.

Workers of earlier revisions keep working against this schema: they never write
``claimed``. Run ``pgq migrate`` with no worker of this revision running to downgrade: the
downgrade returns every claimed job to ``queued``.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0012_claimed"
down_revision = "0011_job_counts"
branch_labels = None
depends_on = None

_STATUSES = "'queued', 'claimed', 'running', 'succeeded', 'cancelled', 'waiting'"

UPGRADE = [
    # Checked without a long lock first, then validated (a read of the table, no writes
    # blocked).
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check "
    f"CHECK (status IN ({_STATUSES})) NOT VALID",
    "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_status_check",
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_running_has_lease",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_running_has_lease CHECK ("
    "status NOT IN ('running', 'claimed') "
    "OR (lease_expires_at IS NOT NULL AND worker_id IS NOT NULL)) NOT VALID",
    "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_running_has_lease",
    # The rescuer and the heartbeat find a worker's held jobs, started or not, here.
    "CREATE INDEX jobs_held_idx ON {schema}.jobs (lease_expires_at) "
    "WHERE status IN ('running', 'claimed')",
    "DROP INDEX {schema}.jobs_lease_idx",
    "ALTER INDEX {schema}.jobs_held_idx RENAME TO jobs_lease_idx",
    "COMMENT ON COLUMN {schema}.jobs.status IS "
    "'queued (waiting for a worker), claimed (held by worker_id, not started: API status "
    "queued), running, succeeded, cancelled, or waiting (a workflow step whose "
    "dependencies have not all succeeded).'",
    "COMMENT ON COLUMN {schema}.jobs.attempts IS "
    "'Number of attempts started (snoozes and shutdown releases give theirs back; a "
    "claimed job has not started one).'",
    "COMMENT ON COLUMN {schema}.jobs.lease_expires_at IS "
    "'While claimed or running: the worker must heartbeat before this time or the job is "
    "rescued.'",
]

DOWNGRADE = [
    "UPDATE {schema}.jobs SET status = 'queued', worker_id = NULL, lease_token = NULL, "
    "lease_expires_at = NULL WHERE status = 'claimed'",
    "CREATE INDEX jobs_running_idx ON {schema}.jobs (lease_expires_at) "
    "WHERE status = 'running'",
    "DROP INDEX {schema}.jobs_lease_idx",
    "ALTER INDEX {schema}.jobs_running_idx RENAME TO jobs_lease_idx",
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_running_has_lease",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_running_has_lease CHECK ("
    "status <> 'running' OR (lease_expires_at IS NOT NULL AND worker_id IS NOT NULL))",
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check "
    "CHECK (status IN ('queued', 'running', 'succeeded', 'cancelled', 'waiting'))",
    "COMMENT ON COLUMN {schema}.jobs.status IS NULL",
    "COMMENT ON COLUMN {schema}.jobs.attempts IS "
    "'Number of claims that counted (snoozes and shutdown releases give theirs back).'",
    "COMMENT ON COLUMN {schema}.jobs.lease_expires_at IS "
    "'While running: the worker must heartbeat before this time or the job is rescued.'",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
