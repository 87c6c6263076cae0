"""Periodic jobs: pgqueue.schedules holds one row per schedule.

Revision ID: 0008_schedules
Revises: 0007_workflows
Create Date: 2026-12-04

A schedule is a cron expression, a time zone and the job to enqueue at each tick (task,
arguments, queue, priority, meta and the other job options), plus its state:

* ``next_run_at``: the next tick, in UTC. Any worker whose clock reaches it enqueues
  the tick's job and moves ``next_run_at`` to the following tick in *one statement*
  that matches the row on the ``next_run_at`` it saw (``FOR UPDATE SKIP LOCKED``):
  however many workers see the tick, one statement wins and the others match nothing.
  No leader, no lock held between statements. The tick's job carries the idempotency
  key ``periodic:<name>:<tick>`` as a second guard.
* ``source``: ``code`` for ``@q.periodic`` (each worker declares the code schedules it
  knows when it starts and renews ``declared_until`` while it runs), ``runtime`` for
  ``q.schedule`` / ``pgq periodic add``. A code schedule is *active* while some live
  worker declares it (``declared_until > now()``): one removed from the code stops
  being enqueued once the last worker that knew it has stopped, and shows as inactive.
* ``paused``: skipped while true; resuming starts again at the next tick.

Workers wake for a tick at ``next_run_at``; a statement that adds a schedule or
changes its cron, time zone or pause sends ``,schedules`` on the wake-up channel (a
payload no list of queue names can be: queue names hold no commas) so that sleeping
workers read the table again.

Workers of ``0006`` keep working against this schema (they enqueue no ticks).
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0008_schedules"
down_revision = "0007_workflows"
branch_labels = None
depends_on = None

UPGRADE = [
    """
    CREATE TABLE {schema}.schedules (
        name            text        NOT NULL,
        cron            text        NOT NULL,
        tz              text        NOT NULL DEFAULT 'UTC',
        task            text        NOT NULL,
        args            jsonb       NOT NULL DEFAULT '[]',
        kwargs          jsonb       NOT NULL DEFAULT '{{}}',
        queue           text        NOT NULL DEFAULT 'default',
        priority        smallint    NOT NULL DEFAULT 0,
        max_attempts    integer     NOT NULL DEFAULT 3,
        timeout         double precision,
        result_ttl      integer     NOT NULL DEFAULT 86400,
        meta            jsonb       NOT NULL DEFAULT '{{}}',
        source          text        NOT NULL,
        paused          boolean     NOT NULL DEFAULT false,
        next_run_at     timestamptz NOT NULL,
        last_run_at     timestamptz,
        last_job_id     bigint,
        declared_until  timestamptz,
        created_at      timestamptz NOT NULL DEFAULT now(),
        updated_at      timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT schedules_pkey PRIMARY KEY (name),
        CONSTRAINT schedules_name_check CHECK (length(name) BETWEEN 1 AND 200),
        CONSTRAINT schedules_source_check CHECK (source IN ('code', 'runtime')),
        CONSTRAINT schedules_args_check
            CHECK (jsonb_typeof(args) = 'array' AND jsonb_typeof(kwargs) = 'object')
    )
    """,
    "COMMENT ON TABLE {schema}.schedules IS "
    "'pgqueue periodic jobs: one row per schedule; at each tick one worker enqueues the "
    "job and advances next_run_at in the same statement.'",
    "COMMENT ON COLUMN {schema}.schedules.cron IS "
    "'5-field cron expression or @hourly-style alias, read in tz.'",
    "COMMENT ON COLUMN {schema}.schedules.tz IS 'IANA time zone of cron.'",
    "COMMENT ON COLUMN {schema}.schedules.source IS "
    "'code: declared by @q.periodic in the workers; runtime: q.schedule / pgq periodic add.'",
    "COMMENT ON COLUMN {schema}.schedules.next_run_at IS "
    "'The next tick (the enqueued job''s run_at); missed ticks are not backfilled.'",
    "COMMENT ON COLUMN {schema}.schedules.last_run_at IS "
    "'The tick of the last job enqueued.'",
    "COMMENT ON COLUMN {schema}.schedules.last_job_id IS "
    "'The id of the last job enqueued (it may since have been pruned).'",
    "COMMENT ON COLUMN {schema}.schedules.declared_until IS "
    "'Code schedules: a live worker declares it until then; once past, the schedule is "
    "inactive and not enqueued.'",
    "COMMENT ON COLUMN {schema}.schedules.paused IS "
    "'No tick is enqueued while paused; resuming starts at the next tick.'",
    # Sleeping workers read the table again when a schedule appears or its timing
    # changes. A tick's own update of next_run_at sends nothing: the others wake at the
    # tick they knew, find it taken, and read the next one.
    """
    CREATE FUNCTION {schema}.notify_schedules_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify(TG_ARGV[0], ',schedules');
        RETURN NULL;
    END;
    $$
    """,
    "CREATE TRIGGER schedules_notify_changed "
    "AFTER INSERT OR UPDATE OF cron, tz, paused ON {schema}.schedules "
    "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_schedules_changed({channel})",
]

DOWNGRADE = [
    "DROP TABLE IF EXISTS {schema}.schedules",
    "DROP FUNCTION IF EXISTS {schema}.notify_schedules_changed()",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
