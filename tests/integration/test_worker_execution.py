"""The worker runs jobs: exactly once, within its concurrency, in priority order, and
records what happened (success, retries, snooze, discard, timeouts, progress).

Every test runs an in-process worker against its own database; burst workers drain what
is ready and return.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from pgqueue import Discard, JobContext, Queue, Retry, Snooze
from tests._polling import async_wait_until
from tests.integration._worker_helpers import (
    aexecute,
    arow,
    background_worker,
    run_burst,
    until_sleeping,
)

# -- exactly once, concurrency, order ------------------------------------------------------


async def test_twenty_thousand_noop_jobs_each_run_exactly_once(aq: Queue, dsn: str) -> None:
    runs: Counter[int] = Counter()

    @aq.task(name="noop")
    async def noop(n: int, ctx: JobContext) -> None:
        runs[ctx.job.id] += 1

    jobs = await noop.enqueue_many_async([(n,) for n in range(20_000)])
    ids = {job.id for job in jobs}
    assert len(ids) == 20_000

    started = time.monotonic()
    await run_burst(aq, concurrency=8)
    elapsed = time.monotonic() - started

    assert set(runs) == ids
    assert [job_id for job_id, count in runs.items() if count != 1] == []
    stats = await aexecute(
        dsn,
        "SELECT count(*) AS total, count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1"
        " AND worker_id IS NOT NULL AND finished_at IS NOT NULL) AS clean FROM pgqueue.jobs",
    )
    assert stats == [{"total": 20_000, "clean": 20_000}]
    assert await aexecute(dsn, "SELECT id FROM pgqueue.dead_jobs") == []
    assert elapsed < 60, f"20,000 no-op jobs took {elapsed:.1f}s"


async def test_arguments_reach_the_task_exactly_as_enqueued(aq: Queue) -> None:
    """The claim connection decodes jsonb with orjson, which would turn integers beyond
    64 bits into floats; pgqueue's loader must hand them over exactly."""
    seen: list[tuple[Any, ...]] = []

    @aq.task(name="echo")
    async def echo(big: int, plain, text: str, ctx: JobContext) -> None:  # type: ignore[no-untyped-def]
        seen.append((big, plain, text, ctx.job.meta))

    values = (2**70, [-(2**64) - 1, 0.1, 2.5, {"k": None}], "digits 12345678901234567890")
    await echo.using(meta={"n": 10**30}).enqueue_async(*values)
    await run_burst(aq, concurrency=2)
    assert seen == [(*values, {"n": 10**30})]
    assert type(seen[0][1][0]) is int


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_concurrency_is_never_exceeded(aq: Queue, kind: str) -> None:
    lock = threading.Lock()
    active = 0
    highest = 0
    done = 0

    def enter() -> None:
        nonlocal active, highest
        with lock:
            active += 1
            highest = max(highest, active)

    def leave() -> None:
        nonlocal active, done
        with lock:
            active -= 1
            done += 1

    if kind == "async":
        @aq.task(name="busy")
        async def busy(n: int) -> None:
            enter()
            await asyncio.sleep(0.01)
            leave()
    else:
        @aq.task(name="busy")
        def busy(n: int) -> None:
            enter()
            time.sleep(0.01)
            leave()

    await busy.enqueue_many_async([(n,) for n in range(120)])
    await run_burst(aq, concurrency=4)
    assert done == 120
    assert highest <= 4
    assert highest >= 2, "jobs never overlapped: the worker ran them one at a time"


async def test_higher_priority_runs_first_then_oldest(aq: Queue) -> None:
    order: list[str] = []

    @aq.task(name="record")
    def record(label: str) -> None:
        order.append(label)

    for label, priority in [("p0-a", 0), ("p5-a", 5), ("m1", -1), ("p10", 10), ("p5-b", 5),
                            ("p0-b", 0)]:
        await record.using(priority=priority).enqueue_async(label)
    await run_burst(aq, concurrency=1)
    assert order == ["p10", "p5-a", "p5-b", "p0-a", "p0-b", "m1"]


