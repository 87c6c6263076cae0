"""Limits across the cluster: concurrency, rate limits by count and cost, pauses, fairness.

Revision ID: 0010_limits
Revises: 0009_job_steps
Create Date: 2026-12-04

Every limit is enforced by the claim, in the database, so it holds across workers and
hosts; running jobs are counted from ``jobs`` (``status = 'running'``), never from a
counter that a crash could leave wrong, so a worker killed mid-job frees its slots when
its lease is rescued.

* ``queues`` gains a queue's limits: ``concurrency`` (running jobs of the queue across the
  cluster), ``key_concurrency`` (running jobs per ``concurrency_key``), a rate limit
  (``rate_limit`` as given, ``rate_amount`` per ``rate_window`` seconds, ``rate_unit``
  for a limit by cost) and ``fair`` (claims take the queue's keys in turn).
* ``task_limits``: the same limits per task, declared by the workers from
  ``@q.task(global_concurrency=, key_concurrency=, rate_limit=)`` at start.
* ``limit_state``: one row per rate bucket in use or scope paused by ``RateLimited``:
  the bucket's ``next_start_at`` (the earliest time its next job may start: starts are
  spread evenly, ``rate_window / rate_amount`` seconds per unit) and ``paused_until``.
  A row whose times have passed means nothing and is pruned by maintenance, so the table
  does not grow with the number of jobs.
* ``jobs`` and ``dead_jobs`` gain ``concurrency_key``, ``rate_limit_key`` and ``cost``
  (the estimate a cost limit charges at claim).

Jobs of queues and tasks without limits keep the claim they had: the claim skips limited
queues and tasks (arrays read once per statement from these small tables) and a second
claim, run only when some limit exists, takes limited jobs under the limits' row locks.

Workers of ``0009`` keep working against this schema, ignoring limits.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0010_limits"
down_revision = "0009_job_steps"
branch_labels = None
depends_on = None

# A rate limit's columns and checks, shared by queues and task_limits.
_RATE_CHECK = (
    "CHECK ((rate_limit IS NULL) = (rate_amount IS NULL) AND (rate_amount IS NULL) = "
    "(rate_window IS NULL) AND (rate_amount IS NULL OR (rate_amount > 0 AND "
    "rate_amount <= 1e9 AND rate_window >= 0.001 AND rate_window <= 604800)))"
)

UPGRADE = [
    "ALTER TABLE {schema}.queues ADD COLUMN concurrency integer, "
    "ADD COLUMN key_concurrency integer, ADD COLUMN rate_limit text, "
    "ADD COLUMN rate_amount double precision, ADD COLUMN rate_window double precision, "
    "ADD COLUMN rate_unit text, ADD COLUMN fair boolean NOT NULL DEFAULT false, "
    "ADD CONSTRAINT queues_concurrency_check CHECK (concurrency IS NULL OR concurrency >= 1), "
    "ADD CONSTRAINT queues_key_concurrency_check "
    "CHECK (key_concurrency IS NULL OR key_concurrency >= 1), "
    "ADD CONSTRAINT queues_rate_check " + _RATE_CHECK,
    "COMMENT ON COLUMN {schema}.queues.concurrency IS "
    "'At most this many running jobs of the queue across all workers. NULL: no limit.'",
    "COMMENT ON COLUMN {schema}.queues.key_concurrency IS "
    "'At most this many running jobs of the queue per concurrency_key. NULL: no limit.'",
    "COMMENT ON COLUMN {schema}.queues.rate_limit IS "
    "'The rate limit as given (''100/m'', ''90000 tokens/m''): rate_amount per rate_window "
    "seconds, job starts spread evenly. NULL: no rate limit.'",
    "COMMENT ON COLUMN {schema}.queues.rate_unit IS "
    "'The unit of a limit by cost (''tokens''): jobs are charged jobs.cost at claim and "
    "corrected by ctx.charge(). NULL: a limit on job starts.'",
    "COMMENT ON COLUMN {schema}.queues.fair IS "
    "'Claims take the queue''s concurrency keys in turn, so a key with many jobs cannot "
    "starve one with few.'",
    """
    CREATE TABLE {schema}.task_limits (
        task               text        NOT NULL,
        global_concurrency integer,
        key_concurrency    integer,
        rate_limit         text,
        rate_amount        double precision,
        rate_window        double precision,
        rate_unit          text,
        updated_at         timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT task_limits_pkey PRIMARY KEY (task),
        CONSTRAINT task_limits_global_concurrency_check
            CHECK (global_concurrency IS NULL OR global_concurrency >= 1),
        CONSTRAINT task_limits_key_concurrency_check
            CHECK (key_concurrency IS NULL OR key_concurrency >= 1),
        CONSTRAINT task_limits_rate_check """ + _RATE_CHECK + """
    )
    """,
    "COMMENT ON COLUMN {schema}.task_limits.rate_limit IS "
    "'The rate limit as given (''100/m'', ''90000 tokens/m''): rate_amount per rate_window "
    "seconds, job starts spread evenly. NULL: no rate limit.'",
    "COMMENT ON COLUMN {schema}.task_limits.rate_unit IS "
    "'The unit of a limit by cost (''tokens''): jobs are charged jobs.cost at claim and "
    "corrected by ctx.charge(). NULL: a limit on job starts.'",
    "COMMENT ON TABLE {schema}.task_limits IS "
    "'pgqueue per-task limits, declared by workers from @q.task(global_concurrency=, "
    "key_concurrency=, rate_limit=) when they start; a task without a row has none.'",
    """
    CREATE TABLE {schema}.limit_state (
        scope          text        NOT NULL,
        next_start_at  timestamptz,
        paused_until   timestamptz,
        CONSTRAINT limit_state_pkey PRIMARY KEY (scope)
    )
    """,
    "COMMENT ON TABLE {schema}.limit_state IS "
    "'pgqueue rate buckets and pauses in use, one row per scope (''queue:Q'', ''task:T'', "
    "''key:K''); rows whose times have passed are pruned.'",
    "COMMENT ON COLUMN {schema}.limit_state.next_start_at IS "
    "'A rate bucket: no job charged to it starts before this time.'",
    "COMMENT ON COLUMN {schema}.limit_state.paused_until IS "
    "'Set by RateLimited(retry_after=): no job of this scope starts before this time.'",
    "ALTER TABLE {schema}.jobs ADD COLUMN concurrency_key text, "
    "ADD COLUMN rate_limit_key text, ADD COLUMN cost double precision, "
    "ADD CONSTRAINT jobs_concurrency_key_check "
    "CHECK (concurrency_key IS NULL OR length(concurrency_key) BETWEEN 1 AND 200), "
    "ADD CONSTRAINT jobs_rate_limit_key_check "
    "CHECK (rate_limit_key IS NULL OR length(rate_limit_key) BETWEEN 1 AND 200), "
    "ADD CONSTRAINT jobs_cost_check CHECK (cost IS NULL OR (cost >= 0 AND cost <= 1e9))",
    "COMMENT ON COLUMN {schema}.jobs.concurrency_key IS "
    "'Jobs sharing a key count together against key_concurrency, and take turns in a "
    "fair queue.'",
    "COMMENT ON COLUMN {schema}.jobs.rate_limit_key IS "
    "'The job''s rate limit applies to each key separately.'",
    "COMMENT ON COLUMN {schema}.jobs.cost IS "
    "'The units a limit by cost charges when the job starts (NULL: 1).'",
    "ALTER TABLE {schema}.dead_jobs ADD COLUMN concurrency_key text, "
    "ADD COLUMN rate_limit_key text, ADD COLUMN cost double precision",
    # The heads of each key's ready jobs, in claim order: key_concurrency and fair claims
    # find a key's next jobs, and the distinct keys, without walking other keys' jobs.
    "CREATE INDEX jobs_concurrency_key_idx ON {schema}.jobs "
    "(concurrency_key, priority DESC, run_at, id) "
    "WHERE status = 'queued' AND concurrency_key IS NOT NULL",
    # Pauses in force: every claim reads the paused tasks and keys (none, nearly always).
    "CREATE INDEX limit_state_paused_idx ON {schema}.limit_state (paused_until) "
    "WHERE paused_until IS NOT NULL",
    # Running jobs per key, counted by every claim of a key-limited scope.
    "CREATE INDEX jobs_running_key_idx ON {schema}.jobs (concurrency_key) "
    "WHERE status = 'running' AND concurrency_key IS NOT NULL",
]

DOWNGRADE = [
    "DROP INDEX IF EXISTS {schema}.jobs_running_key_idx",
    "DROP INDEX IF EXISTS {schema}.jobs_concurrency_key_idx",
    "ALTER TABLE {schema}.dead_jobs DROP COLUMN IF EXISTS concurrency_key, "
    "DROP COLUMN IF EXISTS rate_limit_key, DROP COLUMN IF EXISTS cost",
    "ALTER TABLE {schema}.jobs DROP COLUMN IF EXISTS concurrency_key, "
    "DROP COLUMN IF EXISTS rate_limit_key, DROP COLUMN IF EXISTS cost",
    "DROP TABLE IF EXISTS {schema}.limit_state",
    "DROP TABLE IF EXISTS {schema}.task_limits",
    "ALTER TABLE {schema}.queues DROP COLUMN IF EXISTS concurrency, "
    "DROP COLUMN IF EXISTS key_concurrency, DROP COLUMN IF EXISTS rate_limit, "
    "DROP COLUMN IF EXISTS rate_amount, DROP COLUMN IF EXISTS rate_window, "
    "DROP COLUMN IF EXISTS rate_unit, DROP COLUMN IF EXISTS fair",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
