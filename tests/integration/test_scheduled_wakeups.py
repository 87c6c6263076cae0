"""Jobs due later start when they are due, not at the idle worker's next poll.

With a 60 s poll interval, anything that starts within a few seconds of its run_at was
woken by pgqueue itself: a NOTIFY for a newly inserted future job (the worker then sleeps
until the next run_at), or the worker's own timer for a retry or snooze it recorded.
"""

from __future__ import annotations

import time

from pgqueue import Queue, Retry
from tests._polling import async_wait_until
from tests.integration._worker_helpers import background_worker

LONG_POLL = 60.0


async def test_a_job_scheduled_while_the_worker_idles_starts_when_due(dsn: str) -> None:
    q = Queue(dsn)
    started: list[float] = []

    @q.task(name="later")
    async def later() -> None:
        started.append(time.monotonic())

    async with background_worker(q, poll_interval=LONG_POLL):
        enqueued = time.monotonic()
        await later.using(run_in=1.5).enqueue_async()
        await async_wait_until(lambda: started, timeout=10, message="the scheduled job to run")
    delay = started[0] - enqueued
    assert 1.4 <= delay < 5.0, f"started {delay:.2f}s after enqueue; due after 1.5s"
    await q.close_async()


async def test_a_short_retry_runs_again_without_waiting_for_the_poll(dsn: str) -> None:
    q = Queue(dsn)
    attempts: list[float] = []

    @q.task(name="flaky", max_attempts=3)
    async def flaky() -> str:
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise Retry(delay=1.0)
        return "ok"

    async with background_worker(q, poll_interval=LONG_POLL):
        job = await flaky.enqueue_async()
        await async_wait_until(lambda: len(attempts) >= 2, timeout=10,
                               message="the retry to run")
        assert await job.wait_async(timeout=10) == "ok"
    gap = attempts[1] - attempts[0]
    assert 0.9 <= gap < 4.0, f"retried {gap:.2f}s later; Retry(delay=1.0)"
    await q.close_async()
