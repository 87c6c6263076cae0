"""pgqueue's tables as SQLAlchemy ``Table`` objects, for users who query them.

The schema is a public interface: applications join their own tables against
``pgqueue.jobs`` (a report of the jobs an order enqueued, a dashboard of dead jobs per
customer) and want typed, autocompleted columns to do it::

    from sqlalchemy import select
    from pgqueue.db.schema import jobs

    stmt = select(jobs.c.id, jobs.c.status).where(jobs.c.queue == "email")

For a non-default schema name, build a matching set with :func:`build_metadata`.

These objects *describe* the schema; they never create it. The alembic revisions in
``pgqueue.migrations`` are the only source of DDL (``pgq migrate``). Do not call
``metadata.create_all()``: it would make tables without the wake-up trigger and without
the version row. The test suite checks with alembic's ``compare_metadata`` that these
tables and the migrated database agree; change both together.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP

from pgqueue.settings import validate_schema_name

__all__ = [
    "build_metadata", "dead_jobs", "job_counts", "job_steps", "jobs", "limit_state", "metadata",
    "queues", "schedules", "task_limits", "workers", "workflow_edges", "workflows",
]

_TIMESTAMPTZ = TIMESTAMP(timezone=True)

# Storage parameters of the jobs table (0001_initial): a little free space per page for
# HOT updates, and autovacuum tuned for a table whose rows churn.
_JOBS_STORAGE = {
    "fillfactor": 90,
    "autovacuum_vacuum_scale_factor": 0.02,
    "autovacuum_vacuum_threshold": 1000,
    "autovacuum_vacuum_insert_scale_factor": 0.05,
    "autovacuum_analyze_scale_factor": 0.02,
    "autovacuum_vacuum_cost_delay": 1,
}


def _jobs(metadata: MetaData, schema: str) -> Table:
    table = Table(
        "jobs",
        metadata,
        Column("id", BigInteger, Identity(always=False), nullable=False),
        Column("queue", Text, nullable=False, server_default=text("'default'")),
        Column("task", Text, nullable=False),
        Column("args", JSONB, nullable=False, server_default=text("'[]'")),
        Column("kwargs", JSONB, nullable=False, server_default=text("'{}'")),
        Column(
            "status",
            Text,
            nullable=False,
            server_default=text("'queued'"),
            comment="queued (waiting for a worker), claimed (held by worker_id, not started: "
            "API status queued), running, succeeded, cancelled, or waiting (a workflow step "
            "whose dependencies have not all succeeded).",
        ),
        Column("priority", SmallInteger, nullable=False, server_default=text("0")),
        Column("run_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column(
            "attempts",
            Integer,
            nullable=False,
            server_default=text("0"),
            comment="Number of attempts started (snoozes and shutdown releases give theirs "
            "back; a claimed job has not started one).",
        ),
        Column("max_attempts", Integer, nullable=False, server_default=text("3")),
        Column("idempotency_key", Text),
        Column(
            "lease_expires_at",
            _TIMESTAMPTZ,
            comment="While claimed or running: the worker must heartbeat before this time or "
            "the job is rescued.",
        ),
        Column("worker_id", Text),
        Column("last_error", Text),
        Column("result", JSONB),
        Column("meta", JSONB, nullable=False, server_default=text("'{}'")),
        Column("timeout", Double),
        Column("result_ttl", Integer, nullable=False, server_default=text("86400")),
        Column("cancel_requested", Boolean, nullable=False, server_default=text("false")),
        Column("created_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("started_at", _TIMESTAMPTZ),
        Column("finished_at", _TIMESTAMPTZ),
        Column(
            "expires_at",
            _TIMESTAMPTZ,
            comment="Set when the job finishes (succeeded or cancelled): finished_at + "
            "result_ttl; the pruner deletes the row after it.",
        ),
        Column(
            "lease_token",
            BigInteger,
            comment="Random per claim; with id it fences every outcome of that claim. NULL "
            "while queued.",
        ),
        Column("workflow_id", BigInteger,
               comment="The workflow this job is a step of (workflows.id), or NULL."),
        Column("waits_for", Integer,
               comment="A workflow step: how many of the steps it comes after have not "
                       "succeeded yet; it is released (queued) at 0. NULL outside workflows."),
        Column("concurrency_key", Text,
               comment="Jobs sharing a key count together against key_concurrency, and "
                       "take turns in a fair queue."),
        Column("rate_limit_key", Text,
               comment="The job's rate limit applies to each key separately."),
        Column("cost", Double,
               comment="The units a limit by cost charges when the job starts (NULL: 1)."),
        PrimaryKeyConstraint("id", name="jobs_pkey"),
        CheckConstraint("concurrency_key IS NULL OR length(concurrency_key) BETWEEN 1 AND 200",
                        name="jobs_concurrency_key_check"),
        CheckConstraint("rate_limit_key IS NULL OR length(rate_limit_key) BETWEEN 1 AND 200",
                        name="jobs_rate_limit_key_check"),
        CheckConstraint("cost IS NULL OR (cost >= 0 AND cost <= 1e9)", name="jobs_cost_check"),
        CheckConstraint("waits_for >= 0", name="jobs_waits_for_check"),
        CheckConstraint(  # 'waiting': 0007_workflows
            "status IN ('queued', 'claimed', 'running', 'succeeded', 'cancelled', 'waiting')",
            name="jobs_status_check",
        ),
        CheckConstraint("jsonb_typeof(args) = 'array'", name="jobs_args_is_array"),
        CheckConstraint("jsonb_typeof(kwargs) = 'object'", name="jobs_kwargs_is_object"),
        CheckConstraint("jsonb_typeof(meta) = 'object'", name="jobs_meta_is_object"),
        CheckConstraint("attempts >= 0", name="jobs_attempts_check"),
        CheckConstraint("max_attempts >= 1", name="jobs_max_attempts_check"),
        CheckConstraint("result_ttl >= 0", name="jobs_result_ttl_check"),
        CheckConstraint("timeout IS NULL OR timeout > 0", name="jobs_timeout_check"),
        CheckConstraint(
            "status NOT IN ('running', 'claimed') "
            "OR (lease_expires_at IS NOT NULL AND worker_id IS NOT NULL)",
            name="jobs_running_has_lease",
        ),
        CheckConstraint(  # 0005_times_in_range: times Python's datetime can read
            "run_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz "
            "AND '9999-12-30 00:00:00+00'::timestamptz "
            "AND created_at BETWEEN '0001-01-02 00:00:00+00'::timestamptz "
            "AND '9999-12-30 00:00:00+00'::timestamptz",
            name="jobs_times_in_range",
        ),
        schema=schema,
        comment="pgqueue live jobs: queued, running, and finished rows kept until result_ttl.",
        postgresql_with=_JOBS_STORAGE,
    )
    # The claim index: only queued rows, in the order the claim takes them.
    Index(
        "jobs_claim_idx",
        table.c.priority.desc(),
        table.c.run_at,
        table.c.id,
        postgresql_where=text("status = 'queued'"),
    )
    # next_run_at's index: only rows that can be due in the future (due later than they
    # were created), so a job enqueued to run now writes no entry here.
    Index(
        "jobs_scheduled_idx",
        table.c.run_at,
        postgresql_where=text("status = 'queued' AND run_at > created_at"),
    )
    Index("jobs_lease_idx", table.c.lease_expires_at,
          postgresql_where=text("status IN ('running', 'claimed')"))
    Index(
        "jobs_expires_idx",
        table.c.expires_at,
        postgresql_where=text("expires_at IS NOT NULL"),
    )
    Index(
        "jobs_idempotency_key_idx",
        table.c.idempotency_key,
        unique=True,
        postgresql_where=text("idempotency_key IS NOT NULL AND status <> 'cancelled'"),
    )
    Index("jobs_workflow_idx", table.c.workflow_id,
          postgresql_where=text("workflow_id IS NOT NULL"))
    Index("jobs_result_lost_idx", table.c.finished_at,
          postgresql_where=text("status = 'succeeded' AND result IS NULL "
                                "AND workflow_id IS NOT NULL"))
    # 0010_limits: each key's ready jobs in claim order (key_concurrency, fair queues), and
    # the running jobs per key.
    Index("jobs_concurrency_key_idx", table.c.concurrency_key, table.c.priority.desc(),
          table.c.run_at, table.c.id,
          postgresql_where=text("status = 'queued' AND concurrency_key IS NOT NULL"))
    Index("jobs_running_key_idx", table.c.concurrency_key,
          postgresql_where=text("status = 'running' AND concurrency_key IS NOT NULL"))
    return table


def _dead_jobs(metadata: MetaData, schema: str) -> Table:
    table = Table(
        "dead_jobs",
        metadata,
        Column("id", BigInteger, nullable=False, autoincrement=False),
        Column("queue", Text, nullable=False),
        Column("task", Text, nullable=False),
        Column("args", JSONB, nullable=False),
        Column("kwargs", JSONB, nullable=False),
        Column("priority", SmallInteger, nullable=False),
        Column("run_at", _TIMESTAMPTZ, nullable=False),
        Column("attempts", Integer, nullable=False),
        Column("max_attempts", Integer, nullable=False),
        Column("idempotency_key", Text),
        Column("worker_id", Text),
        Column("last_error", Text),
        Column("meta", JSONB, nullable=False, server_default=text("'{}'")),
        Column("timeout", Double),
        Column("result_ttl", Integer, nullable=False, server_default=text("86400")),
        Column("created_at", _TIMESTAMPTZ, nullable=False),
        Column("started_at", _TIMESTAMPTZ),
        Column("finished_at", _TIMESTAMPTZ),
        Column("error", Text, nullable=False),
        Column("failed_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("workflow_id", BigInteger,
               comment="The workflow this job was a step of (workflows.id), or NULL."),
        Column("concurrency_key", Text),
        Column("rate_limit_key", Text),
        Column("cost", Double),
        PrimaryKeyConstraint("id", name="dead_jobs_pkey"),
        schema=schema,
        comment="pgqueue dead jobs: attempts exhausted or discarded; kept until purged.",
    )
    Index("dead_jobs_failed_at_idx", table.c.failed_at)
    Index("dead_jobs_queue_idx", table.c.queue, table.c.failed_at)
    Index("dead_jobs_workflow_idx", table.c.workflow_id,
          postgresql_where=text("workflow_id IS NOT NULL"))
    return table


def _workers(metadata: MetaData, schema: str) -> Table:
    return Table(
        "workers",
        metadata,
        Column("id", Text, nullable=False),
        Column("hostname", Text, nullable=False),
        Column("pid", Integer, nullable=False),
        Column("queues", ARRAY(Text), nullable=False, server_default=text("'{}'")),
        Column("concurrency", Integer, nullable=False),
        Column("started_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("last_heartbeat_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("lease_expires_at", _TIMESTAMPTZ, nullable=False),
        Column("stuck", Integer, nullable=False, server_default=text("0"),
               comment="Threads stuck in a sync call whose attempt already ended (their "
                       "slots stay taken); written by each heartbeat."),
        PrimaryKeyConstraint("id", name="workers_pkey"),
        schema=schema,
        comment="pgqueue live worker processes; an empty queues array means every queue.",
    )


def _queues(metadata: MetaData, schema: str) -> Table:
    return Table(
        "queues",
        metadata,
        Column("name", Text, nullable=False),
        Column("paused", Boolean, nullable=False, server_default=text("false"),
               comment="No worker claims jobs of a paused queue; enqueueing into it keeps "
                       "working."),
        Column("max_queued", Integer,
               comment="At most this many queued (ready, scheduled or retrying) jobs; an "
                       "insert beyond it fails with SQLSTATE PQ001 (QueueFull). NULL: "
                       "unbounded."),
        Column("priority_aging", Double,
               comment="Seconds per priority step: a ready job gains one priority per "
                       "step it waits (raised by maintenance). NULL: no aging."),
        Column("aged_at", _TIMESTAMPTZ,
               comment="When the queue's priorities were last aged (one maintenance round "
                       "does it)."),
        Column("updated_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("concurrency", Integer,
               comment="At most this many running jobs of the queue across all workers. "
                       "NULL: no limit."),
        Column("key_concurrency", Integer,
               comment="At most this many running jobs of the queue per concurrency_key. "
                       "NULL: no limit."),
        *_rate_columns(),
        Column("fair", Boolean, nullable=False, server_default=text("false"),
               comment="Claims take the queue's concurrency keys in turn, so a key with many "
                       "jobs cannot starve one with few."),
        PrimaryKeyConstraint("name", name="queues_pkey"),
        CheckConstraint("concurrency IS NULL OR concurrency >= 1",
                        name="queues_concurrency_check"),
        CheckConstraint("key_concurrency IS NULL OR key_concurrency >= 1",
                        name="queues_key_concurrency_check"),
        _rate_check("queues_rate_check"),
        CheckConstraint("length(name) BETWEEN 1 AND 200", name="queues_name_check"),
        CheckConstraint("max_queued IS NULL OR max_queued >= 1",
                        name="queues_max_queued_check"),
        CheckConstraint("priority_aging IS NULL OR priority_aging BETWEEN 0.1 AND 31536000",
                        name="queues_priority_aging_check"),
        schema=schema,
        comment="pgqueue queue settings: one row per configured queue; a queue without a row "
                "has the defaults (running, unbounded).",
    )


def _workflows(metadata: MetaData, schema: str) -> Table:
    return Table(
        "workflows",
        metadata,
        Column("id", BigInteger, nullable=False, autoincrement=False),
        Column("kind", Text, nullable=False),
        Column("outputs", ARRAY(BigInteger), nullable=False,
               comment="The steps whose results the workflow returns (wait()): the last "
                       "step of a chain, the members of a group, the callback of a chord."),
        Column("returns_list", Boolean, nullable=False,
               comment="True when wait() returns the list of the outputs' results, false "
                       "for the one output's result."),
        Column("created_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("id", name="workflows_pkey"),
        CheckConstraint("kind IN ('chain', 'group', 'chord', 'workflow')",
                        name="workflows_kind_check"),
        schema=schema,
        comment="pgqueue workflows: one row per enqueued chain, group, chord or Workflow; "
                "its id is the id of its first step. Deleted with its last step.",
    )


def _workflow_edges(metadata: MetaData, schema: str) -> Table:
    table = Table(
        "workflow_edges",
        metadata,
        Column("workflow_id", BigInteger, nullable=False),
        Column("parent_id", BigInteger, nullable=False),
        Column("child_id", BigInteger, nullable=False),
        Column("position", Integer, nullable=False,
               comment="The parent's place among the child's dependencies: the order of a "
                       "chord's results."),
        Column("input", Text, nullable=False, server_default=text("'none'"),
               comment="What the child receives in front of its arguments: none, result "
                       "(its one parent's result) or results (the list of its parents' "
                       "results, by position)."),
        Column("done", Boolean, nullable=False, server_default=text("false"),
               comment="The parent has succeeded (and its result, when the child takes "
                       "it, is recorded)."),
        Column("result", JSONB,
               comment="The parent's result, copied when the edge was resolved."),
        PrimaryKeyConstraint("child_id", "parent_id", name="workflow_edges_pkey"),
        ForeignKeyConstraint(["workflow_id"], [f"{schema}.workflows.id"],
                             name="workflow_edges_workflow_fkey", ondelete="CASCADE"),
        CheckConstraint("input IN ('none', 'result', 'results')",
                        name="workflow_edges_input_check"),
        schema=schema,
        comment="pgqueue workflow dependencies: child_id waits until parent_id has "
                "succeeded.",
    )
    Index("workflow_edges_parent_idx", table.c.parent_id)
    Index("workflow_edges_workflow_idx", table.c.workflow_id)
    return table


def _schedules(metadata: MetaData, schema: str) -> Table:
    return Table(
        "schedules",
        metadata,
        Column("name", Text, nullable=False),
        Column("cron", Text, nullable=False,
               comment="5-field cron expression or @hourly-style alias, read in tz."),
        Column("tz", Text, nullable=False, server_default=text("'UTC'"),
               comment="IANA time zone of cron."),
        Column("task", Text, nullable=False),
        Column("args", JSONB, nullable=False, server_default=text("'[]'")),
        Column("kwargs", JSONB, nullable=False, server_default=text("'{}'")),
        Column("queue", Text, nullable=False, server_default=text("'default'")),
        Column("priority", SmallInteger, nullable=False, server_default=text("0")),
        Column("max_attempts", Integer, nullable=False, server_default=text("3")),
        Column("timeout", Double),
        Column("result_ttl", Integer, nullable=False, server_default=text("86400")),
        Column("meta", JSONB, nullable=False, server_default=text("'{}'")),
        Column("source", Text, nullable=False,
               comment="code: declared by @q.periodic in the workers; runtime: q.schedule / "
                       "pgq periodic add."),
        Column("paused", Boolean, nullable=False, server_default=text("false"),
               comment="No tick is enqueued while paused; resuming starts at the next tick."),
        Column("next_run_at", _TIMESTAMPTZ, nullable=False,
               comment="The next tick (the enqueued job's run_at); missed ticks are not "
                       "backfilled."),
        Column("last_run_at", _TIMESTAMPTZ, comment="The tick of the last job enqueued."),
        Column("last_job_id", BigInteger,
               comment="The id of the last job enqueued (it may since have been pruned)."),
        Column("declared_until", _TIMESTAMPTZ,
               comment="Code schedules: a live worker declares it until then; once past, "
                       "the schedule is inactive and not enqueued."),
        Column("created_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        Column("updated_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("name", name="schedules_pkey"),
        CheckConstraint("length(name) BETWEEN 1 AND 200", name="schedules_name_check"),
        CheckConstraint("source IN ('code', 'runtime')", name="schedules_source_check"),
        CheckConstraint("jsonb_typeof(args) = 'array' AND jsonb_typeof(kwargs) = 'object'",
                        name="schedules_args_check"),
        schema=schema,
        comment="pgqueue periodic jobs: one row per schedule; at each tick one worker "
                "enqueues the job and advances next_run_at in the same statement.",
    )


def _job_steps(metadata: MetaData, schema: str) -> Table:
    # No foreign key to jobs (0009_job_steps): a job moves to dead_jobs and back, and
    # keeps its steps through both moves.
    return Table(
        "job_steps",
        metadata,
        Column("job_id", BigInteger, nullable=False, autoincrement=False,
               comment="The job (jobs.id or dead_jobs.id); no foreign key, the job moves "
                       "between the two."),
        Column("name", Text, nullable=False),
        Column("result", JSONB,
               comment="The step function's return value as JSON; NULL when it returned "
                       "None."),
        Column("created_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("job_id", "name", name="job_steps_pkey"),
        CheckConstraint("length(name) BETWEEN 1 AND 200", name="job_steps_name_check"),
        schema=schema,
        comment="pgqueue checkpointed steps: the stored result of each completed ctx.step() "
                "of a job, kept while the job is in jobs or dead_jobs.",
    )


def _rate_columns() -> list[Column[Any]]:
    """A rate limit's columns, in ``queues`` and ``task_limits`` alike (0010_limits)."""
    return [
        Column("rate_limit", Text,
               comment="The rate limit as given ('100/m', '90000 tokens/m'): rate_amount per "
                       "rate_window seconds, job starts spread evenly. NULL: no rate limit."),
        Column("rate_amount", Double),
        Column("rate_window", Double),
        Column("rate_unit", Text,
               comment="The unit of a limit by cost ('tokens'): jobs are charged jobs.cost at "
                       "claim and corrected by ctx.charge(). NULL: a limit on job starts."),
    ]


