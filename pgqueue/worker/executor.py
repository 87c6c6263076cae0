"""The executor: runs one claimed job and says what became of it. It writes no SQL.

The run is a short pipeline of named steps — resolve the task, rebuild the arguments,
call the function under its timeout, turn what happened into an :class:`Outcome` — so
each rule (what a Retry means, when a failure is final) lives in exactly one place.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from pgqueue import tracing
from pgqueue.context import JobContext, TransactionSource
from pgqueue.db.queries import ClaimedJob, Queries
from pgqueue.errors import Discard, LeaseLost, RateLimited, Retry, Snooze
from pgqueue.job import Job
from pgqueue.serialization import encode_result, storable_text
from pgqueue.task import Task
from pgqueue.worker import timings
from pgqueue.worker.backoff import retry_delay
from pgqueue.worker.outcome import Outcome, OutcomeKind
from pgqueue.worker.threads import DaemonThreadPool

logger = logging.getLogger("pgqueue.worker")

CancelReason = Literal["cancelled", "shutdown", "lease_lost"]


@dataclass
class Execution:
    """One attempt of one job in this process, from claim until its outcome is known."""

    job: ClaimedJob
    ctx: JobContext
    started: float = field(default_factory=time.monotonic)
    asyncio_task: asyncio.Task[Outcome | None] | None = None
    cancel_reason: CancelReason | None = None
    is_sync: bool = False

    def stop(self, reason: CancelReason) -> None:
        """Ask this attempt to stop for ``reason``.

        Async tasks are cancelled. Sync tasks cannot be interrupted: for a user's
        cancellation they only see ``ctx.cancel_requested``; for shutdown or a lost lease
        the worker stops waiting for the thread (its late result will be ignored).
        """
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self.ctx.request_cancel()
        if self.asyncio_task is None or self.asyncio_task.done():
            return
        if self.is_sync and reason == "cancelled":
            return
        self.asyncio_task.cancel()


class Executor:
    """Runs executions; see :meth:`run` for the pipeline."""

    def __init__(
        self,
        *,
        tasks: dict[str, Task[Any, Any]],
        worker_id: str,
        queries: Queries,
        threads: DaemonThreadPool,
        report_progress: Callable[[ClaimedJob, str], None],
        connections: TransactionSource,
        log_succeeded: bool = False,
    ) -> None:
        self.tasks = tasks
        self.worker_id = worker_id
        self.queries = queries
        self.threads = threads
        self.report_progress = report_progress
        self.connections = connections
        self._succeeded_level = logging.INFO if log_succeeded else logging.DEBUG

    def prepare(self, job: ClaimedJob) -> Execution:
        """An Execution with its JobContext, ready to run."""
        snapshot = Job(
            id=job.id, queue=job.queue, task=job.task, args=job.args, kwargs=job.kwargs,
            status="running", priority=job.priority, run_at=job.run_at, attempts=job.attempt,
            max_attempts=job.max_attempts, worker_id=self.worker_id, meta=dict(job.meta),
            timeout=job.timeout, created_at=job.created_at,
        )
        task = self.tasks.get(job.task)
        ctx = JobContext(
            snapshot, worker_id=self.worker_id, queries=self.queries,
            report_progress=lambda value: self.report_progress(job, value),
            connections=self.connections, lease_token=job.token,
            asynchronous=task is not None and task.is_async,
        )
        return Execution(job, ctx, is_sync=task is not None and not task.is_async)

    async def run(self, execution: Execution) -> Outcome | None:
        """Run one attempt; None means "nothing to record" (the lease was lost)."""
        outcome = await self._run(execution)
        charged = execution.ctx.charged
        if outcome is not None and charged is not None and outcome.final:
            return outcome._replace(charged=charged)
        return outcome

    async def _run(self, execution: Execution) -> Outcome | None:
        job = execution.job
        task = self.tasks.get(job.task)
        if task is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            return self._dead(execution, f"unknown task {job.task!r}: no task of that name is "
                                   f"registered in this worker (registered: {known})")
        try:
            args, kwargs = task.signature.decode(job.args, job.kwargs, context=execution.ctx)
        except Exception as exc:
            return self._dead(execution,
                              f"cannot rebuild the arguments of task {job.task!r}: {exc}")
        try:
            result = await self._call(task, execution, args, kwargs)
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if execution.cancel_reason is None:
                if current is not None and current.cancelling() == 0:
                    # Nobody cancelled us: the task raised CancelledError itself (say, it
                    # awaited a future cancelled elsewhere). A failure like any other; left
                    # unrecorded, the job would stay running under our renewed lease.
                    return self._failed(task, execution, exc)
                raise  # not ours to absorb: the loop itself is going down
            if current is not None:
                current.uncancel()
            return self._stopped(execution)
        except BaseException as exc:
            # SystemExit and KeyboardInterrupt too: a task cannot end the worker (and every
            # job running beside it); they fail this attempt like any error.
            return self._failed(task, execution, exc)
        if execution.cancel_reason is not None:
            return self._stopped(execution)
        return self._succeeded(execution, result)

    async def _call(
        self, task: Task[Any, Any], execution: Execution, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        timeout = execution.job.timeout
        if task.is_async and timeout is None:
            return await task.func(*args, **kwargs)
        deadline = asyncio.timeout(timeout)
        try:
            if task.is_async:
                return await self._bounded(task.func(*args, **kwargs), execution, deadline)
            call: Callable[[], Any] = functools.partial(task.func, *args, **kwargs)
            if tracing.ENABLED and tracing.active():
                # The attempt's span stays current in the thread (its spans are children).
                call = functools.partial(contextvars.copy_context().run, call)
            future = self.threads.submit(call)
            try:
                async with deadline:
                    # shield: a timeout or shutdown stops our wait, not the thread's
                    # future, so the thread's late result lands in a future nobody reads.
                    return await asyncio.shield(future)
            finally:
                if not future.done() and self.threads.abandon(future):
                    logger.warning(
                        "Job %s (%s): attempt %s ended but its thread is still running "
                        "(sync code cannot be interrupted); its slot stays taken until the "
                        "call returns (%d stuck thread(s) in this worker).", execution.job.id,
                        execution.job.task, execution.job.attempt, self.threads.stuck,
                        extra=_extra(execution.job))
        except TimeoutError:
            # Only our deadline is a timeout (the task may raise TimeoutError itself);
            # the flag tells _failed so and tells a sync task to stop.
            if deadline.expired():
                execution.ctx.request_cancel()
            raise

    async def _bounded(
        self, coro: Coroutine[Any, Any, Any], execution: Execution, deadline: asyncio.Timeout
    ) -> Any:
        """Await an async task's coroutine under its timeout, in a task of its own, so
        that code swallowing its cancellation cannot hold the attempt forever (issue
        10.5): once our wait ends (the deadline, a stop, a lost lease) the coroutine is
        cancelled and given ``ABANDON_AFTER``; then it is left to run unawaited, and the
        attempt ends as it would have."""
        child = asyncio.create_task(coro, name=f"pgqueue-task-{execution.job.id}")
        try:
            async with deadline:
                return await asyncio.shield(child)
        except BaseException:
            if not child.done():
                child.cancel()
                done, _ = await asyncio.wait({child}, timeout=timings.ABANDON_AFTER)
                if not done:
                    job = execution.job
                    logger.warning(
                        "Job %s (%s): the task ignored its cancellation for %g s; attempt %s "
                        "ends without it (the coroutine runs on, unawaited).", job.id,
                        job.task, timings.ABANDON_AFTER, job.attempt, extra=_extra(job))
            raise

    # -- turning what happened into an outcome -------------------------------------------

    def _stopped(self, execution: Execution) -> Outcome | None:
        job = execution.job
        reason = execution.cancel_reason
        if reason == "lease_lost" or execution.ctx.lease_lost:
            logger.warning("Job %s (%s) lost its lease during attempt %s; its outcome is dropped.",
                           job.id, job.task, job.attempt,
                           extra=_outcome_fields(execution, "lease_lost"))
            return None
        if reason == "shutdown":
            logger.info("Job %s (%s): attempt %s stopped by the shutdown; back to the queue, "
                        "the attempt given back.", job.id, job.task, job.attempt,
                        extra=_outcome_fields(execution, "released"))
            return Outcome.of(job, "release")
        logger.info("Job %s (%s) cancelled during attempt %s.", job.id, job.task, job.attempt,
                    extra=_outcome_fields(execution, "cancelled"))
        return Outcome.of(job, "cancelled", error="cancelled while running")

    def _succeeded(self, execution: Execution, result: Any) -> Outcome | None:
        job = execution.job
        try:
            encoded = encode_result(result)
        except TypeError as exc:
            if execution.ctx.completed_in_transaction:
                logger.error("Job %s (%s): %s; the job stays succeeded without a result.",
                             job.id, job.task, exc,
                             extra=_outcome_fields(execution, "succeeded"))
                return Outcome.of(job, "result")
            return self._final_or_retry(execution, str(exc), None)
        kind: OutcomeKind = "result" if execution.ctx.completed_in_transaction else "succeeded"
        if logger.isEnabledFor(self._succeeded_level):
            fields = _outcome_fields(execution, "succeeded")
            logger.log(self._succeeded_level, "Job %s (%s) succeeded in %.1f ms.", job.id,
                       job.task, fields["duration_ms"], extra=fields)
        return Outcome.of(job, kind, encoded)

    def _failed(
        self, task: Task[Any, Any], execution: Execution, exc: BaseException
    ) -> Outcome | None:
        job = execution.job
        if isinstance(exc, LeaseLost) or execution.ctx.lease_lost:
            execution.cancel_reason = "lease_lost"
            return self._stopped(execution)
        if execution.ctx.completed_in_transaction:
            logger.warning("Job %s (%s) raised after ctx.transaction() committed; it stays "
                           "succeeded.", job.id, job.task, exc_info=exc,
                           extra=_outcome_fields(execution, "succeeded"))
            return Outcome.of(job, "result")
        if isinstance(exc, Snooze):
            logger.info("Job %s (%s) snoozed for %g s; the attempt is given back.", job.id,
                        job.task, exc.seconds, extra=_outcome_fields(execution, "snoozed"))
            return Outcome.of(job, "snooze", delay=exc.seconds)
        if isinstance(exc, RateLimited):
            logger.info("Job %s (%s) was rate limited: %s.", job.id, job.task, exc,
                        extra=_outcome_fields(execution, "snoozed"))
            return Outcome.of(job, "snooze", delay=exc.retry_after)._replace(
                pause=exc.retry_after, pause_key=exc.key)
        if isinstance(exc, Discard):
            return self._dead(execution, f"discarded: {exc.reason}")
        if isinstance(exc, Retry):
            reason = f"retry requested: {exc.reason}" if exc.reason else "retry requested"
            return self._final_or_retry(execution, reason, exc.delay)
        delay = retry_delay(job.attempt, task.retry_intervals)
        if isinstance(exc, TimeoutError) and execution.ctx.cancel_requested:
            text = f"TimeoutError: task {job.task!r} timed out after {job.timeout:g}s"
            return self._final_or_retry(execution, text, delay)
        text = "".join(traceback.format_exception(exc)).rstrip()
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            # Last, so that the one-line summary (the last line) says what happened.
            text += (f"\n{type(exc).__name__}({', '.join(map(repr, exc.args))}) raised by "
                     f"task {job.task!r}: a task cannot stop the worker; this attempt failed")
        return self._final_or_retry(execution, text, delay)

    def _final_or_retry(self, execution: Execution, error: str, delay: float | None) -> Outcome:
        job = execution.job
        error = storable_text(error)
        if job.attempt >= job.max_attempts:
            return self._dead(execution, error)
        if delay is None:
            task = self.tasks.get(job.task)
            delay = retry_delay(job.attempt, task.retry_intervals if task else None)
        logger.warning("Job %s (%s) failed attempt %s of %s; retrying in %.1f s: %s",
                       job.id, job.task, job.attempt, job.max_attempts, delay,
                       _last_line(error),
                       extra=_outcome_fields(execution, "failed") | {"retry_in_s": delay})
        return Outcome.of(job, "retry", error=error, delay=delay)

    def _dead(self, execution: Execution, error: str) -> Outcome:
        job = execution.job
        error = storable_text(error)
        logger.error("Job %s (%s) is dead after attempt %s: %s", job.id, job.task, job.attempt,
                     _last_line(error), extra=_outcome_fields(execution, "dead"))
        return Outcome.of(job, "dead", error=error)


def _last_line(error: str) -> str:
    """The last line of an error text: for a traceback, the exception itself."""
    return error.strip().splitlines()[-1] if error.strip() else error


def _extra(job: ClaimedJob) -> dict[str, Any]:
    return {"job_id": job.id, "task": job.task, "queue": job.queue, "attempt": job.attempt}


def _outcome_fields(execution: Execution, outcome: str) -> dict[str, Any]:
    """The fields of the one line each attempt's outcome gets (``outcome`` is named as in
    ``job_counts`` and the metrics, plus ``released`` and ``lease_lost``)."""
    duration = (time.monotonic() - execution.started) * 1000
    return _extra(execution.job) | {"outcome": outcome, "duration_ms": round(duration, 1)}
