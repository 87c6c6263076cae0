"""Queue: the entry point. Configuration, the task registry, and every operation users call.

A Queue is cheap to create at import time: it touches the database only when first used,
so ``pgq worker --dsn ...`` can still point an imported Queue somewhere else.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast, overload

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue import dead_jobs, limits, queues, schedules, workflows
from pgqueue.bounds import short_repr
from pgqueue.cron import parse_cron
from pgqueue.db import migrate as migrations
from pgqueue.db.connections import async_connection, sync_connection
from pgqueue.db.plans import Plan, run_async, run_sync
from pgqueue.db.queries import Queries, for_schema
from pgqueue.dead_jobs import DeadRetryResult
from pgqueue.errors import (
    ArgumentError,
    ConfigurationError,
    JobNotFound,
    QueueFull,
    SchemaOutOfDate,
    TaskNotFound,
)
from pgqueue.job import API_STATUSES, Job
from pgqueue.limits import TaskLimits
from pgqueue.operations import JobPage, cancel_job, get_job, job_page, list_jobs, purge_queue
from pgqueue.options import TASK_OPTIONS, JobOptions, queue_name, retry_intervals, task_name
from pgqueue.queues import QUEUE_FULL, QueueInfo
from pgqueue.schedules import SCHEDULE_OPTIONS, PeriodicSpec, ScheduleInfo, schedule_name
from pgqueue.settings import (
    EMBEDDED,
    normalize_dsn,
    parse_duration,
    resolve_dsn,
    resolve_schema,
    split_pool_mode,
)
from pgqueue.stats import (
    Overview,
    QueueStats,
    ThroughputPoint,
    WorkerInfo,
    list_workers,
    overview,
    queue_stats,
    throughput,
)
from pgqueue.task import Task, TaskDecorator
from pgqueue.workflows import WorkflowHandle

if TYPE_CHECKING:
    from pgqueue.context import JobContext
    from pgqueue.worker.settings import WorkerSettings

P = ParamSpec("P")
R = TypeVar("R")
# @q.periodic returns the task it decorates, with its type.
AnyTask = TypeVar("AnyTask", bound=Task[Any, Any])

# What PostgreSQL raises when a statement names a table, column or function that the
# schema lacks: a schema that was never migrated, or is older than this code.
_MISSING_OBJECTS = (
    psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction, psycopg.errors.InvalidSchemaName,
)
T = TypeVar("T")


class Queue:
    """A pgqueue: where tasks are registered and jobs are enqueued, found and managed.

    ``dsn`` follows the contract's resolution (argument → ``PGQUEUE_DSN`` →
    ``DATABASE_URL``; ``"embedded"`` for the local embedded server), resolved on first use.
    """

    def __init__(self, dsn: str | None = None, schema: str | None = None) -> None:
        self._explicit_dsn = normalize_dsn(dsn) if dsn else None
        self._dsn: str | None = None
        self._pool_mode: str | None = None
        self.schema = resolve_schema(schema)
        self.tasks: dict[str, Task[Any, Any]] = {}
        # Schedules declared with @q.periodic, by schedule name: every worker of this
        # Queue declares them in the schedules table when it starts.
        self.periodic_tasks: dict[str, PeriodicSpec] = {}
        self._lock = threading.Lock()
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._async_pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool[Any]] = {}

    def __repr__(self) -> str:
        return f"<Queue schema={self.schema!r} tasks={len(self.tasks)}>"

    # -- configuration ----------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The resolved DSN (starting the embedded server if that is what was asked for).

        pgqueue's own ``pool_mode`` option is taken out (see :attr:`pool_mode`): this is
        a DSN libpq accepts.
        """
        with self._lock:
            if self._dsn is None:
                resolved = resolve_dsn(self._explicit_dsn)
                if resolved == EMBEDDED:
                    from pgqueue.embedded import embedded_dsn

                    resolved = embedded_dsn()
                self._dsn, self._pool_mode = split_pool_mode(resolved)
            return self._dsn

    @property
    def pool_mode(self) -> str:
        """``transaction`` when the DSN says ``pool_mode=transaction`` (a pooler such as
        PgBouncer in transaction mode sits in front of PostgreSQL), else ``session``."""
        self.dsn  # noqa: B018 - resolving the DSN reads the option
        return self._pool_mode or "session"

    def _connection_options(self) -> dict[str, Any]:
        """Options of the Queue's own connections: behind a transaction pooler, never
        prepare statements on the server (``prepare_threshold=None``)."""
        return {"prepare_threshold": None} if self.pool_mode == "transaction" else {}

    def configure(self, *, dsn: str | None = None, schema: str | None = None) -> Queue:
        """Point this Queue elsewhere before first use (what ``pgq --dsn`` does)."""
        self.close()
        if dsn is not None:
            self._explicit_dsn = normalize_dsn(dsn)
            self._dsn = self._pool_mode = None
        if schema is not None:
            self.schema = resolve_schema(schema)
        return self

    @property
    def queries(self) -> Queries:
        """The SQL statements rendered for this queue's schema."""
        return for_schema(self.schema)

    # -- tasks ------------------------------------------------------------------------

    # Bare @q.task: the overloads of TaskDecorator.__call__ (pgqueue/task.py says why
    # each), repeated because a method's overloads must be spelled out.
    @overload
    def task(self, func: Callable[Concatenate[object, P], R], /) -> Task[..., R]: ...

    @overload
    def task(self, func: Callable[Concatenate[JobContext, P], R], /) -> Task[P, R]: ...

    @overload
    def task(self, func: Callable[Concatenate[Any, JobContext, P], R], /) -> Task[..., R]: ...

    @overload
    def task(
        self, func: Callable[Concatenate[Any, Any, JobContext, P], R], /
    ) -> Task[..., R]: ...

    @overload
    def task(
        self, func: Callable[Concatenate[Any, Any, Any, JobContext, P], R], /
    ) -> Task[..., R]: ...

    @overload
    def task(self, func: Callable[P, R], /) -> Task[P, R]: ...

    # @q.task(...) with options.
    @overload
    def task(
        self, func: None = None, /, *, name: str | None = None, **options: Any
    ) -> TaskDecorator: ...

    def task(
        self, func: Callable[..., Any] | None = None, /, *, name: str | None = None,
        **options: Any,
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a function as a task; bare ``@q.task`` or ``@q.task(queue=..., ...)``.

        Options: queue, priority, max_attempts, timeout, retry_intervals, result_ttl; and
        limits across every worker (docs/guides/limits.md): ``global_concurrency`` (running
        jobs of the task), ``key_concurrency`` (running jobs per ``concurrency_key``),
        ``rate_limit`` (``"10/s"``, ``"90000 tokens/m"``).
        """
        task_limits = TaskLimits(
            limits.concurrency(options.pop("global_concurrency", None),
                               what="global_concurrency"),
            limits.concurrency(options.pop("key_concurrency", None), what="key_concurrency"),
            limits.rate_limit(options.pop("rate_limit", None)),
        )
        defaults = JobOptions().with_options(options, TASK_OPTIONS)
        intervals = retry_intervals(options.get("retry_intervals"))

        def register(target: Callable[..., Any]) -> Task[Any, Any]:
            registered = task_name(name or f"{target.__module__}.{target.__qualname__}")
            if registered in self.tasks and self.tasks[registered].func is not target:
                raise ConfigurationError(
                    f"task name {registered!r} is already registered; pass name= to tell "
                    "them apart"
                )
            task: Task[Any, Any] = Task(
                self, target, name=registered, options=defaults, retry_intervals=intervals,
                limits=task_limits,
            )
            self.tasks[registered] = task
            return task

        return register(func) if func is not None else cast(TaskDecorator, register)

    def periodic(
        self, cron: str, *, tz: str | None = None, name: str | None = None, **options: Any
    ) -> Callable[[AnyTask], AnyTask]:
        """Enqueue the task below at every tick of ``cron``: ``@q.periodic("*/5 * * * *")``
        placed above ``@q.task``.

        ``cron``: 5 fields or an alias (``@hourly``, ``@daily``, ``@weekly``, ``@monthly``,
        ``@yearly``, ``@annually``, ``@midnight``), read in ``tz`` (an IANA name; UTC by
        default). ``name``: the schedule's name (default: the task's name; give one to
        schedule a task twice). Options: queue, priority, max_attempts, timeout,
        result_ttl, meta (default: the task's). The task must take no arguments (or only
        ``ctx: JobContext``). Each tick is enqueued exactly once, by whichever worker
        gets there first, with ``run_at`` = the tick. See docs/guides/periodic.md.
        """
        parsed = parse_cron(cron, tz)
        JobOptions().with_options(options, SCHEDULE_OPTIONS)  # bad options fail here
        if name is not None:
            schedule_name(name)

        def register(task: AnyTask) -> AnyTask:
            if not isinstance(task, Task):
                raise ConfigurationError(
                    f"@q.periodic({cron!r}) decorates a task: place it above @q.task, "
                    f"not below (got {type(task).__name__} {getattr(task, '__name__', '')!r})")
            if task.queue is not self:
                raise ConfigurationError(
                    f"@q.periodic: task {task.name!r} is registered with another Queue")
            try:
                task.signature.prepare((), {})
            except ArgumentError as exc:
                raise ConfigurationError(
                    f"periodic task {task.name!r} takes arguments ({str(exc).split(': ', 1)[-1]})"
                    ": a periodic task takes none, or only ctx: JobContext; use "
                    "q.schedule(name, cron, task, args=[...]) for a schedule with arguments"
                ) from None
            spec_name = schedule_name(name or task.name)
            known = self.periodic_tasks.get(spec_name)
            if known is not None and known.task != task.name:
                raise ConfigurationError(
                    f"schedule name {spec_name!r} is already used by task {known.task!r}; "
                    "pass name= to tell them apart")
            self.periodic_tasks[spec_name] = PeriodicSpec(
                spec_name, parsed, task.name, task.options.with_options(options, SCHEDULE_OPTIONS))
            return task

        return register

    def schedule(
        self,
        name: str,
        cron: str,
        task: Task[Any, Any] | str,
        *,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        tz: str | None = None,
        **options: Any,
    ) -> ScheduleInfo:
        """Add (or replace) the run-time schedule ``name``: enqueue ``task`` (a Task or a
        task name) with these arguments at every tick of ``cron`` in ``tz`` (UTC by
        default). Stored in the database: running workers pick it up without a restart.

        Options: queue, priority, max_attempts, timeout, result_ttl, meta (default: the
        task's, when it is registered here). A registered task checks the arguments now,
        like ``enqueue``; a task name this process does not know is stored as given.
        """
        from pgqueue.arguments import call_arguments

        checked_name = schedule_name(name)
        parsed = parse_cron(cron, tz)
        if isinstance(task, Task):
            target = task
        else:
            target = self.tasks.get(task_name(task)) or self._unregistered_task(task)
        positional, keywords = call_arguments(args, kwargs)
        encoded = target.signature.encode(positional, keywords)
        job_options = target.options.with_options(options, SCHEDULE_OPTIONS)
        return self.run_plan(schedules.upsert_schedule(
            self.queries, name=checked_name, cron=parsed, task=target.name,
            args=encoded.args, kwargs=encoded.kwargs, options=job_options))

    def unschedule(self, name: str) -> None:
        """Delete the schedule ``name``; raises ScheduleNotFound. A code schedule comes
        back when a worker that declares it starts: remove it from the code (or pause it)."""
        self.run_plan(schedules.delete_schedule(self.queries, name))

    def pause_schedule(self, name: str) -> ScheduleInfo:
        """Enqueue no tick of ``name`` until it is resumed (code schedules too)."""
        return self.run_plan(schedules.pause_schedule(self.queries, name))

    def resume_schedule(self, name: str) -> ScheduleInfo:
        """Enqueue ``name``'s ticks again, from the next one (none missed while paused)."""
        return self.run_plan(schedules.resume_schedule(self.queries, name))

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, code and run-time, by name: its definition and state."""
        return self.run_plan(schedules.list_schedules(self.queries))

    def _unregistered_task(self, name: str) -> Task[Any, Any]:
        """A Task for a name this process does not know: any JSON arguments, the default
        options (another process's worker may know it)."""
        return Task(self, _any_arguments, name=task_name(name), options=JobOptions(),
                    retry_intervals=None)

    def get_task(self, name: str) -> Task[Any, Any]:
        """The task registered under ``name``; raises TaskNotFound."""
        try:
            return self.tasks[name]
        except KeyError:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise TaskNotFound(f"no task named {name!r} (registered: {known})") from None

    # -- running plans on our own or the caller's connection ---------------------------

    def _sync_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._lock:
            pool = self._pool
        if pool is None:
            dsn, options = self.dsn, self._connection_options()  # both take self._lock
            with self._lock:
                if self._pool is None:
                    self._pool = ConnectionPool(
                        dsn, min_size=1, max_size=4, open=True, name="pgqueue",
                        timeout=30.0, kwargs=options,
                    )
                pool = self._pool
        return pool

    async def _async_pool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is None:
            for stale in [other for other in self._async_pools if other.is_closed()]:
                del self._async_pools[stale]
            pool = AsyncConnectionPool(
                self.dsn, min_size=1, max_size=4, open=False, name="pgqueue-async",
                kwargs=self._connection_options(),
            )
            await pool.open()
            self._async_pools[loop] = pool
        return pool

    def run_plan(self, plan: Plan[T], conn: object | None = None) -> T:
        """Run a plan on ``conn`` (inside its transaction) or on a pooled connection."""
        try:
            if conn is not None:
                return run_sync(sync_connection(conn), plan)
            with self._sync_pool().connection() as own:
                return run_sync(own, plan)
        except _MISSING_OBJECTS as exc:
            raise self._schema_out_of_date(exc) from None
        except psycopg.Error as exc:
            raise _queue_full(exc) or exc from None

    async def run_plan_async(self, plan: Plan[T], conn: object | None = None) -> T:
        """Async :meth:`run_plan`."""
        try:
            if conn is not None:
                return await run_async(await async_connection(conn), plan)
            pool = await self._async_pool()
            async with pool.connection() as own:
                return await run_async(own, plan)
        except _MISSING_OBJECTS as exc:
            raise self._schema_out_of_date(exc) from None
        except psycopg.Error as exc:
            raise _queue_full(exc) or exc from None

    def _schema_out_of_date(self, exc: psycopg.Error) -> SchemaOutOfDate:
        """SchemaOutOfDate for a statement that found a table or column of ours missing.

        Every statement names only pgqueue's own objects, so a missing one means the
        schema was never migrated (or is older than this code): say so, and what to run,
        instead of the driver's traceback. Translated when it happens, so the happy path
        pays nothing for the check.
        """
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return SchemaOutOfDate(
            f"schema {self.schema!r} of this database has no pgqueue tables, or older ones "
            f"than this version of pgqueue needs ({detail}): run pgq migrate"
        )

    def close(self) -> None:
        """Close this Queue's sync connection pool (async ones: :meth:`close_async`, in
        their loop; a script should call it before ``asyncio.run`` returns)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    async def close_async(self) -> None:
        """Close the async pool of the running loop, and the sync pool."""
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()
        self.close()

    # -- enqueue by name ----------------------------------------------------------------

    def enqueue_by_name(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> Job:
        """Enqueue a task by name. Registered tasks validate arguments as usual; an unknown
        name is enqueued as-is (another process's worker may know it)."""
        from pgqueue.arguments import call_arguments

        positional, keywords = call_arguments(args, kwargs)
        # An unregistered Task takes any JSON arguments and the default options, and
        # enqueues through the same TaskCall path as a registered one.
        task = self.tasks.get(task_name(name)) or self._unregistered_task(name)
        return task.using(**options).enqueue(*positional, **keywords)

    # -- reading and managing jobs ----------------------------------------------------

    def get_job(self, job_id: int) -> Job | None:
        """The job with this id (live or dead), or None."""
        row = self.run_plan(get_job(self.queries, job_id))
        return None if row is None else Job.from_row(row, self)

    async def get_job_async(self, job_id: int) -> Job | None:
        """Async :meth:`get_job`."""
        row = await self.run_plan_async(get_job(self.queries, job_id))
        return None if row is None else Job.from_row(row, self)

    def list_jobs(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs newest first, optionally filtered by API status, queue and task."""
        _check_listing(status, limit)
        rows = self.run_plan(
            list_jobs(self.queries, status=status, queue=queue, task=task, limit=limit)
        )
        return [Job.from_row(row, self) for row in rows]

    def job_page(
        self,
        *,
        status: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """Like :meth:`list_jobs`, one page at a time: pass the page's ``next_cursor`` to
        get the next (keyset pagination: a deep page costs what the first does)."""
        _check_listing(status, limit)
        page = self.run_plan(job_page(self.queries, status=status, queue=queue, task=task,
                                      limit=limit, cursor=cursor))
        for job in page.jobs:
            job._queue = self
        return page

    def get_workflow(self, workflow_id: int) -> WorkflowHandle | None:
        """The workflow with this id (the id of its first step), or None once its last
        step is gone."""
        row = self.run_plan(workflows.get_workflow(self.queries, workflow_id))
        return None if row is None else WorkflowHandle.from_row(row, self)

    def cancel_workflow(self, workflow_id: int) -> dict[str, int]:
        """Cancel a workflow's steps that have not started and ask its running ones to
        stop; ``{"cancelled": n, "requested": m}``. Raises JobNotFound if unknown."""
        return self.run_plan(workflows.cancel_workflow(self.queries, workflow_id))

    def cancel_job(self, job_id: int) -> Job:
        """Cancel a job: queued → cancelled, running → cancellation requested."""
        return Job.from_row(self.run_plan(cancel_job(self.queries, job_id)), self)

    def dead_jobs(self, *, queue: str | None = None, limit: int = 100) -> list[Job]:
        """Dead jobs, most recently failed first."""
        return self.list_jobs(status="dead", queue=queue, limit=limit)

    def dead_queues(self) -> dict[str, int]:
        """Each queue that has dead jobs, and how many, by queue name."""
        return self.run_plan(dead_jobs.dead_queue_counts(self.queries))

    def retry_dead(
        self, ids: Sequence[int] | None = None, *, queue: str | None = None
    ) -> DeadRetryResult:
        """Move dead jobs back to the queue (``ids=None`` means all, optionally one queue);
        the result lists the ids retried and, for each id left dead, a typed reason."""
        return self.run_plan(dead_jobs.retry_dead(self.queries, ids=ids, queue=queue))

    def retry_dead_job(self, job_id: int) -> Job:
        """Retry one dead job and return it; raises JobNotFound, or DuplicateJob when a
        newer live job holds its idempotency key."""
        return Job.from_row(self.run_plan(dead_jobs.retry_dead_job(self.queries, job_id)), self)

    def purge_dead(self, older_than: float | str | timedelta, *, queue: str | None = None) -> int:
        """Delete dead jobs that failed more than ``older_than`` ago (seconds, ``"7d"``, or a
        timedelta); returns how many."""
        seconds = parse_duration(older_than, what="older_than")
        return self.run_plan(dead_jobs.purge_dead(self.queries, older_than=seconds, queue=queue))

    def purge_queue(self, queue: str) -> int:
        """Delete every job of ``queue`` (queued, scheduled, finished, dead) except the
        running ones, which finish normally; returns how many were deleted. Irreversible:
        for demos, tests and abandoned queues."""
        return self.run_plan(purge_queue(self.queries, queue_name(queue)))

    # -- queues as objects -----------------------------------------------------------

    def pause_queue(self, queue: str) -> QueueInfo:
        """Stop every worker from claiming ``queue``'s jobs, from their next claim; running
        jobs finish, enqueueing keeps working. A queue without jobs may be paused."""
        return self.run_plan(queues.pause_queue(self.queries, queue_name(queue), paused=True))

    def resume_queue(self, queue: str) -> QueueInfo:
        """Let workers claim ``queue`` again; idle workers are woken at once."""
        return self.run_plan(queues.pause_queue(self.queries, queue_name(queue), paused=False))

    def set_queue(
        self,
        queue: str,
        *,
        max_queued: int | queues.Unset | None = queues.UNSET,
        priority_aging: float | str | timedelta | queues.Unset | None = queues.UNSET,
        concurrency: int | queues.Unset | None = queues.UNSET,
        key_concurrency: int | queues.Unset | None = queues.UNSET,
        rate_limit: str | queues.Unset | None = queues.UNSET,
        fair: bool | queues.Unset = queues.UNSET,
    ) -> QueueInfo:
        """Change ``queue``'s settings and return its state; a setting not given keeps its
        value, None clears it.

        ``max_queued``: at most this many queued jobs (ready, scheduled or retrying); an
        enqueue beyond it raises :class:`QueueFull`. ``priority_aging``: seconds (or
        ``"5m"``) per priority step; a ready job gains one priority for each step it has
        waited, so low priorities cannot starve.

        Limits across every worker (docs/guides/limits.md), from each worker's next claim:
        ``concurrency`` (running jobs of the queue), ``key_concurrency`` (running jobs per
        ``concurrency_key``), ``rate_limit`` (``"100/m"``, ``"90000 tokens/m"``: starts,
        or units of ``cost``, spread evenly), ``fair`` (claims take keys in turn).
        """
        name = queue_name(queue)
        # Checked before anything is written: one bad setting changes nothing.
        changes: dict[str, Any] = {}
        if max_queued is not queues.UNSET:
            changes["max_queued"] = queues.max_queued(max_queued)
        if priority_aging is not queues.UNSET:
            changes["priority_aging"] = queues.priority_aging(priority_aging)
        if concurrency is not queues.UNSET:
            changes["concurrency"] = limits.concurrency(concurrency, what="concurrency")
        if key_concurrency is not queues.UNSET:
            changes["key_concurrency"] = limits.concurrency(key_concurrency,
                                                            what="key_concurrency")
        if rate_limit is not queues.UNSET:
            rate = limits.rate_limit(rate_limit)
            changes.update(rate.as_params() if rate else dict.fromkeys(
                ("rate_limit", "rate_amount", "rate_window", "rate_unit")))
        if fair is not queues.UNSET:
            if not isinstance(fair, bool):
                raise ConfigurationError(f"invalid fair {fair!r}: True or False")
            changes["fair"] = fair
        if not changes:
            return self.run_plan(queues.queue_info(self.queries, name))
        return self.run_plan(queues.set_settings(self.queries, name, changes))

    def limits(self) -> tuple[dict[str, TaskLimits], list[limits.Pause]]:
        """Every task's limits (as the workers declared them) and the scopes paused now
        by ``RateLimited`` (``task:T``, ``queue:Q``, ``key:K``); queue limits are in
        :meth:`queues`."""
        return self.run_plan(limits.list_task_limits(self.queries))

    def queues(self) -> list[QueueInfo]:
        """Every queue that has jobs or settings, by name: state, settings, counts."""
        return self.run_plan(queues.list_queues(self.queries))

    def stats(self) -> list[QueueStats]:
        """Per queue, by name: queued, scheduled, retrying, running, succeeded, cancelled,
        dead, and the age in seconds of the oldest ready job."""
        return self.run_plan(queue_stats(self.queries))

    def workers(self) -> list[WorkerInfo]:
        """Worker processes (alive, or expired and about to be removed), oldest first."""
        return self.run_plan(list_workers(self.queries))

    def overview(self) -> Overview:
        """The dashboard's overview: per queue its unfinished and dead jobs (from indexes,
        cheap on a large table), and the worker processes."""
        return self.run_plan(overview(self.queries))

    def throughput(self, *, minutes: int = 60, queue: str | None = None,
                   task: str | None = None) -> list[ThroughputPoint]:
        """Job outcomes per minute, queue and outcome over the last ``minutes`` minutes
        (from ``job_counts``, which outlives the pruning of finished jobs)."""
        return self.run_plan(throughput(self.queries, minutes=minutes, queue=queue,
                                        task=task))

    # -- schema ---------------------------------------------------------------------------

    def migrate(self) -> migrations.MigrationResult:
        """Create or upgrade the pgqueue schema (idempotent); says what it did."""
        return migrations.upgrade(self.dsn, self.schema)

    def migrate_sql(self) -> str:
        """The SQL ``migrate()`` would run on an empty database."""
        return migrations.upgrade_sql(self.schema)

    def check_schema(self) -> None:
        """Raise SchemaOutOfDate unless the schema is at this code's revision."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            migrations.check_schema(conn, self.schema)

    # -- worker ---------------------------------------------------------------------------

    def run_worker(self, **settings: Any) -> int:
        """Run a worker in this process until it is stopped; returns its exit status.

        Settings: concurrency, queues, poll_interval, lease, shutdown_timeout, burst,
        connect_timeout, install_signal_handlers (see ``pgq worker --help``).
        """
        from pgqueue.worker.settings import WorkerSettings
        from pgqueue.worker.worker import run

        return run(self, WorkerSettings(**settings))

    def worker_settings(self, **settings: Any) -> WorkerSettings:
        """Validated worker settings (used by the CLI to fail early on bad values)."""
        from pgqueue.worker.settings import WorkerSettings

        return WorkerSettings(**settings)


def _check_listing(status: str | None, limit: int) -> None:
    """A job list's filters, checked before any query: one-line errors."""
    if status is not None and status not in API_STATUSES:
        raise ConfigurationError(
            f"unknown status {short_repr(status)}; use one of {', '.join(API_STATUSES)}"
        )
    if limit < 1:
        raise ConfigurationError(f"invalid limit {limit}: use a positive number")


def _queue_full(exc: psycopg.Error) -> QueueFull | None:
    """QueueFull for the insert trigger's error over a queue's max_queued, else None."""
    if exc.sqlstate != QUEUE_FULL:
        return None
    message = exc.diag.message_primary or str(exc)
    detail = f" ({exc.diag.message_detail})" if exc.diag.message_detail else ""
    hint = f"; {exc.diag.message_hint}" if exc.diag.message_hint else ""
    name = message.split("'")[1] if message.count("'") >= 2 else None
    return QueueFull(f"{message}{detail}{hint}", queue=name)


def _any_arguments(*args: Any, **kwargs: Any) -> None:
    """The signature of a task this process does not know: any JSON arguments."""


__all__ = ["JobNotFound", "Queue"]
