"""Checkpointed steps inside a job: what ``ctx.step(name, fn, *args)`` does.

A step runs ``fn`` once per *job*, not once per attempt: its result is stored as JSON in
``job_steps`` (revision ``0009_job_steps``) under the job's id and the step's name, and
when the job runs again — retried after a failure later in the task, rescued after its
worker died, revived by ``pgq dead retry`` — the stored result is returned and ``fn`` is
not called. Steps are fenced like every write of a running job (``record_job_step``:
only while the row is ``running`` under this claim's lease token), so a worker that lost
its lease records nothing: the step raises :class:`~pgqueue.errors.LeaseLost` and the
attempt ends as any attempt that lost its lease (its outcome is dropped).

Cost, paid only by executions that call ``ctx.step``: one query reads the job's stored
steps at the first step of the execution, and each step that runs ``fn`` commits one
insert. Inside ``ctx.transaction()`` both go through the transaction's connection (it
already holds the job's row; another connection would wait for that lock forever), so
such a step is recorded if and only if the transaction commits.

The same logic serves sync and async tasks: :class:`JobSteps` holds the state and the
checks; :meth:`JobSteps.run` (a thread's blocking call) and :meth:`JobSteps.run_async`
(awaited on the event loop) differ only in how they reach the database and call ``fn``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

from pgqueue.bounds import MAX_STEP_NAME_LENGTH, name_problem, short_repr
from pgqueue.errors import LeaseLost
from pgqueue.serialization import encode_result

if TYPE_CHECKING:
    from pgqueue.context import JobContext

__all__ = ["JobSteps"]


class JobSteps:
    """The steps of one execution: the names used so far and the stored results.

    One per JobContext (so per attempt). The stored results are read from the database
    once, at the execution's first step: jobs that never call ``ctx.step`` never pay for
    the read.
    """

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx
        # Names started in this execution (a name whose function raised is taken back:
        # calling it again retries the step, it is not a second step of that name).
        self._used: set[str] = set()
        self._stored: dict[str, Any] | None = None

    # -- checks and bookkeeping, shared by both forms ---------------------------------------

    def begin(self, name: object, fn: object) -> str:
        """Check a step before anything runs; raises one-line errors naming the step."""
        ctx = self._ctx
        problem = name_problem(name, max_length=MAX_STEP_NAME_LENGTH)
        if problem:
            raise ValueError(
                f"invalid step name {short_repr(name)}: {problem} (a step name is 1 to "
                f"{MAX_STEP_NAME_LENGTH} printable characters)"
            )
        assert isinstance(name, str)  # name_problem refused anything else
        if not callable(fn):
            raise TypeError(f"step {name!r}: expected a function to call, got {short_repr(fn)}")
        if name in self._used:
            raise ValueError(
                f"step {name!r} is used twice in job {ctx.job.id}: each step of a job needs "
                f"its own name (for repeated work, put a number or key in it: "
                f"{(name + ':2')!r})"
            )
        if ctx.completed_in_transaction:
            raise RuntimeError(
                f"step {name!r} started after ctx.transaction() committed: job {ctx.job.id} "
                f"is already succeeded, so the step could not be recorded; put steps before "
                f"or inside the transaction"
            )
        if ctx.lease_lost:
            raise self._lost(name)
        self._used.add(name)
        return name

    def _failed(self, name: str) -> None:
        self._used.discard(name)

    def _lost(self, name: str) -> LeaseLost:
        ctx = self._ctx
        ctx.lease_lost = True
        return LeaseLost(
            f"job {ctx.job.id} attempt {ctx.attempt} is no longer held by worker "
            f"{ctx.worker_id}; step {name!r} was not recorded"
        )

    def _keep(self, rows: list[tuple[str, Any]]) -> dict[str, Any]:
        self._stored = dict(rows)
        return self._stored

    def _record_params(self, name: str, value: Any) -> dict[str, Any]:
        encoded = encode_result(value, source=f"step {name!r}")
        return {"id": self._ctx.job.id, "token": self._ctx.lease_token, "name": name,
                "result": encoded}

    # -- sync tasks (a worker thread) --------------------------------------------------------

    def run(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> Any:
        """The step's result: stored, or ``fn(*args, **kwargs)`` recorded now."""
        try:
            if inspect.iscoroutinefunction(fn):
                raise TypeError(f"step {name!r}: {short_repr(fn)} is a coroutine function; "
                                f"a sync task's steps call sync functions (make the task "
                                f"async to await it)")
            stored = self._stored
            if stored is None:
                with self._connection() as conn:
                    stored = self._keep(conn.execute(
                        self._ctx._queries.select_job_steps, {"id": self._ctx.job.id}
                    ).fetchall())
            if name in stored:
                return stored[name]
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()  # never awaited: say so here, not in a RuntimeWarning
                raise TypeError(f"step {name!r} returned an awaitable; a sync task's steps "
                                f"call sync functions (make the task async to await it)")
            params = self._record_params(name, value)
            with self._connection() as conn:
                row = conn.execute(self._ctx._queries.record_job_step, params).fetchone()
        except BaseException:
            self._failed(name)
            raise
        if row is None:
            raise self._lost(name)
        return row[0]

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """The open ctx.transaction()'s connection, else one from the task pool (in
        autocommit mode: each statement commits on its own)."""
        if self._ctx.transaction_connection is not None:
            yield self._ctx.transaction_connection
            return
        with self._ctx._connections.sync_pool().connection() as conn:
            yield conn

    # -- async tasks (the event loop) --------------------------------------------------------

    async def run_async(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> Any:
        """:meth:`run` for async tasks: ``fn`` may be sync or async (its awaitable is
        awaited)."""
        try:
            stored = self._stored
            if stored is None:
                async with self._async_connection() as conn:
                    cursor = await conn.execute(
                        self._ctx._queries.select_job_steps, {"id": self._ctx.job.id})
                    stored = self._keep(await cursor.fetchall())
            if name in stored:
                return stored[name]
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            params = self._record_params(name, value)
            async with self._async_connection() as conn:
                cursor = await conn.execute(self._ctx._queries.record_job_step, params)
                row = await cursor.fetchone()
        except BaseException:
            self._failed(name)
            raise
        if row is None:
            raise self._lost(name)
        return row[0]

    @contextlib.asynccontextmanager
    async def _async_connection(self) -> AsyncIterator[Any]:
        if self._ctx.transaction_connection is not None:
            yield self._ctx.transaction_connection
            return
        pool = await self._ctx._connections.async_pool()
        async with pool.connection() as conn:
            yield conn
