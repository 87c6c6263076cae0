"""The executor turns one attempt into an Outcome; it writes no SQL, so no database here.

Each test hands ``Executor.run`` a claimed job as the producer would and checks the
Outcome the completer would receive.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import Discard, JobContext, Queue, Retry, Snooze
from pgqueue.db.queries import ClaimedJob, for_schema
from pgqueue.worker.executor import Execution, Executor
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.threads import DaemonThreadPool

_ids = itertools.count(1)


class NoConnections:
    def sync_pool(self) -> Any:
        raise AssertionError("no ctx.transaction() in these tests")

    async def async_pool(self) -> Any:
        raise AssertionError("no ctx.transaction() in these tests")


@pytest.fixture
def threads() -> Iterator[DaemonThreadPool]:
    pool = DaemonThreadPool(4)
    try:
        yield pool
    finally:
        pool.shutdown()


@pytest.fixture
def progress() -> list[tuple[int, str]]:
    return []


@pytest.fixture
def executor(q: Queue, threads: DaemonThreadPool, progress: list[tuple[int, str]]) -> Executor:
    return Executor(
        tasks=q.tasks, worker_id="worker-1", queries=for_schema("pgqueue"), threads=threads,
        report_progress=lambda job, value: progress.append((job.id, value)),
        connections=NoConnections(),
    )


def claimed(task: str, *args: Any, attempt: int = 1, max_attempts: int = 3,
            timeout: float | None = None, **kwargs: Any) -> ClaimedJob:
    now = datetime.now(UTC)
    return ClaimedJob(id=next(_ids), queue="default", task=task, args=list(args), kwargs=kwargs,
                      priority=0, attempt=attempt, max_attempts=max_attempts, timeout=timeout,
                      meta={}, run_at=now, created_at=now, token=next(_ids))


async def run(executor: Executor, job: ClaimedJob) -> Outcome | None:
    return await executor.run(executor.prepare(job))


# -- success ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_success_records_the_result_as_json(q: Queue, executor: Executor, kind: str) -> None:
    if kind == "sync":
        @q.task(name="add")
        def add(a: int, b: int) -> dict[str, Any]:
            return {"sum": a + b, "thread": threading.current_thread().name}
    else:
        @q.task(name="add")
        async def add(a: int, b: int) -> dict[str, Any]:
            return {"sum": a + b, "thread": threading.current_thread().name}

    job = claimed("add", 2, b=3)
    outcome = await run(executor, job)
    assert outcome is not None
    assert (outcome.job_id, outcome.attempt, outcome.kind) == (job.id, 1, "succeeded")
    assert outcome.result is not None
    result = json.loads(outcome.result)
    assert result["sum"] == 5
    # sync tasks run on the pool's threads, async ones on the loop's thread
    assert result["thread"].startswith("pgqueue-task") == (kind == "sync")


async def test_none_result_is_stored_as_null(q: Queue, executor: Executor) -> None:
    @q.task(name="noop")
    def noop() -> None: ...

    outcome = await run(executor, claimed("noop"))
    assert outcome is not None
    assert (outcome.kind, outcome.result) == ("succeeded", None)


async def test_models_and_datetimes_in_results_become_json(q: Queue, executor: Executor) -> None:
    from pydantic import BaseModel

    class Point(BaseModel):
        x: int

    @q.task(name="point")
    def point() -> Any:
        return {"p": Point(x=1), "at": datetime(2024, 1, 1, tzinfo=UTC)}

    outcome = await run(executor, claimed("point"))
    assert outcome is not None
    assert json.loads(outcome.result or "null") == {"p": {"x": 1}, "at": "2024-01-01T00:00:00Z"}


async def test_arguments_are_rebuilt_and_the_context_injected(
    q: Queue, executor: Executor, progress: list[tuple[int, str]]
) -> None:
    seen: dict[str, Any] = {}

    @q.task(name="inspect")
    async def inspect_task(ctx: JobContext, when: datetime, n: int = 0) -> None:
        seen.update(ctx=ctx, when=when, n=n, attempt=ctx.attempt)
        ctx.set_progress({"half": True})

    job = claimed("inspect", "2024-01-01T00:00:00Z", attempt=2, n=4)
    outcome = await run(executor, job)
    assert outcome is not None
    assert outcome.kind == "succeeded"
    assert seen["when"] == datetime(2024, 1, 1, tzinfo=UTC)
    assert (seen["n"], seen["attempt"]) == (4, 2)
    assert seen["ctx"].job.id == job.id
    assert seen["ctx"].worker_id == "worker-1"
    assert progress == [(job.id, '{"half":true}')]


# -- control-flow signals ----------------------------------------------------------------------


async def test_retry_with_attempts_left(q: Queue, executor: Executor) -> None:
    @q.task(name="later")
    def later() -> None:
        raise Retry(delay=7, reason="rate limited")

    outcome = await run(executor, claimed("later", attempt=2, max_attempts=3))
    assert outcome is not None
    assert (outcome.kind, outcome.delay, outcome.error) == (
        "retry", 7.0, "retry requested: rate limited")


async def test_retry_on_the_last_attempt_is_dead(q: Queue, executor: Executor) -> None:
    @q.task(name="later")
    def later() -> None:
        raise Retry(delay=7)

    outcome = await run(executor, claimed("later", attempt=3, max_attempts=3))
    assert outcome is not None
    assert (outcome.kind, outcome.error) == ("dead", "retry requested")


@pytest.mark.parametrize("attempt", [1, 3])
async def test_snooze_never_consumes_the_attempt(
    q: Queue, executor: Executor, attempt: int
) -> None:
    @q.task(name="sleepy")
    async def sleepy() -> None:
        raise Snooze(30)

    outcome = await run(executor, claimed("sleepy", attempt=attempt, max_attempts=3))
    assert outcome is not None
    assert (outcome.kind, outcome.delay) == ("snooze", 30.0)


async def test_discard_is_dead_at_once(q: Queue, executor: Executor) -> None:
    @q.task(name="picky")
    def picky() -> None:
        raise Discard("bad input")

    outcome = await run(executor, claimed("picky", attempt=1, max_attempts=10))
    assert outcome is not None
    assert (outcome.kind, outcome.error) == ("dead", "discarded: bad input")


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_an_exception_with_attempts_left_retries_with_the_traceback(
    q: Queue, executor: Executor, kind: str
) -> None:
    if kind == "sync":
        @q.task(name="boom", retry_intervals=[5, 25])
        def boom() -> None:
            raise ValueError("bad value")
    else:
        @q.task(name="boom", retry_intervals=[5, 25])
        async def boom() -> None:
            raise ValueError("bad value")

    first = await run(executor, claimed("boom", attempt=1))
    second = await run(executor, claimed("boom", attempt=2))
    assert first is not None and second is not None
    assert (first.kind, first.delay, second.kind, second.delay) == ("retry", 5, "retry", 25)
    assert first.error is not None
    assert first.error.startswith("Traceback (most recent call last):")
    assert "in boom" in first.error
    assert first.error.endswith("ValueError: bad value")


async def test_an_exception_without_intervals_uses_jittered_backoff(
    q: Queue, executor: Executor
) -> None:
    @q.task(name="boom")
    def boom() -> None:
        raise RuntimeError("x")

    outcome = await run(executor, claimed("boom", attempt=2))
    assert outcome is not None
    assert outcome.kind == "retry"
    assert 2.0 <= outcome.delay <= 4.0


async def test_an_exception_on_the_last_attempt_is_dead_with_the_traceback(
    q: Queue, executor: Executor
) -> None:
    @q.task(name="boom")
    def boom() -> None:
        raise KeyError("missing")

    outcome = await run(executor, claimed("boom", attempt=3, max_attempts=3))
    assert outcome is not None
    assert outcome.kind == "dead"
    assert outcome.error is not None
    assert "Traceback" in outcome.error
    assert outcome.error.endswith("KeyError: 'missing'")


async def test_an_unknown_task_is_dead_with_a_clear_error(q: Queue, executor: Executor) -> None:
    @q.task(name="known.one")
    def known() -> None: ...

    outcome = await run(executor, claimed("not.registered", attempt=1, max_attempts=5))
    assert outcome is not None
    assert outcome.kind == "dead"
    assert outcome.error == ("unknown task 'not.registered': no task of that name is registered "
                             "in this worker (registered: known.one)")


async def test_arguments_that_no_longer_fit_the_task_are_dead(
    q: Queue, executor: Executor
) -> None:
    @q.task(name="changed")
    def changed(a: int) -> None: ...

    outcome = await run(executor, claimed("changed", 1, 2))
    assert outcome is not None
    assert outcome.kind == "dead"
    assert "cannot rebuild the arguments of task 'changed'" in (outcome.error or "")


async def test_an_unstorable_result_fails_the_attempt(q: Queue, executor: Executor) -> None:
    @q.task(name="weird")
    def weird() -> object:
        return object()

    outcome = await run(executor, claimed("weird", attempt=1))
    assert outcome is not None
    assert outcome.kind == "retry"
    assert "cannot be stored as JSON" in (outcome.error or "")


# -- timeouts ----------------------------------------------------------------------------------


async def test_async_timeout_cancels_the_task_and_retries_with_a_timeout_error(
    q: Queue, executor: Executor
) -> None:
    cancelled = asyncio.Event()

    @q.task(name="slow", retry_intervals=[1])
    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    started = time.monotonic()
    outcome = await run(executor, claimed("slow", attempt=1, timeout=0.1))
    assert time.monotonic() - started < 5
    assert cancelled.is_set()
    assert outcome is not None
    assert (outcome.kind, outcome.delay) == ("retry", 1)
    assert outcome.error == "TimeoutError: task 'slow' timed out after 0.1s"


async def test_sync_timeout_fails_the_attempt_and_tells_the_thread(
    q: Queue, executor: Executor
) -> None:
    told = threading.Event()

    @q.task(name="grind")
    def grind(ctx: JobContext) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ctx.cancel_requested:
            time.sleep(0.005)
        if ctx.cancel_requested:
            told.set()

    outcome = await run(executor, claimed("grind", attempt=3, max_attempts=3, timeout=0.1))
    assert outcome is not None
    assert outcome.kind == "dead"
    assert "timed out after 0.1s" in (outcome.error or "")
    assert await asyncio.to_thread(told.wait, 5)


async def test_a_task_finishing_within_its_timeout_succeeds(q: Queue, executor: Executor) -> None:
    @q.task(name="quick")
    async def quick() -> int:
        await asyncio.sleep(0.01)
        return 1

    outcome = await run(executor, claimed("quick", timeout=5))
    assert outcome is not None
    assert outcome.kind == "succeeded"


# -- being stopped -------------------------------------------------------------------------------


async def start(executor: Executor, job: ClaimedJob) -> Execution:
    execution = executor.prepare(job)
    execution.asyncio_task = asyncio.create_task(executor.run(execution))
    return execution


@pytest.mark.parametrize(("reason", "kind"), [("cancelled", "cancelled"),
                                              ("shutdown", "release"), ("lease_lost", None)])
async def test_stopping_an_async_attempt(
    q: Queue, executor: Executor, reason: str, kind: str | None
) -> None:
    running = asyncio.Event()

    @q.task(name="long")
    async def long() -> None:
        running.set()
        await asyncio.sleep(30)

    execution = await start(executor, claimed("long"))
    await asyncio.wait_for(running.wait(), 5)
    execution.stop(reason)  # type: ignore[arg-type]
    assert execution.asyncio_task is not None
    outcome = await asyncio.wait_for(execution.asyncio_task, 5)
    assert (outcome.kind if outcome else None) == kind
    assert execution.ctx.cancel_requested


async def test_a_cancelled_sync_attempt_sees_the_flag_and_ends_cancelled(
    q: Queue, executor: Executor
) -> None:
    running = threading.Event()

    @q.task(name="loop")
    def loop(ctx: JobContext) -> str:
        running.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ctx.cancel_requested:
            time.sleep(0.005)
        return "stopped"

    execution = await start(executor, claimed("loop"))
    await asyncio.to_thread(running.wait, 5)
    execution.stop("cancelled")
    assert execution.asyncio_task is not None
    outcome = await asyncio.wait_for(execution.asyncio_task, 5)
    assert outcome is not None
    assert (outcome.kind, outcome.error) == ("cancelled", "cancelled while running")


async def test_an_unrelated_cancellation_is_not_absorbed(q: Queue, executor: Executor) -> None:
    running = asyncio.Event()

    @q.task(name="long")
    async def long() -> None:
        running.set()
        await asyncio.sleep(30)

    execution = await start(executor, claimed("long"))
    await asyncio.wait_for(running.wait(), 5)
    assert execution.asyncio_task is not None
    execution.asyncio_task.cancel()  # the loop going down, not a stop()
    with pytest.raises(asyncio.CancelledError):
        await execution.asyncio_task


async def test_a_cancelled_error_the_task_raises_itself_is_a_failure(
    q: Queue, executor: Executor
) -> None:
    @q.task(name="victim")
    async def victim() -> None:
        raise asyncio.CancelledError()

    execution = await start(executor, claimed("victim", attempt=1))
    assert execution.asyncio_task is not None
    outcome = await asyncio.wait_for(execution.asyncio_task, 5)
    assert outcome is not None
    assert outcome.kind == "retry"
    assert "CancelledError" in (outcome.error or "")


# -- one log line per outcome, with its fields -------------------------------------------


async def test_every_outcome_logs_one_line_with_structured_fields(
    q: Queue, threads: DaemonThreadPool, caplog: pytest.LogCaptureFixture
) -> None:
    executor = Executor(tasks=q.tasks, worker_id="w", queries=for_schema("pgqueue"),
                        threads=threads, report_progress=lambda job, value: None,
                        connections=NoConnections(), log_succeeded=True)

    @q.task(name="ok")
    def ok() -> None:
        time.sleep(0.01)

    @q.task(name="boom")
    async def boom() -> None:
        raise ValueError("no")

    @q.task(name="nap")
    async def nap() -> None:
        raise Snooze(5)

    @q.task(name="gone")
    async def gone() -> None:
        raise Discard("enough")

    jobs = [claimed("ok"), claimed("boom"), claimed("nap"), claimed("gone"),
            claimed("boom", attempt=3, max_attempts=3), claimed("unknown")]
    with caplog.at_level(logging.DEBUG, "pgqueue.worker"):
        for job in jobs:
            await run(executor, job)
    records = [r for r in caplog.records if hasattr(r, "outcome")]
    assert [(r.task, r.outcome, r.levelname) for r in records] == [  # type: ignore[attr-defined]
        ("ok", "succeeded", "INFO"), ("boom", "failed", "WARNING"), ("nap", "snoozed", "INFO"),
        ("gone", "dead", "ERROR"), ("boom", "dead", "ERROR"), ("unknown", "dead", "ERROR")]
    for record, job in zip(records, jobs, strict=True):
        fields = record.__dict__
        assert (fields["job_id"], fields["queue"], fields["attempt"]) == (
            job.id, "default", job.attempt)
        assert isinstance(fields["duration_ms"], float)
    assert records[0].__dict__["duration_ms"] >= 10
    assert records[1].__dict__["retry_in_s"] > 0


@pytest.mark.parametrize(("reason", "outcome"), [("cancelled", "cancelled"),
                                                 ("shutdown", "released")])
async def test_a_stopped_attempt_logs_its_outcome(
    q: Queue, executor: Executor, caplog: pytest.LogCaptureFixture, reason: str, outcome: str
) -> None:
    @q.task(name="long")
    async def long() -> None:
        await asyncio.sleep(30)

    execution = executor.prepare(claimed("long"))
    task = asyncio.create_task(executor.run(execution))
    execution.asyncio_task = task
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.INFO, "pgqueue.worker"):
        execution.stop(reason)  # type: ignore[arg-type]
        await task
    (record,) = [r for r in caplog.records if hasattr(r, "outcome")]
    assert (record.outcome, record.levelname) == (outcome, "INFO")
    assert record.__dict__["duration_ms"] >= 40