async def test_earlier_run_at_runs_first_within_a_priority(aq: Queue) -> None:
    order: list[str] = []

    @aq.task(name="record")
    def record(label: str) -> None:
        order.append(label)

    now = datetime.now(UTC)
    # Ids (enqueue order) differ from run_at order: run_at decides.
    await record.using(run_at=now - timedelta(seconds=10)).enqueue_async("middle")
    await record.using(run_at=now - timedelta(seconds=20)).enqueue_async("oldest")
    await record.using(run_at=now - timedelta(seconds=5)).enqueue_async("latest")
    await run_burst(aq, concurrency=1)
    assert order == ["oldest", "middle", "latest"]


async def test_burst_worker_leaves_jobs_due_later(aq: Queue, dsn: str) -> None:
    ran: list[int] = []

    @aq.task(name="later")
    def later(n: int) -> None:
        ran.append(n)

    future = await later.using(run_in=3600).enqueue_async(1)
    ready = await later.enqueue_async(2)
    await run_burst(aq)
    assert ran == [2]
    stored = await arow(dsn, future.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"], stored["started_at"]) == ("queued", 0, None)
    assert (await arow(dsn, ready.id) or {})["status"] == "succeeded"


async def test_job_is_not_claimed_before_its_run_at(aq: Queue, dsn: str) -> None:
    ran_at: dict[int, datetime] = {}

    @aq.task(name="stamp")
    def stamp(ctx: JobContext) -> None:
        ran_at[ctx.job.id] = datetime.now(UTC)

    # A scheduled insert sends no NOTIFY (only ready jobs do), so an idle worker finds it
    # by polling: poll often here so the test is quick.
    async with background_worker(aq, poll_interval=0.3):
        job = await stamp.using(run_in=1.5).enqueue_async()
        assert job.status == "scheduled"
        await async_wait_until(lambda: job.id in ran_at, timeout=10)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["status"] == "succeeded"
    assert stored["started_at"] >= stored["run_at"]
    assert ran_at[job.id] >= stored["run_at"]


async def test_idle_worker_is_woken_by_notify_not_by_polling(aq: Queue) -> None:
    ran = asyncio.Event()

    @aq.task(name="ping")
    async def ping() -> None:
        ran.set()

    async with background_worker(aq, poll_interval=60) as worker:
        await until_sleeping(worker)  # only a wake-up can start a job now: it polls at 60 s
        started = time.monotonic()
        await ping.enqueue_async()
        await asyncio.wait_for(ran.wait(), 10)
        assert time.monotonic() - started < 5


# -- failures, retries and control-flow signals --------------------------------------------


async def test_failures_retry_then_die_with_the_full_traceback(aq: Queue, dsn: str) -> None:
    attempts_seen: list[int] = []

    @aq.task(name="flaky", max_attempts=3, retry_intervals=[0])
    def always_fails(ctx: JobContext) -> None:
        attempts_seen.append(ctx.attempt)
        raise ValueError(f"boom on attempt {ctx.attempt}")

    job = await always_fails.enqueue_async()
    await run_burst(aq)
    assert attempts_seen == [1, 2, 3]
    assert await arow(dsn, job.id) is None
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert dead["attempts"] == 3
    assert dead["error"].startswith("Traceback (most recent call last):")
    assert "in always_fails" in dead["error"]
    assert dead["error"].rstrip().endswith("ValueError: boom on attempt 3")
    assert dead["failed_at"] is not None
    fresh = await aq.get_job_async(job.id)
    assert fresh is not None
    assert fresh.status == "dead"


async def test_failure_with_attempts_left_is_retrying_with_backoff(aq: Queue, dsn: str) -> None:
    @aq.task(name="fails_once", max_attempts=3)
    def fails() -> None:
        raise RuntimeError("transient")

    job = await fails.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["status"] == "queued"
    assert stored["attempts"] == 1
    assert stored["worker_id"] is None
    assert "RuntimeError: transient" in stored["last_error"]
    delay = (stored["run_at"] - stored["started_at"]).total_seconds()
    assert 0.9 <= delay <= 3.0  # first retry: 1-2 s of jittered backoff
    fresh = await aq.get_job_async(job.id)
    assert fresh is not None
    assert fresh.status == "retrying"


async def test_retry_uses_the_given_delay_and_consumes_the_attempt(aq: Queue, dsn: str) -> None:
    @aq.task(name="later")
    def later() -> None:
        raise Retry(delay=120, reason="rate limited")

    job = await later.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    assert stored["last_error"] == "retry requested: rate limited"
    delay = (stored["run_at"] - stored["started_at"]).total_seconds()
    assert 119 <= delay <= 125
    assert (await aq.get_job_async(job.id)).status == "retrying"  # type: ignore[union-attr]


async def test_retry_on_the_last_attempt_sends_the_job_to_dead_jobs(aq: Queue, dsn: str) -> None:
    @aq.task(name="stubborn", max_attempts=1)
    def stubborn() -> None:
        raise Retry(delay=5)

    job = await stubborn.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert "retry requested" in dead["error"]


async def test_snooze_gives_the_attempt_back(aq: Queue, dsn: str) -> None:
    calls: list[int] = []

    @aq.task(name="sleepy", retry_intervals=[0])
    def sleepy(ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        raise Snooze(300)

    job = await sleepy.enqueue_async()
    await run_burst(aq)
    assert calls == [1, 2]
    stored = await arow(dsn, job.id)
    assert stored is not None
    # Attempt 1 failed (consumed), attempt 2 snoozed (given back): attempts is 1 again.
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    delay = (stored["run_at"] - stored["started_at"]).total_seconds()
    assert 299 <= delay <= 305


async def test_snooze_on_the_first_attempt_makes_the_job_scheduled(aq: Queue, dsn: str) -> None:
    @aq.task(name="sleepy")
    def sleepy() -> None:
        raise Snooze(60)

    job = await sleepy.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"], stored["worker_id"]) == ("queued", 0, None)
    assert (await aq.get_job_async(job.id)).status == "scheduled"  # type: ignore[union-attr]


async def test_discard_sends_the_job_to_dead_jobs_at_once(aq: Queue, dsn: str) -> None:
    @aq.task(name="picky", max_attempts=5)
    async def picky() -> None:
        raise Discard("invalid customer")

    job = await picky.enqueue_async()
    await run_burst(aq)
    assert await arow(dsn, job.id) is None
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert dead["attempts"] == 1
    assert "invalid customer" in dead["error"]


async def test_unknown_task_goes_to_dead_jobs_with_a_clear_error(aq: Queue, dsn: str) -> None:
    @aq.task(name="known")
    def known() -> None:
        pass

    job = await asyncio.to_thread(aq.enqueue_by_name, "billing.charge", args=[1])
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert dead["attempts"] == 1
    assert "unknown task 'billing.charge'" in dead["error"]
    assert "known" in dead["error"]  # lists what this worker does know


async def test_async_timeout_fails_the_attempt_with_a_timeout_error(aq: Queue, dsn: str) -> None:
    cancelled = asyncio.Event()

    @aq.task(name="slow", timeout=0.2, retry_intervals=[60])
    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = await slow.enqueue_async()
    started = time.monotonic()
    await run_burst(aq)
    assert time.monotonic() - started < 10
    assert cancelled.is_set()
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    assert "timed out" in stored["last_error"]
    assert "TimeoutError" in stored["last_error"]


async def test_async_timeout_on_the_last_attempt_is_dead_with_timeout_error(
    aq: Queue, dsn: str
) -> None:
    @aq.task(name="slow", timeout=0.1, max_attempts=2, retry_intervals=[0])
    async def slow() -> None:
        await asyncio.sleep(30)

    job = await slow.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert dead["attempts"] == 2
    assert "timed out" in dead["error"]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_task_raising_its_own_timeout_error_is_not_called_a_timeout(
    aq: Queue, dsn: str, kind: str
) -> None:
    if kind == "sync":
        @aq.task(name="remote", timeout=30, retry_intervals=[60])
        def remote() -> None:
            raise TimeoutError("the payment API did not answer")
    else:
        @aq.task(name="remote", timeout=30, retry_intervals=[60])
        async def remote() -> None:
            raise TimeoutError("the payment API did not answer")

    job = await remote.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert "TimeoutError: the payment API did not answer" in stored["last_error"]
    assert "timed out after" not in stored["last_error"]


async def test_sync_task_past_its_timeout_fails_the_attempt(aq: Queue, dsn: str) -> None:
    saw_cancel = threading.Event()

    @aq.task(name="grind", timeout=0.3, retry_intervals=[60])
    def grind(ctx: JobContext) -> str:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ctx.cancel_requested:
                saw_cancel.set()
                return "too late"
            time.sleep(0.01)
        return "finished"

    job = await grind.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    assert "timed out" in stored["last_error"]
    assert stored["result"] is None
    await asyncio.to_thread(saw_cancel.wait, 5)
    assert saw_cancel.is_set(), "the sync task was never told it ran out of time"


async def test_task_returning_an_unstorable_value_fails_the_attempt(aq: Queue, dsn: str) -> None:
    @aq.task(name="weird", max_attempts=1)
    def weird() -> object:
        return object()

    job = await weird.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert "cannot be stored as JSON" in dead["error"]


# -- results, context ------------------------------------------------------------------------


async def test_results_are_stored_as_json(aq: Queue, dsn: str) -> None:
    @aq.task(name="compute")
    async def compute(a: int, b: int) -> dict[str, object]:
        return {"sum": a + b, "when": datetime(2024, 1, 2, tzinfo=UTC)}

    job = await compute.enqueue_async(2, 3)
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["result"] == {"sum": 5, "when": "2024-01-02T00:00:00Z"}
    fresh = await aq.get_job_async(job.id)
    assert fresh is not None
    assert fresh.result == stored["result"]


async def test_context_knows_its_job_and_attempt(aq: Queue) -> None:
    seen: list[tuple[int, int, str, int, dict[str, object]]] = []

    @aq.task(name="introspect", retry_intervals=[0])
    def introspect(x: int, ctx: JobContext) -> None:
        seen.append((ctx.job.id, ctx.attempt, ctx.job.task, x, ctx.job.meta))
        if ctx.attempt == 1:
            raise RuntimeError("again")

    job = await introspect.using(meta={"k": "v"}).enqueue_async(x=5)
    await run_burst(aq)
    assert seen == [(job.id, 1, "introspect", 5, {"k": "v"}),
                    (job.id, 2, "introspect", 5, {"k": "v"})]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_context_may_be_any_parameter(aq: Queue, dsn: str, kind: str) -> None:
    if kind == "sync":
        @aq.task(name="first")
        def first(ctx: JobContext, x: int, y: int = 10) -> list[int]:
            return [ctx.attempt, x, y]
    else:
        @aq.task(name="first")
        async def first(ctx: JobContext, x: int, y: int = 10) -> list[int]:
            return [ctx.attempt, x, y]

    a = await first.enqueue_async(1)
    b = await first.enqueue_async(2, y=3)
    c = await first.enqueue_async(x=4, y=5)
    await run_burst(aq)
    results = [(await arow(dsn, job.id) or {}).get("result") for job in (a, b, c)]
    assert results == [[1, 1, 10], [1, 2, 3], [1, 4, 5]]


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_set_progress_lands_in_meta(aq: Queue, dsn: str, kind: str) -> None:
    if kind == "sync":
        @aq.task(name="progress")
        def work(ctx: JobContext) -> str:
            for step in range(1, 4):
                ctx.set_progress({"step": step, "of": 3})
            return "done"
    else:
        @aq.task(name="progress")
        async def work(ctx: JobContext) -> str:
            for step in range(1, 4):
                ctx.set_progress({"step": step, "of": 3})
                await asyncio.sleep(0.01)
            return "done"

    job = await work.using(meta={"source": "test"}).enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["status"] == "succeeded"
    assert stored["result"] == "done"
    assert stored["meta"] == {"source": "test", "progress": {"step": 3, "of": 3}}


async def test_progress_is_visible_while_the_job_runs(aq: Queue, dsn: str) -> None:
    release = asyncio.Event()

    @aq.task(name="long")
    async def long(ctx: JobContext) -> None:
        ctx.set_progress(42)
        await release.wait()

    job = await long.enqueue_async()
    async with background_worker(aq):
        stored = await async_wait_until(
            lambda: _with_progress(dsn, job.id), timeout=10,
        )
        assert stored is not None
        assert stored["status"] == "running"
        assert stored["meta"]["progress"] == 42
        release.set()
        await async_wait_until(lambda: _status_is(dsn, job.id, "succeeded"), timeout=10)
    final = await arow(dsn, job.id)
    assert final is not None
    assert final["meta"] == {"progress": 42}


async def _with_progress(dsn: str, job_id: int) -> dict[str, Any] | None:
    stored = await arow(dsn, job_id)
    return stored if stored and "progress" in stored["meta"] else None


async def _status_is(dsn: str, job_id: int, status: str) -> bool:
    stored = await arow(dsn, job_id)
    return stored is not None and stored["status"] == status


# -- ctx.transaction(): the task's writes and its completion commit together --------------


@pytest.fixture
async def side_table(dsn: str) -> None:
    await aexecute(dsn, "CREATE TABLE side_effects (job_id bigint, note text)")


@pytest.mark.usefixtures("side_table")
async def test_sync_transaction_commits_writes_and_completion_together(aq: Queue, dsn: str) -> None:
    @aq.task(name="write")
    def write(note: str, ctx: JobContext) -> str:
        with ctx.transaction() as conn:
            conn.execute("INSERT INTO side_effects VALUES (%s, %s)", (ctx.job.id, note))
        return note.upper()

    job = await write.enqueue_async("hello")
    await run_burst(aq)
    assert await aexecute(dsn, "SELECT * FROM side_effects") == [
        {"job_id": job.id, "note": "hello"}
    ]
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["result"], stored["attempts"]) == ("succeeded", "HELLO", 1)
    assert stored["finished_at"] is not None


@pytest.mark.usefixtures("side_table")
async def test_async_transaction_commits_writes_and_completion_together(
    aq: Queue, dsn: str
) -> None:
    @aq.task(name="write")
    async def write(note: str, ctx: JobContext) -> str:
        async with ctx.transaction() as conn:
            await conn.execute("INSERT INTO side_effects VALUES (%s, %s)", (ctx.job.id, note))
        return note.upper()

    jobs = [await write.enqueue_async(f"n{i}") for i in range(10)]
    await run_burst(aq, concurrency=8)
    rows = await aexecute(dsn, "SELECT job_id, note FROM side_effects ORDER BY job_id")
    assert rows == [{"job_id": job.id, "note": f"n{i}"} for i, job in enumerate(jobs)]
    for i, job in enumerate(jobs):
        stored = await arow(dsn, job.id)
        assert stored is not None
        assert (stored["status"], stored["result"]) == ("succeeded", f"N{i}")


@pytest.mark.usefixtures("side_table")
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_transaction_rolls_back_writes_and_completion_when_the_task_raises(
    aq: Queue, dsn: str, kind: str
) -> None:
    if kind == "sync":
        @aq.task(name="write", retry_intervals=[60])
        def write(ctx: JobContext) -> None:
            with ctx.transaction() as conn:
                conn.execute("INSERT INTO side_effects VALUES (%s, 'x')", (ctx.job.id,))
                raise RuntimeError("failed half-way")
    else:
        @aq.task(name="write", retry_intervals=[60])
        async def write(ctx: JobContext) -> None:
            async with ctx.transaction() as conn:
                await conn.execute("INSERT INTO side_effects VALUES (%s, 'x')", (ctx.job.id,))
                raise RuntimeError("failed half-way")

    job = await write.enqueue_async()
    await run_burst(aq)
    assert await aexecute(dsn, "SELECT * FROM side_effects") == []
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("queued", 1)
    assert "RuntimeError: failed half-way" in stored["last_error"]
    assert stored["finished_at"] is None


@pytest.mark.usefixtures("side_table")
async def test_work_after_the_transaction_keeps_the_result(aq: Queue, dsn: str) -> None:
    """A task that commits with ctx.transaction() and then keeps working for more than a
    heartbeat interval still ends succeeded with its result (it did not lose its lease)."""

    @aq.task(name="write_then_think")
    async def write_then_think(ctx: JobContext) -> str:
        async with ctx.transaction() as conn:
            await conn.execute("INSERT INTO side_effects VALUES (%s, 'x')", (ctx.job.id,))
        await asyncio.sleep(2.5)  # lease 3 s: heartbeats every 1 s meanwhile
        return "kept"

    job = await write_then_think.enqueue_async()
    await run_burst(aq, lease=3)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["result"]) == ("succeeded", "kept")
    assert len(await aexecute(dsn, "SELECT * FROM side_effects")) == 1


