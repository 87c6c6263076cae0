"""``PgQueueBackend``: Django's task backend on pgqueue.

``@task`` functions become pgqueue jobs named by the function's module path
(``myapp.tasks.send_email``), with the Django call's arguments as the job's ``args`` and
``kwargs``. The job is inserted through Django's own database connection when it is
psycopg 3 on PostgreSQL: inside ``transaction.atomic()`` it commits or rolls back with
the block; outside, Django's autocommit commits it at once. Otherwise (another database
engine, or ``"DATABASE": None``) pgqueue's own connections insert it at once, outside any
transaction of Django's. ``pgq worker -A pgqueue.contrib.django.worker`` runs the jobs.
See docs/guides/django.md.
"""

from __future__ import annotations

import builtins
import importlib
import re
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue.context import JobContext
from pgqueue.contrib.django.tasks_api import (
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
)
from pgqueue.errors import ConfigurationError
from pgqueue.job import Job
from pgqueue.options import JobOptions, retry_intervals
from pgqueue.queue import Queue
from pgqueue.task import Task as PgQueueTask

# pgqueue's API statuses as Django's: a job waiting to run (again) is READY; cancelled
# (Django has no such state) counts as FAILED, with the reason as its error.
STATUSES: dict[str, Any] = {
    "queued": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,
    "retrying": TaskResultStatus.READY,
    "waiting": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "succeeded": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

# Django-only keys of a DATABASES entry's OPTIONS, not libpq connection parameters.
_DJANGO_OPTIONS = frozenset({"isolation_level", "server_side_binding", "pool",
                             "assume_role", "cursor_factory", "context", "prepare_threshold"})

# Queues of pgqueue, one per (DSN, schema), shared by every backend instance: Django
# makes a backend per thread, pgqueue's connection pools are per Queue.
_QUEUES: dict[tuple[str, str], Queue] = {}
_QUEUES_LOCK = threading.Lock()


class PgQueueBackend(BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.PgQueueBackend"}}``.

    OPTIONS (all optional): ``DATABASE`` — the Django database alias whose connection
    enqueues, and where pgqueue's tables are (default ``"default"``; None: use ``DSN``
    and pgqueue's own connections); ``DSN`` — pgqueue's database, when not that alias's;
    ``SCHEMA`` (default ``"pgqueue"``); ``MAX_ATTEMPTS`` (default 3), ``TIMEOUT``
    (seconds, default none), ``RESULT_TTL`` (seconds, default 86400) and
    ``RETRY_INTERVALS`` (seconds before the 1st, 2nd... retry; default exponential
    backoff with jitter) for every job.
    ``QUEUES``, as for any backend, lists the queue names tasks may use (empty: any).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(params.get("OPTIONS", {}))
        known = {"DATABASE", "DSN", "SCHEMA", "MAX_ATTEMPTS", "TIMEOUT", "RESULT_TTL",
                 "RETRY_INTERVALS"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigurationError(
                f"TASKS[{alias!r}]['OPTIONS']: unknown option(s) {', '.join(unknown)}; "
                f"accepted: {', '.join(sorted(known))}")
        self.database: str | None = options.get("DATABASE", "default")
        self.dsn: str | None = options.get("DSN")
        self.schema: str = options.get("SCHEMA", "pgqueue")
        self.job_options = JobOptions().with_options(
            {"max_attempts": options.get("MAX_ATTEMPTS", 3),
             "timeout": options.get("TIMEOUT"),
             "result_ttl": options.get("RESULT_TTL", 86400)},
            frozenset({"max_attempts", "timeout", "result_ttl"}))
        self.retry_intervals = retry_intervals(options.get("RETRY_INTERVALS"))

    # -- where jobs go ---------------------------------------------------------------

    @property
    def queue(self) -> Queue:
        """The pgqueue Queue of this backend's database (pgqueue's own connections)."""
        dsn = self.dsn or database_dsn(self.database or "default")
        key = (dsn, self.schema)
        with _QUEUES_LOCK:
            queue = _QUEUES.get(key)
            if queue is None:
                queue = _QUEUES[key] = Queue(dsn, schema=self.schema)
                queue.tasks = DjangoTasks(queue, self)
        return queue

    def django_connection(self) -> psycopg.Connection[Any] | None:
        """The psycopg 3 connection under Django's connection for ``DATABASE`` (in this
        thread), or None when there is none to share (not PostgreSQL, not psycopg 3)."""
        if self.database is None or self.dsn is not None:
            return None
        from django.db import connections

        connection = connections[self.database]
        if connection.vendor != "postgresql":
            return None
        connection.ensure_connection()
        raw = connection.connection
        return raw if isinstance(raw, psycopg.Connection) else None

    # -- the backend API -------------------------------------------------------------

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        registered = self.queue.tasks.get(task.module_path)
        if not isinstance(registered, _DjangoJobTask) or \
                registered.django_task.func is not task.func:
            # The worker finds a task by its module path; one it cannot find there
            # would only fail later, as a dead job.
            raise ConfigurationError(
                f"Django task {task.module_path!r} is not the module attribute of that "
                "name: define it with @task at module level under its function's name")
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority,
                                   "conn": self.django_connection()}
        if task.run_after is not None:
            run_at = task.run_after
            if run_at.tzinfo is None:  # USE_TZ = False: naive times are in TIME_ZONE
                from django.utils import timezone

                run_at = timezone.make_aware(run_at)
            options["run_at"] = run_at
        call = registered.using(**options)
        job = call.enqueue(*args, **kwargs)
        return self._result(task, job, list(args), dict(kwargs))

    def get_result(self, result_id: str) -> TaskResult[Any]:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        # On pgqueue's own connection, not Django's: Django loads jsonb as text, and a
        # result that is a JSON string could not be told from its text. So a job
        # enqueued in a transaction that has not committed yet is not found.
        queue = self.queue
        job = queue.get_job(job_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        task = queue.tasks.get(job.task)
        if task is None:
            autodiscover()  # its module may just not be imported in this process yet
            task = queue.tasks.get(job.task)
        if not isinstance(task, _DjangoJobTask):
            raise TaskResultDoesNotExist(f"{result_id}: job {job_id} runs {job.task!r}, "
                                         "not a Django task known here")
        return self._result(task.django_task, job, job.args, job.kwargs)

    def _result(self, task: Task[Any, Any], job: Job, args: list[Any],
                kwargs: dict[str, Any]) -> TaskResult[Any]:
        return task_result(task, job, args, kwargs, backend=self.alias)


def close_queues() -> None:
    """Close the connection pools of every backend's Queue (tests that drop databases,
    or a process about to fork)."""
    with _QUEUES_LOCK:
        queues = list(_QUEUES.values())
        _QUEUES.clear()
    for queue in queues:
        queue.close()


def task_result(task: Task[Any, Any], job: Job, args: list[Any], kwargs: dict[str, Any],
                *, backend: str) -> TaskResult[Any]:
    """Django's TaskResult for a pgqueue job (id: the job id, as a string)."""
    status = STATUSES.get(job.status, TaskResultStatus.READY)
    error = job.error or job.last_error
    if job.status == "cancelled" and not error:
        error = "cancelled"
    result: TaskResult[Any] = TaskResult(
        task=task, id=str(job.id), status=status, enqueued_at=job.created_at,
        started_at=job.started_at, finished_at=job.finished_at,
        last_attempted_at=job.started_at, args=args, kwargs=kwargs, backend=backend,
        errors=[TaskError(exception_class_path=exception_path(error), traceback=error)]
        if error and status in (TaskResultStatus.FAILED, TaskResultStatus.READY) else [],
        worker_ids=[job.worker_id or ""] * job.attempts,
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result


_EXCEPTION_LINE = re.compile(r"^(?P<path>[A-Za-z_][\w.]*)(?::|$)")


def exception_path(error: str) -> str:
    """The exception class of a traceback, as Django's TaskError wants it: the last
    line's ``module.Class`` (``builtins.ValueError`` for a builtin), or
    ``builtins.Exception`` for an error that is not an exception (``lease expired``)."""
    last = error.strip().splitlines()[-1] if error.strip() else ""
    match = _EXCEPTION_LINE.match(last)
    if match is None:
        return "builtins.Exception"
    path = match["path"]
    if "." in path:
        return path
    found = getattr(builtins, path, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{path}"
    return "builtins.Exception"


def database_dsn(alias: str) -> str:
    """A libpq DSN for Django's database ``alias`` (NAME, USER, PASSWORD, HOST, PORT and
    the libpq parameters among its OPTIONS). Read when used, so that Django's test
    runner, which renames NAME to the test database, is followed."""
    from django.db import connections
    from psycopg.conninfo import make_conninfo

    settings = connections[alias].settings_dict
    if connections[alias].vendor != "postgresql":
        raise ConfigurationError(
            f"DATABASES[{alias!r}] is not PostgreSQL: give TASKS OPTIONS DSN with "
            "pgqueue's database (and DATABASE: None)")
    params: dict[str, Any] = {
        "dbname": settings.get("NAME"), "user": settings.get("USER"),
        "password": settings.get("PASSWORD"), "host": settings.get("HOST"),
        "port": settings.get("PORT"),
    }
    params.update({key: value for key, value in settings.get("OPTIONS", {}).items()
                   if key not in _DJANGO_OPTIONS and isinstance(value, str | int)})
    return make_conninfo("", **{k: v for k, v in params.items() if v not in (None, "")})


# -- running Django tasks in pgqueue's worker ----------------------------------------


class _DjangoJobTask(PgQueueTask[Any, Any]):
    """The pgqueue task that runs one Django task (its name: the module path)."""

    django_task: Task[Any, Any]


class DjangoTasks(dict[str, PgQueueTask[Any, Any]]):
    """The task registry of a backend's Queue: a Django task is registered when first
    enqueued or looked up by its module path.

    A worker finds a job's task only among Django tasks already imported: those of the
    installed apps' ``tasks`` modules (imported when the worker starts) and of any
    module Django imported. A job naming anything else (a hand-inserted row) is dead
    with "unknown task": a module path from the database is never imported.
    """

    def __init__(self, queue: Queue, backend: PgQueueBackend) -> None:
        super().__init__()
        self._queue = queue
        self._backend = backend

    def __missing__(self, name: str) -> PgQueueTask[Any, Any]:
        task: PgQueueTask[Any, Any] | None = self.get(name)
        if task is None:
            raise KeyError(name)
        return task

    def get(self, name: str, default: Any = None) -> Any:
        found = super().get(name)
        if found is not None:
            return found
        django_task = imported_task(name)
        if django_task is None:
            return default
        registered = _wrap(self._queue, django_task, self._backend)
        self[name] = registered
        return registered


def imported_task(path: str) -> Task[Any, Any] | None:
    """The Django task at ``module.name`` if that module is already imported."""
    import sys

    module_name, _, attribute = path.rpartition(".")
    module = sys.modules.get(module_name)
    found = getattr(module, attribute, None) if module is not None else None
    return found if isinstance(found, Task) else None


def _wrap(queue: Queue, django_task: Task[Any, Any], backend: PgQueueBackend
          ) -> PgQueueTask[Any, Any]:
    func: Callable[..., Any] = django_task.func
    from inspect import iscoroutinefunction

    def arguments(ctx: JobContext, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> tuple[Any, ...]:
        if not django_task.takes_context:
            return args
        result = task_result(django_task, ctx.job, list(args), dict(kwargs),
                             backend=backend.alias)
        return (TaskContext(task_result=result), *args)

    if iscoroutinefunction(func):
        async def run_async(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
            return await func(*arguments(ctx, args, kwargs), **kwargs)

        runner: Callable[..., Any] = run_async
    else:
        def run(ctx: JobContext, *args: Any, **kwargs: Any) -> Any:
            from django.db import close_old_connections

            # As Django does around a request: connections that broke or outlived
            # CONN_MAX_AGE are closed before and after (the worker's threads live long).
            close_old_connections()
            try:
                return func(*arguments(ctx, args, kwargs), **kwargs)
            finally:
                close_old_connections()

        runner = run
    registered = _DjangoJobTask(queue, runner, name=django_task.module_path,
                                options=backend.job_options,
                                retry_intervals=backend.retry_intervals)
    registered.django_task = django_task
    return registered


def autodiscover() -> None:
    """Import the ``tasks`` module of every installed app that has one."""
    from django.apps import apps

    for config in apps.get_app_configs():
        try:
            importlib.import_module(f"{config.name}.tasks")
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.tasks":
                raise


def backend_for(alias: str) -> PgQueueBackend:
    """The configured backend ``alias`` (settings.TASKS), which must be a PgQueueBackend."""
    backend = task_backends()[alias]
    if not isinstance(backend, PgQueueBackend):
        raise ConfigurationError(
            f"TASKS[{alias!r}] is {type(backend).__name__}, not "
            "pgqueue.contrib.django.PgQueueBackend")
    return backend