def _rate_check(name: str) -> CheckConstraint:
    return CheckConstraint(
        "(rate_limit IS NULL) = (rate_amount IS NULL) AND (rate_amount IS NULL) = "
        "(rate_window IS NULL) AND (rate_amount IS NULL OR (rate_amount > 0 AND "
        "rate_amount <= 1e9 AND rate_window >= 0.001 AND rate_window <= 604800))", name=name)


def _task_limits(metadata: MetaData, schema: str) -> Table:
    return Table(
        "task_limits",
        metadata,
        Column("task", Text, nullable=False),
        Column("global_concurrency", Integer),
        Column("key_concurrency", Integer),
        *_rate_columns(),
        Column("updated_at", _TIMESTAMPTZ, nullable=False, server_default=text("now()")),
        PrimaryKeyConstraint("task", name="task_limits_pkey"),
        CheckConstraint("global_concurrency IS NULL OR global_concurrency >= 1",
                        name="task_limits_global_concurrency_check"),
        CheckConstraint("key_concurrency IS NULL OR key_concurrency >= 1",
                        name="task_limits_key_concurrency_check"),
        _rate_check("task_limits_rate_check"),
        schema=schema,
        comment="pgqueue per-task limits, declared by workers from @q.task(global_concurrency=, "
                "key_concurrency=, rate_limit=) when they start; a task without a row has none.",
    )