# -- cancellation --------------------------------------------------------------------------


async def test_cancelling_a_queued_job_cancels_it_at_once(aq: Queue, dsn: str) -> None:
    ran: list[int] = []

    @aq.task(name="never")
    def never() -> None:
        ran.append(1)

    job = await never.enqueue_async()
    await asyncio.to_thread(job.cancel)
    assert job.status == "cancelled"
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["status"] == "cancelled"
    assert stored["finished_at"] is not None
    await run_burst(aq)
    assert ran == []
    assert (await arow(dsn, job.id) or {})["status"] == "cancelled"


async def test_cancelling_a_running_async_job_cancels_it_within_a_heartbeat(
    aq: Queue, dsn: str
) -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    @aq.task(name="long")
    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job = await long.enqueue_async()
    async with background_worker(aq, lease=3):
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.to_thread(job.cancel)
        assert job.status == "running"
        assert job.cancel_requested is True
        asked = time.monotonic()
        await async_wait_until(lambda: _status_is(dsn, job.id, "cancelled"), timeout=10)
        # One heartbeat interval is lease / 3 = 1 s; allow for the write and scheduling.
        assert time.monotonic() - asked < 2.5
    assert cancelled.is_set()
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["finished_at"] is not None
    assert stored["lease_expires_at"] is None


