"""Task: a registered function and the ways to enqueue it.

``@q.task`` turns a function into a Task. Calling the Task runs the function directly
(handy in tests); ``enqueue`` and friends insert jobs. ``using(...)`` returns a
:class:`TaskCall` carrying per-enqueue options, including ``conn=`` to insert inside the
caller's own transaction.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from pgqueue.arguments import EncodedArguments, Signature
from pgqueue.errors import ConfigurationError
from pgqueue.job import Job
from pgqueue.operations import insert_job, insert_jobs
from pgqueue.options import ENQUEUE_OPTIONS, JobOptions

if TYPE_CHECKING:
    from pgqueue.queue import Queue

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A function registered with a Queue under ``name``, with default job options."""

    def __init__(
        self,
        queue: Queue,
        func: Callable[P, R],
        *,
        name: str,
        options: JobOptions,
        retry_intervals: tuple[float, ...] | None,
    ) -> None:
        self.queue = queue
        self.func = func
        self.name = name
        self.options = options
        self.retry_intervals = retry_intervals
        self.signature = Signature(func, name)
        self.is_async = inspect.iscoroutinefunction(func)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function directly, in this process, without a job."""
        return self.func(*args, **kwargs)

    def using(self, **options: Any) -> TaskCall:
        """Options for the next enqueue: priority, run_in, run_at, idempotency_key, queue,
        meta, max_attempts, timeout, result_ttl, conn."""
        return TaskCall(self, self.options.with_options(options, ENQUEUE_OPTIONS),
                        options.get("conn"))

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Insert one job with the task's default options; returns its Job."""
        return TaskCall(self, self.options, None).enqueue(*args, **kwargs)

    async def enqueue_async(self, *args: Any, **kwargs: Any) -> Job:
        """Async :meth:`enqueue`."""
        return await TaskCall(self, self.options, None).enqueue_async(*args, **kwargs)

    def enqueue_many(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Job]:
        """Insert one job per item (a tuple of positional or a dict of keyword arguments)."""
        return TaskCall(self, self.options, None).enqueue_many(items)

    async def enqueue_many_async(
        self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]
    ) -> list[Job]:
        """Async :meth:`enqueue_many`."""
        return await TaskCall(self, self.options, None).enqueue_many_async(items)


class TaskCall:
    """A task plus the options of one enqueue call (see :meth:`Task.using`)."""

    def __init__(self, task: Task[Any, Any], options: JobOptions, conn: object | None) -> None:
        self.task = task
        self.options = options
        self.conn = conn

    def _one_params(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        encoded = self.task.signature.encode(args, kwargs)
        return self.options.as_params() | {
            "task": self.task.name, "args": encoded.args, "kwargs": encoded.kwargs,
        }

    def _many_params(
        self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]
    ) -> tuple[dict[str, Any], list[EncodedArguments]]:
        if self.options.idempotency_key is not None:
            raise ConfigurationError(
                "idempotency_key names one job: use enqueue(), not enqueue_many()"
            )
        encoded = []
        for position, item in enumerate(items):
            if isinstance(item, Mapping):
                encoded.append(self.task.signature.encode((), dict(item)))
            elif isinstance(item, tuple | list):
                encoded.append(self.task.signature.encode(tuple(item), {}))
            else:
                raise ConfigurationError(
                    f"enqueue_many item {position} is a {type(item).__name__}: use a tuple of "
                    "positional arguments or a dict of keyword arguments"
                )
        params = self.options.as_params() | {
            "task": self.task.name,
            "args": [e.args for e in encoded],
            "kwargs": [e.kwargs for e in encoded],
        }
        return params, encoded

    def _jobs_from(self, rows: list[dict[str, Any]], encoded: list[EncodedArguments]) -> list[Job]:
        from pgqueue.serialization import loads

        meta = loads(self.options.meta)
        return [
            Job(
                id=row["id"], queue=self.options.queue, task=self.task.name,
                args=loads(e.args), kwargs=loads(e.kwargs), status="queued",
                priority=self.options.priority, run_at=row["run_at"],
                max_attempts=self.options.max_attempts, meta=dict(meta),
                timeout=self.options.timeout, result_ttl=self.options.result_ttl,
                created_at=row["created_at"], _queue=self.task.queue,
            )
            for row, e in zip(rows, encoded, strict=True)
        ]

    def enqueue(self, *args: Any, **kwargs: Any) -> Job:
        """Insert one job; inside ``conn``'s transaction when given."""
        plan = insert_job(self.task.queue.queries, self._one_params(args, kwargs))
        row = self.task.queue.run_plan(plan, conn=self.conn)
        return Job.from_row(row, self.task.queue)

    async def enqueue_async(self, *args: Any, **kwargs: Any) -> Job:
        """Async :meth:`enqueue`."""
        plan = insert_job(self.task.queue.queries, self._one_params(args, kwargs))
        row = await self.task.queue.run_plan_async(plan, conn=self.conn)
        return Job.from_row(row, self.task.queue)

    def enqueue_many(self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]) -> list[Job]:
        """Insert one job per item in a single statement; returns the jobs in order."""
        params, encoded = self._many_params(items)
        if not encoded:
            return []
        rows = self.task.queue.run_plan(insert_jobs(self.task.queue.queries, params),
                                        conn=self.conn)
        return self._jobs_from(rows, encoded)

    async def enqueue_many_async(
        self, items: Iterable[tuple[Any, ...] | Mapping[str, Any]]
    ) -> list[Job]:
        """Async :meth:`enqueue_many`."""
        params, encoded = self._many_params(items)
        if not encoded:
            return []
        rows = await self.task.queue.run_plan_async(
            insert_jobs(self.task.queue.queries, params), conn=self.conn
        )
        return self._jobs_from(rows, encoded)
