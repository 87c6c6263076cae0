"""Queues as objects: pgqueue.queues holds a queue's state and settings.

Revision ID: 0006_queues
Revises: 0005_times_in_range
Create Date: 2026-12-04

Until now a queue was only the text in ``jobs.queue``. A row in ``queues`` gives one
settings; a queue without a row has the defaults (running, unbounded), so the table
holds only the queues someone configured and stays a handful of rows.

* ``paused``: the claim statements skip paused queues (``queue <> ALL(...)`` over an
  array read once per claim statement from this table), so a pause holds from the next
  claim of every worker, without a message having to reach them. Resuming sends the
  queue's name on the wake-up channel (a row trigger, so an ``UPDATE`` in SQL does too):
  idle workers claim at once.
* ``max_queued``: at most this many jobs of the queue may be ``queued`` (ready,
  scheduled or waiting to retry). The insert trigger that already names the queues of
  each insert statement checks it: for a statement that enqueues into a bounded queue
  it locks that queue's row (so concurrent enqueuers take turns), counts the queue's
  queued jobs, its own included, and raises SQLSTATE ``PQ001`` when there are more than
  allowed; the Python API raises ``QueueFull``. Statements that touch no bounded queue
  pay one lookup in this small table. The lock is a no-op ``UPDATE`` of the row, not
  ``SELECT ... FOR UPDATE``, so that under ``REPEATABLE READ`` a concurrent enqueuer's
  commit makes the statement fail with a serialization error instead of being counted
  from an old snapshot. The trigger function runs as its owner (``SECURITY DEFINER``,
  with a fixed ``search_path``): an enqueue-only role needs no privilege on ``queues``.

* ``priority_aging``: seconds per priority step. Once a step has passed since
  ``aged_at``, one worker's maintenance round raises the priority of each ready job of
  the queue by the steps it waited since then (one per step, several when the step is
  shorter than a round), so a low priority cannot starve under a stream of higher ones.
  The claim is unchanged: still one walk of the claim index, which the raised
  priorities reorder.

Workers of ``0005`` keep working against this schema (they claim paused queues too).
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0006_queues"
down_revision = "0005_times_in_range"
branch_labels = None
depends_on = None

# The insert trigger's function as 0003_leaner_enqueue left it, for the downgrade.
_NOTIFY_ONLY = """
    CREATE OR REPLACE FUNCTION {schema}.notify_jobs_ready() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        ready_queues text;
    BEGIN
        SELECT string_agg(queue, ',') INTO ready_queues
          FROM (SELECT DISTINCT queue FROM new_jobs WHERE status = 'queued') AS ready;
        IF ready_queues IS NOT NULL THEN
            PERFORM pg_notify(TG_ARGV[0], ready_queues);
        END IF;
        RETURN NULL;
    END;
    $$
