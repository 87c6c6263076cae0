"""JobContext: what a running task may know and do about its own job.

A task receives it by declaring a parameter annotated ``JobContext``. It offers the job
snapshot, the attempt number, progress reporting, the cancellation flag,
``transaction()``: a database transaction that commits the task's writes *and* marks the
job succeeded together, fenced so a worker that lost its lease commits nothing, and
``step()``: a checkpoint whose result a later run of the job reuses (pgqueue/steps.py).

Both have a sync and an async form, chosen the way the task is written: ``with`` /
``async with ctx.transaction()``, and ``ctx.step(...)`` returning the value in a sync task
but an awaitable in an async one (the worker tells the context which the task is).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from pgqueue.errors import LeaseLost
from pgqueue.limits import charge_units
from pgqueue.serialization import dumps
from pgqueue.steps import JobSteps

if TYPE_CHECKING:
    from pgqueue.db.queries import Queries
    from pgqueue.job import Job

logger = logging.getLogger("pgqueue.task")


class TransactionSource(Protocol):
    """Where ctx.transaction() gets connections (the worker's lazily opened pools)."""

    def sync_pool(self) -> Any: ...

    async def async_pool(self) -> Any: ...


class JobContext:
    """The running job's view of itself. Created by the worker, one per attempt."""

    def __init__(
        self,
        job: Job,
        *,
        worker_id: str,
        queries: Queries,
        report_progress: Callable[[str], None],
        connections: TransactionSource,
        lease_token: int | None = None,
        asynchronous: bool = False,
    ) -> None:
        self.job = job
        self.attempt = job.attempts
        self.worker_id = worker_id
        # The claim's lease_token: ctx.transaction() locks and completes the job only
        # while the row still carries it (the same fence as the completer's).
        self.lease_token = lease_token
        self._queries = queries
        self._report_progress = report_progress
        self._connections = connections
        self._cancel_requested = False
        self.lease_lost = False
        # True from the moment ctx.transaction() has locked this job's row (so nobody
        # else can take the job) until that transaction has ended; on commit,
        # completed_in_transaction is set first. The heartbeat reads both.
        self.transaction_open = False
        self.completed_in_transaction = False
        # The open ctx.transaction()'s connection: steps taken inside it are recorded in
        # it (it holds the job's row lock, which any other connection would wait for).
        self.transaction_connection: Any = None
        # An async task (ctx.step returns an awaitable) or a sync one (it returns the value).
        self.asynchronous = asynchronous
        # Made at the first ctx.step(): most jobs never take one.
        self._job_steps: JobSteps | None = None
        # Units reported by ctx.charge() (None: nothing reported), written with the
        # attempt's outcome (see queries.apply_limit_outcomes).
        self.charged: float | None = None

    def __repr__(self) -> str:
        return f"<JobContext job={self.job.id} task={self.job.task} attempt={self.attempt}>"

    @functools.cached_property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """A logger whose records carry the job's id, task, queue and attempt. Made on
        first use: most tasks never log, and the worker makes a context per job."""
        job = self.job
        return logging.LoggerAdapter(
            logger,
            {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempts},
        )

    @property
    def cancel_requested(self) -> bool:
        """True once someone asked to cancel this job (or it timed out / lost its lease).

        Sync tasks should check it in long loops and return early.
        """
        return self._cancel_requested

    def request_cancel(self) -> None:
        """Set by the worker; tasks read :attr:`cancel_requested`."""
        self._cancel_requested = True

    def set_progress(self, value: Any) -> None:
        """Store ``value`` (JSON) in ``meta["progress"]``; written in the background."""
        self.job.meta["progress"] = value
        self._report_progress(dumps(value))

    def transaction(self) -> JobTransaction:
        """A transaction whose commit also marks this job succeeded.

        ``with ctx.transaction() as conn:`` in sync tasks (a psycopg Connection),
        ``async with ctx.transaction() as conn:`` in async ones (an AsyncConnection).
        If this worker lost the job's lease, the block raises LeaseLost and nothing commits.
        """
        return JobTransaction(self)

    @property
    def _steps(self) -> JobSteps:
        """This execution's steps, made at the first ``step()``."""
        if self._job_steps is None:
            self._job_steps = JobSteps(self)
        return self._job_steps

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once per job and return its result (JSON round-tripped).

        The result is stored under ``name`` (unique within the job, 1 to 200 printable
        characters); when the job runs again (retried, rescued after a crash, revived from
        dead_jobs), the stored result is returned and ``fn`` is not called. In a sync task
        it returns the result; in an async task it returns an awaitable (``await
        ctx.step(...)``), and ``fn`` may be sync or async. The name is checked at once: a
        name used twice in one run of the job raises ValueError naming it. Recording is
        fenced by the lease: a worker that lost the job raises LeaseLost.
        """
        steps = self._steps
        steps.begin(name, fn)
        if self.asynchronous:
            return steps.run_async(name, fn, args, kwargs)
        return steps.run(name, fn, args, kwargs)

    def charge(self, units: float) -> None:
        """Report what this attempt actually used of its cost-based rate limit (say, the
        LLM tokens a response took). The job's claim charged its estimate (``cost``,
        given at enqueue; 1 without one); when the attempt ends, its bucket is corrected
        by the difference, so later claims wait exactly as long as the real use requires.
        Calls add up. Units: a finite number from 0 to 1e9 (anything else raises
        ConfigurationError). A job under no cost limit ignores the charge.
        """
        self.charged = (self.charged or 0.0) + charge_units(units)

    def _fence_params(self) -> dict[str, Any]:
        return {"id": self.job.id, "token": self.lease_token}


class JobTransaction:
    """Context manager behind :meth:`JobContext.transaction` (sync and async forms)."""

    def __init__(self, ctx: JobContext) -> None:
        self._ctx = ctx
        self._pool_cm: Any = None
        self._tx_cm: Any = None
        self._conn: Any = None

    def _lost(self) -> LeaseLost:
        self._ctx.lease_lost = True
        return LeaseLost(
            f"job {self._ctx.job.id} attempt {self._ctx.attempt} is no longer held by worker "
            f"{self._ctx.worker_id}; its transaction was rolled back"
        )

    # -- sync ---------------------------------------------------------------------------
    def __enter__(self) -> psycopg.Connection[Any]:
        self._pool_cm = self._ctx._connections.sync_pool().connection()
        self._conn = self._pool_cm.__enter__()
        self._tx_cm = self._conn.transaction()
        self._tx_cm.__enter__()
        try:
            row = self._conn.execute(
                self._ctx._queries.lock_running_job, self._ctx._fence_params()
            ).fetchone()
            if row is None:
                raise self._lost()
            self._ctx.transaction_open = True
            self._ctx.transaction_connection = self._conn
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self._conn  # type: ignore[no-any-return]

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                marked = self._conn.execute(
                    self._ctx._queries.mark_succeeded_in_transaction, self._ctx._fence_params()
                ).fetchone()
                if marked is None:
                    lost = self._lost()
                    self._tx_cm.__exit__(type(lost), lost, None)
                    raise lost
            self._tx_cm.__exit__(kind, exc, tb)
            if exc is None:
                self._ctx.completed_in_transaction = True
        finally:
            self._ctx.transaction_connection = None
            self._ctx.transaction_open = False
            self._pool_cm.__exit__(None, None, None)

    # -- async --------------------------------------------------------------------------
    async def __aenter__(self) -> psycopg.AsyncConnection[Any]:
        pool = await self._ctx._connections.async_pool()
        self._pool_cm = pool.connection()
        self._conn = await self._pool_cm.__aenter__()
        self._tx_cm = self._conn.transaction()
        await self._tx_cm.__aenter__()
        try:
            cursor = await self._conn.execute(
                self._ctx._queries.lock_running_job, self._ctx._fence_params()
            )
            if await cursor.fetchone() is None:
                raise self._lost()
            self._ctx.transaction_open = True
            self._ctx.transaction_connection = self._conn
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self._conn  # type: ignore[no-any-return]

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc is None:
                cursor = await self._conn.execute(
                    self._ctx._queries.mark_succeeded_in_transaction, self._ctx._fence_params()
                )
                if await cursor.fetchone() is None:
                    lost = self._lost()
                    await self._tx_cm.__aexit__(type(lost), lost, None)
                    raise lost
            await self._tx_cm.__aexit__(kind, exc, tb)
            if exc is None:
                self._ctx.completed_in_transaction = True
        finally:
            self._ctx.transaction_connection = None
            self._ctx.transaction_open = False
            await self._pool_cm.__aexit__(None, None, None)