def _limit_state(metadata: MetaData, schema: str) -> Table:
    table = Table(
        "limit_state",
        metadata,
        Column("scope", Text, nullable=False),
        Column("next_start_at", _TIMESTAMPTZ,
               comment="A rate bucket: no job charged to it starts before this time."),
        Column("paused_until", _TIMESTAMPTZ,
               comment="Set by RateLimited(retry_after=): no job of this scope starts before "
                       "this time."),
        PrimaryKeyConstraint("scope", name="limit_state_pkey"),
        schema=schema,
        comment="pgqueue rate buckets and pauses in use, one row per scope ('queue:Q', "
                "'task:T', 'key:K'); rows whose times have passed are pruned.",
    )
    Index("limit_state_paused_idx", table.c.paused_until,
          postgresql_where=text("paused_until IS NOT NULL"))
    return table


def _job_counts(metadata: MetaData, schema: str) -> Table:
    # Per-worker rows (0011_job_counts): each worker upserts only its own, so workers
    # never wait for each other; readers sum over worker_id.
    return Table(
        "job_counts",
        metadata,
        Column("minute", _TIMESTAMPTZ, nullable=False,
               comment="The start of the minute the outcomes were recorded in."),
        Column("queue", Text, nullable=False),
        Column("task", Text, nullable=False),
        Column("outcome", Text, nullable=False,
               comment="succeeded, failed (an attempt failed, the job retries), dead, "
                       "cancelled or snoozed."),
        Column("worker_id", Text, nullable=False,
               comment="The worker that recorded the outcomes (workers.id while it runs)."),
        Column("count", BigInteger, nullable=False),
        PrimaryKeyConstraint("minute", "queue", "task", "outcome", "worker_id",
                             name="job_counts_pkey"),
        CheckConstraint("count >= 0", name="job_counts_count_check"),
        schema=schema,
        comment="pgqueue throughput: job outcomes per minute, queue, task and worker, kept 7 days "
                "after the jobs themselves are pruned.",
    )