"""

UPGRADE = [
    """
    CREATE TABLE {schema}.queues (
        name        text        NOT NULL,
        paused      boolean     NOT NULL DEFAULT false,
        max_queued  integer,
        priority_aging double precision,
        aged_at     timestamptz,
        updated_at  timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT queues_pkey PRIMARY KEY (name),
        CONSTRAINT queues_name_check CHECK (length(name) BETWEEN 1 AND 200),
        CONSTRAINT queues_max_queued_check CHECK (max_queued IS NULL OR max_queued >= 1),
        CONSTRAINT queues_priority_aging_check
            CHECK (priority_aging IS NULL OR priority_aging BETWEEN 0.1 AND 31536000)
    )
    """,
    "COMMENT ON TABLE {schema}.queues IS "
    "'pgqueue queue settings: one row per configured queue; a queue without a row has the "
    "defaults (running, unbounded).'",
    "COMMENT ON COLUMN {schema}.queues.paused IS "
    "'No worker claims jobs of a paused queue; enqueueing into it keeps working.'",
    "COMMENT ON COLUMN {schema}.queues.priority_aging IS "
    "'Seconds per priority step: a ready job gains one priority per step it waits "
    "(raised by maintenance). NULL: no aging.'",
    "COMMENT ON COLUMN {schema}.queues.aged_at IS "
    "'When the queue''s priorities were last aged (one maintenance round does it).'",
    "COMMENT ON COLUMN {schema}.queues.max_queued IS "
    "'At most this many queued (ready, scheduled or retrying) jobs; an insert beyond it "
    "fails with SQLSTATE PQ001 (QueueFull). NULL: unbounded.'",
    # Resuming wakes the workers (pausing needs no message: claims read the table).
    """
    CREATE FUNCTION {schema}.notify_queue_resumed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' OR NOT NEW.paused THEN
            PERFORM pg_notify(TG_ARGV[0], OLD.name);
        END IF;
        RETURN NULL;
    END;
    $$
    """,
    "CREATE TRIGGER queues_notify_resumed AFTER UPDATE OF paused OR DELETE ON {schema}.queues "
    "FOR EACH ROW WHEN (OLD.paused) "
    "EXECUTE FUNCTION {schema}.notify_queue_resumed({channel})",
    # SECURITY DEFINER: an enqueue-only role (pgq roles) may neither read nor lock queue
    # settings itself; the function, run as its owner, does both for it.
    """
    CREATE OR REPLACE FUNCTION {schema}.notify_jobs_ready() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DECLARE
        ready_queues text;
        bounded record;
        queued bigint;
    BEGIN
        SELECT string_agg(queue, ',') INTO ready_queues
          FROM (SELECT DISTINCT queue FROM new_jobs WHERE status = 'queued') AS ready;
        IF ready_queues IS NULL THEN
            RETURN NULL;
        END IF;
        -- Bounded queues: in name order, so that two statements never wait for each
        -- other's locks in opposite orders.
        IF EXISTS (SELECT FROM {schema}.queues WHERE max_queued IS NOT NULL) THEN
            FOR bounded IN
                SELECT q.name, q.max_queued
                  FROM {schema}.queues q
                 WHERE q.max_queued IS NOT NULL
                   AND q.name IN (SELECT queue FROM new_jobs WHERE status = 'queued')
                 ORDER BY q.name
            LOOP
                UPDATE {schema}.queues SET max_queued = max_queued WHERE name = bounded.name;
                SELECT count(*) INTO queued FROM {schema}.jobs
                 WHERE queue = bounded.name AND status = 'queued';
                IF queued > bounded.max_queued THEN
                    RAISE EXCEPTION USING
                        ERRCODE = 'PQ001',
                        MESSAGE = 'queue ' || quote_literal(bounded.name) || ' is full: '
                                  || bounded.max_queued || ' queued jobs at most (max_queued)',
                        DETAIL = 'this statement would make it ' || queued,
                        HINT = 'wait for workers to take jobs and enqueue again, or raise '
                               || 'the bound: pgq queues set ' || bounded.name
                               || ' --max-queued N';
                END IF;
            END LOOP;
        END IF;
        PERFORM pg_notify(TG_ARGV[0], ready_queues);
        RETURN NULL;
    END;
    $$
    """,
]
# Enqueue from SQL: any language, a trigger, psql. The same row as Queue.enqueue()
# writes, the same idempotency rule (the live or succeeded job holding the key is
# returned), and, through the insert trigger, the same wake-up and max_queued bound.
# Arguments are not checked against the task's signature here (the database does not
# know it): a job whose arguments do not fit fails in the worker, saying which parameter.
UPGRADE.append("""
    CREATE FUNCTION {schema}.enqueue(
        task text,
        args jsonb DEFAULT '[]',
        kwargs jsonb DEFAULT '{{}}',
        queue text DEFAULT 'default',
        priority integer DEFAULT 0,
        run_at timestamptz DEFAULT NULL,
        idempotency_key text DEFAULT NULL,
        max_attempts integer DEFAULT 3,
        meta jsonb DEFAULT '{{}}',
        timeout double precision DEFAULT NULL,
        result_ttl integer DEFAULT 86400
    ) RETURNS bigint
    LANGUAGE plpgsql AS $$
    #variable_conflict use_column
    DECLARE
        new_id bigint;
    BEGIN
        IF enqueue.task IS NULL OR length(enqueue.task) NOT BETWEEN 1 AND 255
           OR enqueue.task ~ '[[:cntrl:]]' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'invalid task ' || coalesce(to_jsonb(enqueue.task)::text, 'NULL')
                          || ': a task name is 1 to 255 printable characters';
        END IF;
        IF enqueue.queue IS NULL OR length(enqueue.queue) NOT BETWEEN 1 AND 200
           OR enqueue.queue ~ '[[:cntrl:],]' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'invalid queue ' || coalesce(to_jsonb(enqueue.queue)::text, 'NULL')
                          || ': a queue name is 1 to 200 printable characters without commas';
        END IF;
        IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'invalid priority ' || coalesce(enqueue.priority::text, 'NULL')
                          || ': use an integer from -32768 to 32767';
        END IF;
        IF jsonb_typeof(enqueue.args) IS DISTINCT FROM 'array'
           OR jsonb_typeof(enqueue.kwargs) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'invalid arguments: args must be a JSON array and kwargs a JSON '
                          || 'object, e.g. ''[1, 2]''::jsonb and ''{{"user_id": 1}}''::jsonb';
        END IF;
        LOOP
            INSERT INTO {schema}.jobs AS j
                (queue, task, args, kwargs, priority, run_at, max_attempts, idempotency_key,
                 meta, timeout, result_ttl)
            VALUES (enqueue.queue, enqueue.task, enqueue.args, enqueue.kwargs,
                    enqueue.priority, coalesce(enqueue.run_at, now()), enqueue.max_attempts,
                    enqueue.idempotency_key, coalesce(enqueue.meta, '{{}}'), enqueue.timeout,
                    enqueue.result_ttl)
            ON CONFLICT (idempotency_key)
               WHERE idempotency_key IS NOT NULL AND status <> 'cancelled'
            DO NOTHING
            RETURNING j.id INTO new_id;
            IF new_id IS NOT NULL THEN
                RETURN new_id;
            END IF;
            SELECT j.id INTO new_id FROM {schema}.jobs j
             WHERE j.idempotency_key = enqueue.idempotency_key AND j.status <> 'cancelled';
            IF new_id IS NOT NULL THEN
                RETURN new_id;
            END IF;
            -- The key's holder was cancelled or finished between the two: insert again.
        END LOOP;
    END;
    $$
""")
UPGRADE.append(
    "COMMENT ON FUNCTION {schema}.enqueue(text, jsonb, jsonb, text, integer, timestamptz, "
    "text, integer, jsonb, double precision, integer) IS "
    "'Enqueue a job from SQL; returns its id (or the id of the live job holding "
    "idempotency_key). See docs/guides/queues.md.'"
)

DOWNGRADE = [
    "DROP FUNCTION IF EXISTS {schema}.enqueue(text, jsonb, jsonb, text, integer, timestamptz, "
    "text, integer, jsonb, double precision, integer)",
    _NOTIFY_ONLY,
    "DROP TRIGGER IF EXISTS queues_notify_resumed ON {schema}.queues",
    "DROP FUNCTION IF EXISTS {schema}.notify_queue_resumed()",
    "DROP TABLE IF EXISTS {schema}.queues",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
