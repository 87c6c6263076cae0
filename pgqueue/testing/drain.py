"""``drain(q)``: run every ready job in this process, with the real worker, and say how
each attempt ended.

Not a fake: a burst worker (``pgq worker --burst``) claims, runs and records the jobs
against the test's database, through the same producer, executor and completer as in
production. It only listens in on the completer to report what it recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pgqueue.db.plans import Statement
from pgqueue.errors import ConfigurationError
from pgqueue.serialization import loads
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.worker import Worker

if TYPE_CHECKING:
    from pgqueue.db.queries import Queries
    from pgqueue.queue import Queue
    from pgqueue.worker.settings import WorkerSettings

AttemptOutcome = Literal["succeeded", "retrying", "snoozed", "released", "cancelled", "dead"]

# What the completer recorded (worker/outcome.py), in the words of the job's new state.
_OUTCOMES: dict[str, AttemptOutcome] = {
    "succeeded": "succeeded", "result": "succeeded", "retry": "retrying",
    "snooze": "snoozed", "release": "released", "cancelled": "cancelled", "dead": "dead",
}


@dataclass(frozen=True)
class Attempt:
    """One attempt of one job that :func:`drain` ran, as the worker recorded it."""

    job_id: int
    task: str
    queue: str
    attempt: int  # 1 on a job's first run
    outcome: AttemptOutcome
    result: Any = None  # the return value (JSON round-tripped) when it succeeded
    error: str | None = None  # the error (a traceback) when it failed

    @property
    def succeeded(self) -> bool:
        return self.outcome == "succeeded"


class _DrainingWorker(Worker):
    """A burst worker that also keeps every final outcome its completer recorded."""

    def __init__(self, queue: Queue, settings: WorkerSettings) -> None:
        self.attempts: list[Attempt] = []
        super().__init__(queue, settings)

    def _recorded(self, outcome: Outcome, recorded: bool) -> None:
        super()._recorded(outcome, recorded)
        if recorded and outcome.final:
            self.attempts.append(_attempt(outcome))


def _attempt(outcome: Outcome) -> Attempt:
    succeeded = outcome.kind in ("succeeded", "result")
    return Attempt(
        job_id=outcome.job_id, task=outcome.task, queue=outcome.queue,
        attempt=outcome.attempt, outcome=_OUTCOMES[outcome.kind],
        result=loads(outcome.result) if succeeded and outcome.result is not None else None,
        error=outcome.error,
    )


def _settings(queue: Queue, queues: list[str] | None, concurrency: int) -> WorkerSettings:
    # No LISTEN (a burst worker does not wait for wake-ups) and no signal handlers (the
    # test runner owns them); one job at a time by default, so jobs run in claim order.
    return queue.worker_settings(
        burst=True, listen=False, install_signal_handlers=False, concurrency=concurrency,
        queues=queues or [], shutdown_timeout=0, connect_timeout=5,
    )


def make_due_jobs_ready(queries: Queries, now: datetime) -> Generator[Statement, Any, int]:
    """The plan behind ``drain(q, now=...)``: jobs due by ``now`` become ready."""
    count: int = yield Statement(queries.make_due_jobs_ready, {"now": now}, fetch="rowcount")
    return count


def _checked_now(now: datetime | None) -> datetime | None:
    if now is not None and (not isinstance(now, datetime) or now.tzinfo is None):
        raise ConfigurationError(
            f"drain(now={now!r}): give an aware datetime, e.g. "
            "datetime.now(UTC) + timedelta(hours=1)")
    return now


def drain(
    queue: Queue,
    *,
    now: datetime | None = None,
    queues: list[str] | None = None,
    concurrency: int = 1,
) -> list[Attempt]:
    """Run every job of ``queue`` that is ready, until none is ready and none runs;
    return how each attempt ended, in the order they were recorded.

    ``now``: run what is due at that time (ahead of the clock): jobs scheduled up to then
    are made ready first. Jobs a task enqueues while the drain runs, and the next steps of
    workflows, run too if they are ready; retries wait for their backoff (drain again
    with a later ``now`` to run them). ``queues`` limits the drain to those queues.
    Call it from synchronous code; in async code, ``await drain_async(q)``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigurationError("drain() was called inside a running event loop: "
                                 "use await drain_async(q) in async code")
    due = _checked_now(now)
    if due is not None:
        queue.run_plan(make_due_jobs_ready(queue.queries, due))
    worker = _DrainingWorker(queue, _settings(queue, queues, concurrency))
    # A loop of its own, as Queue.run_worker() does; a burst worker leaves no task
    # behind, so closing it needs no grace period.
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(worker.run())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return worker.attempts


async def drain_async(
    queue: Queue,
    *,
    now: datetime | None = None,
    queues: list[str] | None = None,
    concurrency: int = 1,
) -> list[Attempt]:
    """:func:`drain` for async code: the worker runs on the running event loop."""
    due = _checked_now(now)
    if due is not None:
        await queue.run_plan_async(make_due_jobs_ready(queue.queries, due))
    worker = _DrainingWorker(queue, _settings(queue, queues, concurrency))
    await worker.run()
    return worker.attempts