def build_metadata(schema: str = "pgqueue") -> MetaData:
    """A fresh ``MetaData`` holding ``jobs``, ``dead_jobs``, ``workers``, ``queues``,
    ``workflows``, ``workflow_edges``, ``schedules``, ``job_steps`` and ``job_counts`` in
    ``schema``.

    Look the tables up with ``metadata.tables[f"{schema}.jobs"]``.
    """
    schema = validate_schema_name(schema)
    metadata = MetaData(schema=schema)
    _jobs(metadata, schema)
    _dead_jobs(metadata, schema)
    _workers(metadata, schema)
    _queues(metadata, schema)
    _workflows(metadata, schema)
    _workflow_edges(metadata, schema)
    _schedules(metadata, schema)
    _job_steps(metadata, schema)
    _task_limits(metadata, schema)
    _limit_state(metadata, schema)
    _job_counts(metadata, schema)
    return metadata


metadata = build_metadata()
jobs = metadata.tables["pgqueue.jobs"]
dead_jobs = metadata.tables["pgqueue.dead_jobs"]
workers = metadata.tables["pgqueue.workers"]
queues = metadata.tables["pgqueue.queues"]
workflows = metadata.tables["pgqueue.workflows"]
workflow_edges = metadata.tables["pgqueue.workflow_edges"]
schedules = metadata.tables["pgqueue.schedules"]
job_steps = metadata.tables["pgqueue.job_steps"]
task_limits = metadata.tables["pgqueue.task_limits"]
limit_state = metadata.tables["pgqueue.limit_state"]
job_counts = metadata.tables["pgqueue.job_counts"]
