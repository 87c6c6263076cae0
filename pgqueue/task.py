"""Task: a registered function and the ways to enqueue it.

``@q.task`` turns a function into a Task. Calling the Task runs the function directly
(handy in tests); ``enqueue`` and friends insert jobs. ``using(...)`` returns a
:class:`TaskCall` carrying per-enqueue options, including ``conn=`` to insert inside the
caller's own transaction.

Typing: ``Task[P, R]`` carries the parameters ``P`` a job is enqueued with and the
function's return type ``R``, so mypy and pyright check ``enqueue``, ``enqueue_async``,
``using(...).enqueue...``, ``s(...)`` and ``args(...)`` (the typed items of
``enqueue_many``) against the function. ``P`` leaves out a leading ``ctx: JobContext``
parameter (the worker passes it, not the caller); how ``@q.task`` works that out is in
:class:`TaskDecorator`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
)

from pgqueue.arguments import EncodedBatch, Signature
from pgqueue.errors import ConfigurationError, a_type
from pgqueue.job import Job
from pgqueue.limits import TaskLimits
from pgqueue.operations import insert_job, insert_jobs
from pgqueue.options import ENQUEUE_OPTIONS, JobOptions

if TYPE_CHECKING:
    from pgqueue.context import JobContext
    from pgqueue.queue import Queue
    from pgqueue.workflows import TaskSignature

P = ParamSpec("P")
R = TypeVar("R")
# A chain step's form of ``s``: the first parameter (``First``), which the previous
# step's result fills, and the ones after it (``Rest``), which the caller gives.
First = TypeVar("First")
Rest = ParamSpec("Rest")


class Arguments(Generic[P]):
    """One job's arguments for ``enqueue_many``, made by :meth:`Task.args`, which the type
    checker checks against the task as it checks ``enqueue``.

    Only the task it was made by takes it. The arguments themselves are validated by
    ``enqueue_many``, with the rest of the batch."""

    __slots__ = ("args", "kwargs", "task")

    def __init__(self, task: Task[P, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.task = task
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        given = [repr(value) for value in self.args]
        given += [f"{name}={value!r}" for name, value in self.kwargs.items()]
        return f"{self.task.name}.args({', '.join(given)})"


class Task(Generic[P, R]):
    """A function registered with a Queue under ``name``, with default job options."""

    def __init__(
        self,
        queue: Queue,
        func: Callable[..., R],
        *,
        name: str,
        options: JobOptions,
        retry_intervals: tuple[float, ...] | None,
        limits: TaskLimits | None = None,
    ) -> None:
        self.queue = queue
        # Cluster-wide limits (pgqueue/limits.py): declared by workers in task_limits.
        self.limits = limits or TaskLimits()
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

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        """Run the function directly, in this process, without a job.

        The arguments are the function's own, ``ctx`` included when it takes one: that
        is why they are not typed ``P`` (which leaves ``ctx`` out)."""
        return self.func(*args, **kwargs)

    def using(self, **options: Any) -> TaskCall[P, R]:
        """Options for the next enqueue: priority, run_in, run_at, idempotency_key, queue,
        meta, max_attempts, timeout, result_ttl, conn."""
        return TaskCall(self, self.options.with_options(options, ENQUEUE_OPTIONS),
                        options.get("conn"))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert one job with the task's default options; returns its Job."""
        return TaskCall(self, self.options, None).enqueue(*args, **kwargs)

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> TaskSignature: ...

    @overload
    def s(
        self: Task[Concatenate[First, Rest], Any], *args: Rest.args, **kwargs: Rest.kwargs
    ) -> TaskSignature: ...

    def s(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """A signature: this task with these arguments, a step of a chain, group, chord
        or Workflow (see ``pgqueue.workflows``).

        Typed as two forms, because a step after the first of a chain (or a chord's
        callback) receives the previous result as its first argument and is given the
        others (``chain(add.s(1, 2), add.s(10))``): every argument (``P``), or every one
        but the first positional parameter. Which one a step is becomes known only when
        the workflow is built; its arguments are checked then, at run time."""
        return TaskCall(self, self.options, None).s(*args, **kwargs)

    def args(self, *args: P.args, **kwargs: P.kwargs) -> Arguments[P]:
        """One job's arguments for :meth:`enqueue_many`, type-checked like ``enqueue``:
        ``add.enqueue_many([add.args(1, 2), add.args(3, b=4)])``.

        Unlike :meth:`s`, no argument may be left out: a job of ``enqueue_many`` has no
        predecessor to give it one."""
        return Arguments(self, args, kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Async :meth:`enqueue`."""
        return await TaskCall(self, self.options, None).enqueue_async(*args, **kwargs)

    def enqueue_many(
        self, items: Iterable[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]]
    ) -> EnqueuedJobs:
        """Insert one job per item: ``task.args(...)`` (checked by the type checker), or a
        tuple of positional or a dict of keyword arguments (checked at run time only)."""
        return TaskCall(self, self.options, None).enqueue_many(items)

    async def enqueue_many_async(
        self, items: Iterable[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]]
    ) -> EnqueuedJobs:
        """Async :meth:`enqueue_many`."""
        return await TaskCall(self, self.options, None).enqueue_many_async(items)


class TaskDecorator(Protocol):
    """The type of ``@q.task`` (bare, or ``@q.task(...)`` with options): what ``Task[P, R]``
    a function becomes.

    The worker passes a parameter annotated ``JobContext`` itself, so ``P`` (what
    ``enqueue`` takes) must leave it out. PEP 612 can drop *leading* parameters only
    (``Concatenate``), so the overloads below, first match wins, are:

    1. a first parameter that takes any object (``object``, ``Any``, unannotated): it
       may or may not be a context, so the arguments are not checked (``Task[..., R]``);
    2. ``ctx: JobContext`` first: ``P`` is every other parameter, checked;
    3. ``JobContext`` second to fourth: not checked (dropping it would turn the
       parameters before it into positional-only ones, and reject keyword calls);
    4. no context parameter: ``P`` is every parameter, checked.

    Arguments the type checker lets through are still checked at run time by
    :class:`pgqueue.arguments.Signature`, as before.
    """

    @overload
    def __call__(self, func: Callable[Concatenate[object, P], R], /) -> Task[..., R]: ...

    @overload
    def __call__(self, func: Callable[Concatenate[JobContext, P], R], /) -> Task[P, R]: ...

    @overload
    def __call__(self, func: Callable[Concatenate[Any, JobContext, P], R], /) -> Task[..., R]: ...

    @overload
    def __call__(
        self, func: Callable[Concatenate[Any, Any, JobContext, P], R], /
    ) -> Task[..., R]: ...

    @overload
    def __call__(
        self, func: Callable[Concatenate[Any, Any, Any, JobContext, P], R], /
    ) -> Task[..., R]: ...

    @overload
    def __call__(self, func: Callable[P, R], /) -> Task[P, R]: ...


class TaskCall(Generic[P, R]):
    """A task plus the options of one enqueue call (see :meth:`Task.using`)."""

    def __init__(self, task: Task[P, R], options: JobOptions, conn: object | None) -> None:
        self.task = task
        self.options = options
        self.conn = conn

    def _one_params(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        encoded = self.task.signature.encode(args, kwargs)
        return self.options.as_params() | {
            "task": self.task.name, "args": encoded.args, "kwargs": encoded.kwargs,
        }

    def _many_params(
        self, items: Iterable[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]]
    ) -> tuple[dict[str, Any], EncodedBatch]:
        if self.options.idempotency_key is not None:
            raise ConfigurationError(
                "idempotency_key names one job: use enqueue(), not enqueue_many()"
            )
        listed = items if isinstance(items, list) else list(items)
        batch: EncodedBatch | None = None
        if all(type(item) is tuple for item in listed):
            # The common shape, [(a, b), ...]: encoded without a per-item object.
            batch = self.task.signature.encode_positional_many(
                cast("list[tuple[Any, ...]]", listed)
            )
        elif all(type(item) is Arguments and item.task is self.task and not item.kwargs
                 for item in listed):
            # Its typed twin, [task.args(a, b), ...]: the same fast path.
            batch = self.task.signature.encode_positional_many(
                [cast("Arguments[P]", item).args for item in listed]
            )
        if batch is None:
            batch = self.task.signature.encode_many(self._calls(listed))
        params = self.options.as_params() | {"task": self.task.name}
        return params, batch

    def _calls(
        self, items: list[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]],
    ) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        """Each item as (positional, keyword) arguments; the general path of enqueue_many."""
        from pgqueue.workflows import TaskSignature

        # The fix names the task as the caller's code does: by its function's name.
        name = getattr(self.task.func, "__name__", self.task.name)
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        for position, item in enumerate(items):
            if isinstance(item, Arguments):
                if item.task is not self.task:
                    raise ConfigurationError(
                        f"enqueue_many item {position} is {item!r}, arguments of another "
                        f"task: use {name}.args(...)"
                    )
                calls.append((item.args, item.kwargs))
            elif isinstance(item, TaskSignature):
                # A step may lack the arguments its predecessors' results would give.
                raise ConfigurationError(
                    f"enqueue_many item {position} is {item!r}, a workflow step: use "
                    f"{name}.args(...) with every argument of the job"
                )
            elif isinstance(item, tuple):
                calls.append((item, {}))
            elif isinstance(item, Mapping):
                calls.append(((), dict(item)))
            elif isinstance(item, list):
                calls.append((tuple(item), {}))
            else:
                raise ConfigurationError(
                    f"enqueue_many item {position} is {a_type(item)}: use {name}.args(...), "
                    "a tuple of positional arguments or a dict of keyword arguments"
                )
        return calls

    def _jobs_from(self, row: dict[str, Any], batch: EncodedBatch) -> EnqueuedJobs:
        return EnqueuedJobs(self, row, batch)

    @overload
    def s(self, *args: P.args, **kwargs: P.kwargs) -> TaskSignature: ...

    @overload
    def s(
        self: TaskCall[Concatenate[First, Rest], Any], *args: Rest.args, **kwargs: Rest.kwargs
    ) -> TaskSignature: ...

    def s(self, *args: Any, **kwargs: Any) -> TaskSignature:
        """A workflow step with these options (see :meth:`Task.s`)."""
        from pgqueue.workflows import TaskSignature

        if self.conn is not None:
            raise ConfigurationError(
                "conn= is given to the workflow's enqueue(conn=...), not to one step"
            )
        return TaskSignature(self.task, args, kwargs, self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert one job; inside ``conn``'s transaction when given."""
        plan = insert_job(self.task.queue.queries, self._one_params(args, kwargs))
        row = self.task.queue.run_plan(plan, conn=self.conn)
        return Job.from_row(row, self.task.queue)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Async :meth:`enqueue`."""
        plan = insert_job(self.task.queue.queries, self._one_params(args, kwargs))
        row = await self.task.queue.run_plan_async(plan, conn=self.conn)
        return Job.from_row(row, self.task.queue)

    def enqueue_many(
        self, items: Iterable[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]]
    ) -> EnqueuedJobs:
        """Insert one job per item in a single statement; returns the jobs in order."""
        params, batch = self._many_params(items)
        if not batch.count:
            return EnqueuedJobs(self, {"ids": []}, batch)
        row = self.task.queue.run_plan(insert_jobs(self.task.queue.queries, params, batch),
                                       conn=self.conn)
        return self._jobs_from(row, batch)

    async def enqueue_many_async(
        self, items: Iterable[Arguments[P] | tuple[Any, ...] | Mapping[str, Any]]
    ) -> EnqueuedJobs:
        """Async :meth:`enqueue_many`."""
        params, batch = self._many_params(items)
        if not batch.count:
            return EnqueuedJobs(self, {"ids": []}, batch)
        row = await self.task.queue.run_plan_async(
            insert_jobs(self.task.queue.queries, params, batch), conn=self.conn
        )
        return self._jobs_from(row, batch)


class EnqueuedJobs(Sequence[Job]):
    """The jobs ``enqueue_many`` inserted, in input order.

    Job objects are built on access: a bulk enqueue of 100,000 jobs should not spend more
    time making Python objects than PostgreSQL spends inserting the rows. ``ids`` is there
    without building any Job.
    """

    def __init__(self, call: TaskCall[Any, Any], row: dict[str, Any], batch: EncodedBatch) -> None:
        self.ids: list[int] = row["ids"]
        self._call = call
        self._row = row
        self._batch = batch
        self._args: list[Any] | None = None
        self._kwargs: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"<EnqueuedJobs {len(self)} jobs of {self._call.task.name}>"

    @overload
    def __getitem__(self, index: int) -> Job: ...

    @overload
    def __getitem__(self, index: slice) -> list[Job]: ...

    def __getitem__(self, index: int | slice) -> Job | list[Job]:
        if isinstance(index, slice):
            return [self._job(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("job index out of range")
        return self._job(index)

    def _job(self, index: int) -> Job:
        from pgqueue.serialization import loads

        if self._args is None:
            self._args = loads(self._batch.args)
            self._kwargs = loads(self._batch.kwargs) or None
        options = self._call.options
        row = self._row
        return Job(
            id=self.ids[index], queue=options.queue, task=self._call.task.name,
            args=self._args[index], kwargs=self._kwargs[index] if self._kwargs else {},
            status="queued" if row["ready"] else "scheduled", priority=options.priority,
            run_at=row["run_at"], max_attempts=options.max_attempts, meta=loads(options.meta),
            timeout=options.timeout, result_ttl=options.result_ttl,
            created_at=row["created_at"], _queue=self._call.task.queue,
        )
