"""Worker start-up and shutdown, in process (signals themselves are the e2e suite's).

A stop lets running jobs finish for up to ``shutdown_timeout``, then releases the rest to
``queued`` at once with the attempt given back, removes the worker row and returns 0.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import psycopg
import pytest

from pgqueue import DatabaseUnavailable, JobContext, Queue, SchemaOutOfDate
from pgqueue.worker import BackgroundWorker, Worker, WorkerSettings, timings
from tests._polling import async_wait_until
from tests.integration._worker_helpers import (
    aexecute,
    arow,
    background_worker,
    row,
    run_burst,
    worker_settings,
)


async def start(queue: Queue, **settings: object) -> tuple[Worker, asyncio.Task[int]]:
    worker = Worker(queue, worker_settings(**settings))
    task = asyncio.create_task(worker.run())
    await async_wait_until(lambda: task.done() or worker.ready.is_set(), timeout=15)
    assert not task.done()
    return worker, task


async def test_stop_lets_running_jobs_finish_within_the_shutdown_timeout(
    aq: Queue, dsn: str
) -> None:
    started = asyncio.Event()

    @aq.task(name="short")
    async def short() -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "finished"

    job = await short.enqueue_async()
    worker, task = await start(aq, shutdown_timeout=10)
    await asyncio.wait_for(started.wait(), 10)
    worker.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["result"]) == ("succeeded", "finished")
    assert await aexecute(dsn, "SELECT id FROM pgqueue.workers") == []


async def test_stop_claims_nothing_new(aq: Queue, dsn: str) -> None:
    started = asyncio.Event()

    @aq.task(name="short")
    async def short() -> None:
        started.set()
        await asyncio.sleep(0.3)

    first = await short.enqueue_async()
    worker, task = await start(aq, concurrency=1, shutdown_timeout=10)
    await asyncio.wait_for(started.wait(), 10)
    second = await short.enqueue_async()
    worker.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert (await arow(dsn, first.id) or {})["status"] == "succeeded"
    stored = await arow(dsn, second.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("queued", 0)


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_jobs_still_running_at_the_deadline_are_released_with_the_attempt_back(
    aq: Queue, dsn: str, kind: str
) -> None:
    started = threading.Event()

    if kind == "async":
        @aq.task(name="stuck")
        async def stuck() -> None:
            started.set()
            await asyncio.sleep(60)
    else:
        @aq.task(name="stuck")
        def stuck(ctx: JobContext) -> None:
            started.set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ctx.cancel_requested:
                time.sleep(0.01)

    job = await stuck.enqueue_async()
    worker, task = await start(aq, shutdown_timeout=0.3)
    await asyncio.to_thread(started.wait, 10)
    stopping = time.monotonic()
    worker.request_stop()
    assert await asyncio.wait_for(task, 20) == 0
    assert time.monotonic() - stopping < 5
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"], stored["worker_id"]) == ("queued", 0, None)
    assert stored["lease_expires_at"] is None
    ready = await aexecute(dsn, "SELECT run_at <= now() AS ready FROM pgqueue.jobs")
    assert ready == [{"ready": True}]
    assert await aexecute(dsn, "SELECT id FROM pgqueue.workers") == []


async def test_a_released_job_runs_again_with_its_first_attempt(aq: Queue, dsn: str) -> None:
    seen: list[int] = []
    block = True

    @aq.task(name="stuck")
    async def stuck(ctx: JobContext) -> None:
        seen.append(ctx.attempt)
        if block:
            await asyncio.sleep(60)

    job = await stuck.enqueue_async()
    worker, task = await start(aq, shutdown_timeout=0.2)
    await async_wait_until(lambda: seen == [1], timeout=10)
    worker.request_stop()
    await asyncio.wait_for(task, 20)
    block = False
    await run_burst(aq)
    assert seen == [1, 1]
    stored = await arow(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["attempts"]) == ("succeeded", 1)


async def test_a_worker_refuses_an_unmigrated_database(empty_dsn: str) -> None:
    q = Queue(dsn=empty_dsn)
    try:
        with pytest.raises(SchemaOutOfDate, match="pgq migrate"):
            await run_burst(q)
    finally:
        await q.close_async()


async def test_an_unreachable_database_fails_after_the_connect_timeout() -> None:
    q = Queue(dsn="postgresql://nobody@127.0.0.1:1/none")
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseUnavailable, match="within 1s"):
            await run_burst(q, connect_timeout=1)
    finally:
        await q.close_async()
    assert time.monotonic() - started < 10


def test_run_worker_from_sync_code(dsn: str) -> None:
    q = Queue(dsn=dsn)
    ran: list[int] = []

    @q.task(name="t")
    def task(n: int) -> None:
        ran.append(n)

    try:
        task.enqueue_many([(n,) for n in range(10)])
        assert q.run_worker(burst=True, install_signal_handlers=False, concurrency=2) == 0
        assert sorted(ran) == list(range(10))
        assert q.workers() == []
    finally:
        q.close()


def test_run_worker_in_a_thread_runs_without_signal_handlers(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 18.9: signal handlers can only be installed in the main thread; run_worker()
    # called elsewhere failed with "set_wakeup_fd only works in main thread".
    q = Queue(dsn=dsn)
    ran: list[int] = []
    status: list[int | BaseException] = []

    @q.task(name="t")
    def task(n: int) -> None:
        ran.append(n)

    def work() -> None:
        try:
            status.append(q.run_worker(burst=True, concurrency=2))
        except BaseException as exc:
            status.append(exc)

    try:
        task.enqueue_many([(n,) for n in range(5)])
        with caplog.at_level(logging.INFO, logger="pgqueue.worker"):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join(60)
        assert status == [0]
        assert sorted(ran) == list(range(5))
        assert "Not in the main thread: no SIGTERM/SIGINT handlers" in caplog.text
    finally:
        q.close()


# -- a worker in a background thread (pgqueue.worker.BackgroundWorker) ------------------------


def test_a_background_worker_runs_jobs_and_stops_gracefully(q: Queue, dsn: str) -> None:
    @q.task(name="double")
    def double(n: int) -> int:
        return 2 * n

    with BackgroundWorker(q, WorkerSettings(concurrency=2)) as background:
        # start() returned once the worker was registered and listening.
        assert background.running
        assert background.worker.ready.is_set()
        registered = row_count(dsn, "SELECT count(*) FROM pgqueue.workers")
        job = double.enqueue(21)
        assert job.wait(timeout=10) == 42
    # Leaving the block stopped the worker as SIGTERM would, and waited for it.
    assert not background.running
    assert (background.status, background.error) == (0, None)
    assert registered == 1
    assert row_count(dsn, "SELECT count(*) FROM pgqueue.workers") == 0


def test_a_background_worker_that_cannot_start_raises_its_error(empty_dsn: str) -> None:
    q = Queue(dsn=empty_dsn)
    try:
        background = BackgroundWorker(q)
        with pytest.raises(SchemaOutOfDate, match="pgq migrate"):
            background.start()
        background.join(10)
        assert not background.running
    finally:
        q.close()


def row_count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(query.encode()).fetchone()
    assert found is not None
    return int(found[0])


async def test_a_claim_that_gets_no_answer_is_abandoned_logged_and_retried(
    aq: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A statement that neither returns nor fails (here: a claim waiting on a lock that a
    forgotten transaction holds) used to stall the worker in silence while its heartbeat
    kept renewing leases. It now gives up after timings.STALL_TIMEOUT, says so, and tries
    again on a new connection."""
    monkeypatch.setattr(timings, "STALL_TIMEOUT", 0.5)

    @aq.task(name="noop")
    async def noop() -> None: ...

    job = await noop.using(run_in=1.0).enqueue_async()  # due after the lock is taken
    async with background_worker(aq, poll_interval=0.2):
        async with await psycopg.AsyncConnection.connect(dsn) as blocker:
            # The claim reads pgqueue.queues (paused queues); the heartbeat does not.
            await blocker.execute("LOCK TABLE pgqueue.queues IN ACCESS EXCLUSIVE MODE")
            await async_wait_until(
                lambda: "no answer from the database within 0.5s (a claim)" in caplog.text,
                timeout=15, message="the stalled claim to be reported")
            assert (await arow(dsn, job.id) or {})["status"] == "queued"
            await blocker.rollback()
        await async_wait_until(lambda: (row(dsn, job.id) or {}).get("status") == "succeeded",
                               timeout=15, message="the job to run once the lock is gone")
    assert "Claiming jobs failed (no answer from the database within 0.5s (a claim)" in \
        caplog.text


async def test_a_worker_starting_while_its_row_cannot_be_written_waits_and_says_so(
    aq: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first heartbeat (the worker's registration) is retried for connect_timeout like
    the connection itself, instead of waiting forever or failing at once."""
    monkeypatch.setattr(timings, "STALL_TIMEOUT", 0.5)

    @aq.task(name="noop")
    async def noop() -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn) as blocker:
        await blocker.execute("LOCK TABLE pgqueue.workers IN ACCESS EXCLUSIVE MODE")
        worker = Worker(aq, worker_settings(connect_timeout=30))
        task = asyncio.create_task(worker.run())
        await async_wait_until(
            lambda: "no answer from the database within 0.5s (a heartbeat)" in caplog.text,
            timeout=15, message="the stalled registration to be reported")
        assert not task.done()
        await blocker.rollback()
    await async_wait_until(lambda: worker.ready.is_set(), timeout=15,
                           message="the worker to register once the lock is gone")
    job = await noop.enqueue_async()
    await async_wait_until(lambda: (row(dsn, job.id) or {}).get("status") == "succeeded",
                           timeout=15, message="the job to run")
    worker.request_stop()
    assert await asyncio.wait_for(task, 30) == 0
