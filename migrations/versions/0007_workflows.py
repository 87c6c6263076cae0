"""Workflows: steps are jobs, dependencies are rows of workflow_edges.

Revision ID: 0007_workflows
Revises: 0006_queues
Create Date: 2026-12-04

A workflow (``chain``, ``group``, ``chord`` or a general ``Workflow``) is inserted in one
statement: one job per step, all carrying ``workflow_id`` (the id of its first step, also
the id of its ``workflows`` row), and one ``workflow_edges`` row per dependency. A step
with dependencies is ``waiting``: no claim looks at it (claims read ``queued`` rows only).

Everything after that is done by triggers, so it holds whoever changes a row — the
worker's batched completion, ``ctx.transaction()``, the lease rescuer, ``pgq jobs
cancel``, or a user's own ``UPDATE`` in SQL — and it commits in the transaction that
changed the step:

* **succeeded** (``workflow_step_finished``): the step's edges are resolved, carrying its
  result, and each successor whose edges are all resolved becomes ``queued`` with the
  results it takes put in front of its arguments, and idle workers are woken. A step
  marked succeeded by ``ctx.transaction()`` has no result yet: edges that pass no result
  resolve in that same commit, those that pass it when the worker records the value (the
  update of ``result`` fires the trigger again).
  Fan-in is race-free without a coordinator: each finishing parent locks its waiting
  successors (in id order) before it looks at their other edges, in a statement of its
  own, so the last of two concurrent parents waits for the first to commit and then
  sees its edge resolved (a plpgsql statement takes a new snapshot under READ COMMITTED).
  Exactly one of them releases the successor.
* **cancelled** (same trigger): every waiting step downstream is cancelled too.
* **dead** (``workflow_step_died``, on insert into ``dead_jobs``): every waiting step
  downstream moves to ``dead_jobs`` with an error naming the step that died. Retrying that
  step brings them back (``pgqueue.dead_jobs.retry_dead_jobs``).
* **deleted** (``workflow_step_deleted``): when the last step of a workflow leaves both
  tables (pruned after its ``result_ttl``, purged from ``dead_jobs``), the ``workflows``
  row and its edges go too.

Jobs outside workflows pay for one trigger ``WHEN`` test per updated row (``workflow_id IS
NOT NULL``, false); see docs/explanation/performance.md for the measurement.
Workers of ``0006`` keep working against this schema: they never claim a ``waiting`` step.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0007_workflows"
down_revision = "0006_queues"
branch_labels = None
depends_on = None

UPGRADE = [
    """
    CREATE TABLE {schema}.workflows (
        id            bigint      NOT NULL,
        kind          text        NOT NULL,
        outputs       bigint[]    NOT NULL,
        returns_list  boolean     NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT workflows_pkey PRIMARY KEY (id),
        CONSTRAINT workflows_kind_check CHECK (kind IN ('chain', 'group', 'chord', 'workflow'))
    )
    """,
    "COMMENT ON TABLE {schema}.workflows IS "
    "'pgqueue workflows: one row per enqueued chain, group, chord or Workflow; its id is "
    "the id of its first step. Deleted with its last step.'",
    "COMMENT ON COLUMN {schema}.workflows.outputs IS "
    "'The steps whose results the workflow returns (wait()): the last step of a chain, the "
    "members of a group, the callback of a chord.'",
    "COMMENT ON COLUMN {schema}.workflows.returns_list IS "
    "'True when wait() returns the list of the outputs'' results, false for the one "
    "output''s result.'",
    """
    CREATE TABLE {schema}.workflow_edges (
        workflow_id   bigint      NOT NULL,
        parent_id     bigint      NOT NULL,
        child_id      bigint      NOT NULL,
        position      integer     NOT NULL,
        input         text        NOT NULL DEFAULT 'none',
        done          boolean     NOT NULL DEFAULT false,
        result        jsonb,
        CONSTRAINT workflow_edges_pkey PRIMARY KEY (child_id, parent_id),
        CONSTRAINT workflow_edges_workflow_fkey FOREIGN KEY (workflow_id)
            REFERENCES {schema}.workflows (id) ON DELETE CASCADE,
        CONSTRAINT workflow_edges_input_check CHECK (input IN ('none', 'result', 'results'))
    )
    """,
    "CREATE INDEX workflow_edges_parent_idx ON {schema}.workflow_edges (parent_id)",
    "CREATE INDEX workflow_edges_workflow_idx ON {schema}.workflow_edges (workflow_id)",
    "COMMENT ON TABLE {schema}.workflow_edges IS "
    "'pgqueue workflow dependencies: child_id waits until parent_id has succeeded.'",
    "COMMENT ON COLUMN {schema}.workflow_edges.position IS "
    "'The parent''s place among the child''s dependencies: the order of a chord''s results.'",
    "COMMENT ON COLUMN {schema}.workflow_edges.input IS "
    "'What the child receives in front of its arguments: none, result (its one parent''s "
    "result) or results (the list of its parents'' results, by position).'",
    "COMMENT ON COLUMN {schema}.workflow_edges.done IS "
    "'The parent has succeeded (and its result, when the child takes it, is recorded).'",
    "COMMENT ON COLUMN {schema}.workflow_edges.result IS "
    "'The parent''s result, copied when the edge was resolved.'",
    "ALTER TABLE {schema}.jobs ADD COLUMN workflow_id bigint",
    "ALTER TABLE {schema}.jobs ADD COLUMN waits_for integer",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_waits_for_check CHECK (waits_for >= 0)",
    "ALTER TABLE {schema}.dead_jobs ADD COLUMN workflow_id bigint",
    "COMMENT ON COLUMN {schema}.jobs.workflow_id IS "
    "'The workflow this job is a step of (workflows.id), or NULL.'",
    "COMMENT ON COLUMN {schema}.jobs.waits_for IS "
    "'A workflow step: how many of the steps it comes after have not succeeded yet; it is "
    "released (queued) at 0. NULL outside workflows.'",
    "COMMENT ON COLUMN {schema}.dead_jobs.workflow_id IS "
    "'The workflow this job was a step of (workflows.id), or NULL.'",
    "CREATE INDEX jobs_workflow_idx ON {schema}.jobs (workflow_id) "
    "WHERE workflow_id IS NOT NULL",
    "CREATE INDEX dead_jobs_workflow_idx ON {schema}.dead_jobs (workflow_id) "
    "WHERE workflow_id IS NOT NULL",
    # Steps marked succeeded by ctx.transaction() whose value is not recorded yet: the
    # maintenance finds the ones whose worker died before recording it. A handful of rows.
    "CREATE INDEX jobs_result_lost_idx ON {schema}.jobs (finished_at) "
    "WHERE status = 'succeeded' AND result IS NULL AND workflow_id IS NOT NULL",
    # 'waiting': a workflow step whose dependencies have not all succeeded. Checked
    # without a long lock first, then validated (a read of the table, no writes blocked).
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check "
    "CHECK (status IN ('queued', 'running', 'succeeded', 'cancelled', 'waiting')) NOT VALID",
    "ALTER TABLE {schema}.jobs VALIDATE CONSTRAINT jobs_status_check",
    # -- A step succeeded or was cancelled ---------------------------------------------
    """
    CREATE FUNCTION {schema}.workflow_step_finished() RETURNS trigger
    LANGUAGE plpgsql AS $$
    DECLARE
        ready_queues text;
    BEGIN
        IF NEW.status = 'cancelled' THEN
            IF OLD.status IS DISTINCT FROM 'cancelled' THEN
                WITH RECURSIVE downstream(id) AS (
                    SELECT child_id FROM {schema}.workflow_edges WHERE parent_id = NEW.id
                    UNION
                    SELECT e.child_id FROM {schema}.workflow_edges e
                      JOIN downstream d ON e.parent_id = d.id
                )
                UPDATE {schema}.jobs AS j
                   SET status = 'cancelled', finished_at = now(),
                       expires_at = now() + make_interval(secs => j.result_ttl),
                       last_error = 'cancelled: workflow step ' || NEW.id || ' ('
                                    || NEW.task || ') was cancelled'
                  FROM downstream d
                 WHERE j.id = d.id AND j.status = 'waiting';
            END IF;
            RETURN NULL;
        END IF;
        -- Succeeded. Lock the waiting successors first, in id order (the order every
        -- other writer of several steps takes), in a statement of its own: the next
        -- statement reads their waits_for as the last writer committed it.
        PERFORM j.id FROM {schema}.jobs j
          WHERE j.id IN (SELECT child_id FROM {schema}.workflow_edges WHERE parent_id = NEW.id)
            AND j.status = 'waiting'
          ORDER BY j.id
            FOR UPDATE;
        -- Resolve the edges that can be resolved now (before the result is recorded, by
        -- ctx.transaction(), only those that pass no result), and count them off each
        -- successor's waits_for: a counter, so that a callback after 10,000 members is
        -- released in constant time per member, not by reading its 10,000 edges each time.
        WITH resolved AS (
            UPDATE {schema}.workflow_edges
               SET done = true, result = NEW.result
             WHERE parent_id = NEW.id AND NOT done
               AND (NEW.result IS NOT NULL OR input = 'none')
            RETURNING child_id
        )
        UPDATE {schema}.jobs AS j SET waits_for = j.waits_for - counted.n
          FROM (SELECT child_id, count(*) AS n FROM resolved GROUP BY child_id) AS counted
         WHERE j.id = counted.child_id AND j.status = 'waiting';
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        WITH ready AS (
            SELECT c.id,
                   (SELECT CASE min(e.input)
                           WHEN 'result' THEN jsonb_build_array(min(e.result::text)::jsonb)
                           WHEN 'results' THEN jsonb_build_array(
                               jsonb_agg(coalesce(e.result, 'null') ORDER BY e.position))
                           ELSE '[]'::jsonb END
                      FROM {schema}.workflow_edges e
                     WHERE e.child_id = c.id AND e.input <> 'none') AS inputs
              FROM {schema}.jobs c
             WHERE c.id IN (SELECT child_id FROM {schema}.workflow_edges WHERE parent_id = NEW.id)
               AND c.status = 'waiting' AND c.waits_for = 0
        ),
        released AS (
            UPDATE {schema}.jobs AS j
               SET status = 'queued', run_at = greatest(j.run_at, now()),
                   args = coalesce(ready.inputs, '[]'::jsonb) || j.args
              FROM ready
             WHERE j.id = ready.id
            RETURNING j.queue
        )
        SELECT string_agg(DISTINCT queue, ',') INTO ready_queues FROM released;
        IF ready_queues IS NOT NULL THEN
            PERFORM pg_notify(TG_ARGV[0], ready_queues);
        END IF;
        RETURN NULL;
    END;
    $$
    """,
    "CREATE TRIGGER jobs_workflow_step_finished AFTER UPDATE OF status, result "
    "ON {schema}.jobs FOR EACH ROW "
    "WHEN (NEW.workflow_id IS NOT NULL AND NEW.status IN ('succeeded', 'cancelled') "
    "AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.result IS DISTINCT FROM NEW.result)) "
    "EXECUTE FUNCTION {schema}.workflow_step_finished({channel})",
    # -- A step died ---------------------------------------------------------------------
    # Called for each step moved to dead_jobs, and by the revival of a retried step for
    # the steps still dead (pgqueue.dead_jobs): the waiting steps downstream follow it.
    # The steps it moves fire the trigger again, one level deeper: the first level has
    # already moved every one of them, so the deeper calls return at once (a chain of a
    # thousand steps would otherwise nest a thousand trigger calls).
    """
    CREATE FUNCTION {schema}.workflow_stop_downstream(step_id bigint, step_task text,
                                                      step_error text) RETURNS bigint
    LANGUAGE plpgsql AS $$
    DECLARE
        stopped bigint;
    BEGIN
        WITH RECURSIVE downstream(id) AS (
            SELECT child_id FROM {schema}.workflow_edges WHERE parent_id = step_id
            UNION
            SELECT e.child_id FROM {schema}.workflow_edges e JOIN downstream d ON e.parent_id = d.id
        ),
        locked AS (
            SELECT j.id FROM {schema}.jobs j
             WHERE j.id IN (SELECT id FROM downstream) AND j.status = 'waiting'
             ORDER BY j.id
               FOR UPDATE
        ),
        dead AS (
            DELETE FROM {schema}.jobs AS j USING locked WHERE j.id = locked.id
            RETURNING j.*
        ),
        buried AS (
            INSERT INTO {schema}.dead_jobs (
                id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts,
                idempotency_key, worker_id, last_error, meta, timeout, result_ttl, created_at,
                started_at, finished_at, error, failed_at, workflow_id)
            SELECT id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts,
                   idempotency_key, worker_id, last_error, meta, timeout, result_ttl,
                   created_at, started_at, now(),
                   'workflow step ' || step_id || ' (' || step_task || ') died: '
                   -- the error's last line: for a traceback, the exception
                   || regexp_replace(rtrim(coalesce(step_error, ''), E' \\n'),
                                     E'^.*\\n', ''),
                   now(), workflow_id
              FROM dead
            RETURNING id
        )
        SELECT count(*) INTO stopped FROM buried;
        RETURN stopped;
    END;
    $$
    """,
    """
    CREATE FUNCTION {schema}.workflow_step_died() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF pg_trigger_depth() > 1 THEN
            RETURN NULL;  -- moved here by workflow_stop_downstream, which moved the rest too
        END IF;
        PERFORM {schema}.workflow_stop_downstream(NEW.id, NEW.task, NEW.error);
        RETURN NULL;
    END;
    $$
    """,
    "CREATE TRIGGER dead_jobs_workflow_step_died AFTER INSERT ON {schema}.dead_jobs "
    "FOR EACH ROW WHEN (NEW.workflow_id IS NOT NULL) "
    "EXECUTE FUNCTION {schema}.workflow_step_died()",
    # -- A step's row was deleted --------------------------------------------------------
    # The workflows row is locked before the check, so that of two transactions deleting
    # a workflow's last two steps, the second sees the first's delete and removes it.
    """
    CREATE FUNCTION {schema}.workflow_step_deleted() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM FROM {schema}.workflows WHERE id = OLD.workflow_id FOR UPDATE;
        IF NOT EXISTS (SELECT FROM {schema}.jobs WHERE workflow_id = OLD.workflow_id)
           AND NOT EXISTS (SELECT FROM {schema}.dead_jobs WHERE workflow_id = OLD.workflow_id)
        THEN
            DELETE FROM {schema}.workflows WHERE id = OLD.workflow_id;
        END IF;
        RETURN NULL;
    END;
    $$
    """,
    "CREATE TRIGGER jobs_workflow_step_deleted AFTER DELETE ON {schema}.jobs "
    "FOR EACH ROW WHEN (OLD.workflow_id IS NOT NULL) "
    "EXECUTE FUNCTION {schema}.workflow_step_deleted()",
    "CREATE TRIGGER dead_jobs_workflow_step_deleted AFTER DELETE ON {schema}.dead_jobs "
    "FOR EACH ROW WHEN (OLD.workflow_id IS NOT NULL) "
    "EXECUTE FUNCTION {schema}.workflow_step_deleted()",
]

DOWNGRADE = [
    "DROP TRIGGER IF EXISTS dead_jobs_workflow_step_deleted ON {schema}.dead_jobs",
    "DROP TRIGGER IF EXISTS jobs_workflow_step_deleted ON {schema}.jobs",
    "DROP FUNCTION IF EXISTS {schema}.workflow_step_deleted()",
    "DROP TRIGGER IF EXISTS dead_jobs_workflow_step_died ON {schema}.dead_jobs",
    "DROP FUNCTION IF EXISTS {schema}.workflow_step_died()",
    "DROP FUNCTION IF EXISTS {schema}.workflow_stop_downstream(bigint, text, text)",
    "DROP TRIGGER IF EXISTS jobs_workflow_step_finished ON {schema}.jobs",
    "DROP FUNCTION IF EXISTS {schema}.workflow_step_finished()",
    # Waiting steps cannot exist without workflows: they go to dead_jobs, retryable.
    """
    WITH dead AS (DELETE FROM {schema}.jobs WHERE status = 'waiting' RETURNING *)
    INSERT INTO {schema}.dead_jobs (
        id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts,
        idempotency_key, worker_id, last_error, meta, timeout, result_ttl, created_at,
        started_at, finished_at, error, failed_at)
    SELECT id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts,
           idempotency_key, worker_id, last_error, meta, timeout, result_ttl, created_at,
           started_at, now(), 'a waiting workflow step: its workflow was removed by a '
           || 'downgrade below revision 0007_workflows', now()
      FROM dead
    """,
    "ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_status_check",
    "ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_status_check "
    "CHECK (status IN ('queued', 'running', 'succeeded', 'cancelled'))",
    "DROP INDEX IF EXISTS {schema}.jobs_result_lost_idx",
    "DROP INDEX IF EXISTS {schema}.dead_jobs_workflow_idx",
    "DROP INDEX IF EXISTS {schema}.jobs_workflow_idx",
    "ALTER TABLE {schema}.dead_jobs DROP COLUMN IF EXISTS workflow_id",
    "ALTER TABLE {schema}.jobs DROP COLUMN IF EXISTS waits_for",
    "ALTER TABLE {schema}.jobs DROP COLUMN IF EXISTS workflow_id",
    "DROP TABLE IF EXISTS {schema}.workflow_edges",
    "DROP TABLE IF EXISTS {schema}.workflows",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