async def test_cancelling_a_running_sync_job_sets_cancel_requested(aq: Queue, dsn: str) -> None:
    started = threading.Event()
    noticed: list[float] = []

    @aq.task(name="loop")
    def loop(ctx: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ctx.cancel_requested:
                noticed.append(time.monotonic())
                return "stopped early"
            time.sleep(0.01)
        return "ran to the end"

    job = await loop.enqueue_async()
    async with background_worker(aq, lease=3):
        await asyncio.to_thread(started.wait, 10)
        asked = time.monotonic()
        await asyncio.to_thread(job.cancel)
        await async_wait_until(lambda: _status_is(dsn, job.id, "cancelled"), timeout=10)
    assert len(noticed) == 1
    assert noticed[0] - asked < 2.5
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert stored["status"] == "cancelled"


async def test_a_cancelled_job_that_then_fails_ends_cancelled_not_retried(
    aq: Queue, dsn: str
) -> None:
    """Cancellation requested, then the attempt fails before the worker noticed: the job
    must not be retried (the contract: it ends cancelled unless it had finished)."""
    started = threading.Event()
    go = threading.Event()

    @aq.task(name="doomed", retry_intervals=[0])
    def doomed() -> None:
        started.set()
        go.wait(10)
        raise RuntimeError("failed after the cancel request")

    job = await doomed.enqueue_async()
    async with background_worker(aq, lease=30):  # next heartbeat only after 10 s
        await asyncio.to_thread(started.wait, 10)
        await asyncio.to_thread(job.cancel)
        go.set()
        stored = await async_wait_until(
            lambda: _finished_or_requeued(dsn, job.id), timeout=10,
        )
    assert stored is not None
    assert stored["status"] == "cancelled"
    assert stored["attempts"] == 1


async def _finished_or_requeued(dsn: str, job_id: int) -> dict[str, Any] | None:
    stored = await arow(dsn, job_id)
    if stored is None:
        return {"status": "dead"}
    if stored["status"] in ("succeeded", "cancelled") or stored["attempts"] > 1:
        return stored
    if stored["status"] == "queued" and stored["attempts"] >= 1:
        return stored
    return None


async def test_nul_characters_in_a_result_error_or_progress_do_not_stop_the_worker(
    aq: Queue, dsn: str
) -> None:
    """jsonb and text columns refuse NUL: one such job must fail alone, clearly, and
    neither crash the worker nor strand the other jobs of its completion batch."""

    @aq.task(name="nul_result", max_attempts=1)
    def nul_result() -> str:
        return "a\x00b"

    @aq.task(name="nul_error", max_attempts=1)
    def nul_error() -> None:
        raise ValueError("bad \x00 byte")

    @aq.task(name="nul_progress", max_attempts=1)
    async def nul_progress(ctx: JobContext) -> None:
        ctx.set_progress("half\x00way")

    @aq.task(name="fine")
    def fine() -> int:
        return 1

    bad_result = await nul_result.enqueue_async()
    bad_error = await nul_error.enqueue_async()
    bad_progress = await nul_progress.enqueue_async()
    good = [await fine.enqueue_async() for _ in range(5)]
    await run_burst(aq)  # returns 0: the worker survived

    dead = await arow(dsn, bad_result.id, "dead_jobs")
    assert dead is not None
    assert "cannot be stored as JSON" in dead["error"]
    assert "NUL" in dead["error"]
    dead = await arow(dsn, bad_error.id, "dead_jobs")
    assert dead is not None
    assert dead["error"].endswith("ValueError: bad \\x00 byte")
    dead = await arow(dsn, bad_progress.id, "dead_jobs")
    assert dead is not None
    assert "NUL" in dead["error"]
    for job in good:
        assert (await arow(dsn, job.id) or {}).get("status") == "succeeded"


async def test_a_job_inserted_with_plain_sql_wakes_an_idle_worker(aq: Queue, dsn: str) -> None:
    ran = asyncio.Event()
    seen: list[tuple[object, ...]] = []

    @aq.task(name="sql.made")
    async def made(a: int, b: str = "default") -> None:
        seen.append((a, b))
        ran.set()

    async with background_worker(aq, poll_interval=60) as worker:
        await until_sleeping(worker)
        await aexecute(dsn, "INSERT INTO pgqueue.jobs (task, args, kwargs) "
                            "VALUES ('sql.made', '[1]', '{\"b\": \"x\"}')")
        await asyncio.wait_for(ran.wait(), 5)
    assert seen == [(1, "x")]


async def test_a_task_raising_cancelled_error_itself_fails_the_attempt(
    aq: Queue, dsn: str
) -> None:
    """Awaiting a future cancelled elsewhere raises CancelledError in a task nobody
    cancelled: that is a failure to record, not a job to leave running forever."""

    @aq.task(name="victim", retry_intervals=[60])
    async def victim() -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future

    job = await victim.enqueue_async()
    await run_burst(aq)
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"], stored["worker_id"]) == ("queued", 1, None)
    assert "CancelledError" in stored["last_error"]


@pytest.mark.usefixtures("side_table")
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_task_that_lost_its_lease_cannot_commit_through_its_transaction(
    aq: Queue, dsn: str, kind: str
) -> None:
    from pgqueue import LeaseLost

    started = threading.Event()
    go = threading.Event()
    raised: list[BaseException] = []

    if kind == "sync":
        @aq.task(name="late")
        def late(ctx: JobContext) -> None:
            started.set()
            go.wait(10)
            try:
                with ctx.transaction() as conn:
                    conn.execute("INSERT INTO side_effects VALUES (%s, 'late')", (ctx.job.id,))
            except LeaseLost as exc:
                raised.append(exc)
                raise
    else:
        @aq.task(name="late")
        async def late(ctx: JobContext) -> None:
            started.set()
            await asyncio.to_thread(go.wait, 10)
            try:
                async with ctx.transaction() as conn:
                    await conn.execute("INSERT INTO side_effects VALUES (%s, 'late')",
                                       (ctx.job.id,))
            except LeaseLost as exc:
                raised.append(exc)
                raise

    job = await late.enqueue_async()
    async with background_worker(aq, lease=30, rescue_interval=3600) as worker:
        await asyncio.to_thread(started.wait, 10)
        # The job moved on (as after a lost lease) before the task opens its transaction.
        await aexecute(dsn, "UPDATE pgqueue.jobs SET worker_id = 'other', attempts = 2, "
                            "lease_token = lease_token + 1 WHERE id = %s", (job.id,))
        go.set()
        await async_wait_until(lambda: not worker.executions, timeout=10)
    assert len(raised) == 1
    assert await aexecute(dsn, "SELECT * FROM side_effects") == []
    stored = await arow(dsn, job.id)
    assert stored is not None
    # the other holder's row is untouched: our outcome was dropped, not forced
    assert (stored["status"], stored["worker_id"], stored["attempts"]) == ("running", "other", 2)


async def test_two_workers_share_the_jobs_and_run_each_exactly_once(aq: Queue, dsn: str) -> None:
    runs: Counter[int] = Counter()
    by_worker: Counter[str] = Counter()

    @aq.task(name="noop")
    async def noop(ctx: JobContext) -> None:
        runs[ctx.job.id] += 1
        by_worker[ctx.worker_id] += 1
        await asyncio.sleep(0)

    jobs = await noop.enqueue_many_async([() for _ in range(3000)])
    await asyncio.gather(run_burst(aq, concurrency=4), run_burst(aq, concurrency=4))
    assert set(runs) == {job.id for job in jobs}
    assert max(runs.values()) == 1
    assert len(by_worker) == 2, f"one worker did everything: {by_worker}"
    done = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs "
                               "WHERE status = 'succeeded' AND attempts = 1")
    assert done == [{"n": 3000}]


class Order(BaseModel):
    id: uuid.UUID
    placed_at: datetime
    lines: list[str]


async def test_annotated_arguments_are_rebuilt_to_their_types_in_the_worker(
    aq: Queue, dsn: str
) -> None:
    received: list[tuple[object, ...]] = []

    @aq.task(name="ship")
    def ship(order: Order, ref: uuid.UUID, when: datetime, count: int = 1) -> str:
        received.append((order, ref, when, count))
        return order.lines[0]

    order = Order(id=uuid.uuid4(), placed_at=datetime(2024, 3, 4, 5, 6, tzinfo=UTC),
                  lines=["book"])
    ref = uuid.uuid4()
    # The JSON forms of annotated values, which pydantic validates: the runtime takes
    # them, type checkers (which see the annotations) do not.
    job = await ship.enqueue_async({"id": str(order.id),  # type: ignore[arg-type]
                                    "placed_at": "2024-03-04T05:06:00Z", "lines": ["book"]},
                                   ref, when=order.placed_at, count="2")  # type: ignore[arg-type]
    await run_burst(aq)
    assert received == [(order, ref, order.placed_at, 2)]
    assert isinstance(received[0][0], Order)
    assert (await arow(dsn, job.id) or {}).get("result") == "book"
