"""Prefetch: jobs claimed beyond the slots wait in claim order under the worker's lease.

They start as slots free and never run more than ``concurrency`` at once; heartbeats renew
their leases while they wait; a cancellation reaches them before they start; a shutdown
releases them at once with the attempt given back (issue 16.2; the bound SQL shows is
tests/e2e/test_running_within_slots.py).
"""

from __future__ import annotations

import asyncio

from pgqueue import Queue
from pgqueue.worker.prefetch import FLOOR
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, arow, background_worker, run_burst


async def test_prefetched_jobs_start_in_claim_order_and_never_exceed_the_slots(
    aq: Queue,
) -> None:
    running = 0
    highest = 0
    order: list[int] = []

    @aq.task(name="step")
    async def step(n: int) -> None:
        nonlocal running, highest
        running += 1
        highest = max(highest, running)
        order.append(n)
        await asyncio.sleep(0.01)
        running -= 1

    await step.enqueue_many_async([(n,) for n in range(40)])
    await run_burst(aq, concurrency=2, prefetch=6)
    assert highest == 2
    # Claim order is priority, run_at, id; one enqueue_many gave the same priority and
    # run_at, so the jobs start in the order of their ids.
    assert order == list(range(40))


async def test_a_prefetched_job_keeps_its_lease_while_it_waits(aq: Queue, dsn: str) -> None:
    runs: list[int] = []

    @aq.task(name="slow")
    async def slow(n: int) -> None:
        runs.append(n)
        await asyncio.sleep(3.5 if n == 0 else 0)

    first = await slow.enqueue_async(0)
    second = await slow.enqueue_async(1)
    # The second job waits 3.5 s behind the first: more than three 1-second leases, which
    # the rescuer (every 0.2 s here) would take back if heartbeats did not renew it.
    await run_burst(aq, concurrency=1, prefetch=1, lease=1, rescue_interval=0.2)
    assert runs == [0, 1]
    for job in (first, second):
        stored = await arow(dsn, job.id)
        assert stored is not None
        assert (stored["status"], stored["attempts"]) == ("succeeded", 1)


async def test_a_job_cancelled_while_prefetched_never_starts(aq: Queue, dsn: str) -> None:
    started: list[int] = []
    release = asyncio.Event()

    @aq.task(name="gate")
    async def gate(n: int) -> None:
        started.append(n)
        if n == 0:
            await release.wait()

    await gate.enqueue_async(0)
    waiting = await gate.enqueue_async(1)
    async with background_worker(aq, concurrency=1, prefetch=1, lease=1) as worker:
        await async_wait_until(lambda: started == [0], timeout=10)
        await async_wait_until(lambda: waiting.id in worker.executions, timeout=10,
                               message="the second job prefetched")
        await asyncio.to_thread(aq.cancel_job, waiting.id)
        # Heartbeats (every lease/3) deliver the request to the waiting execution.
        await async_wait_until(
            lambda: worker.executions[waiting.id].cancel_reason == "cancelled", timeout=10)
        release.set()
        await async_wait_until(lambda: _status(dsn, waiting.id, "cancelled"), timeout=10)
    assert started == [0]


async def test_shutdown_releases_prefetched_jobs_with_the_attempt_back(
    aq: Queue, dsn: str
) -> None:
    started: list[int] = []

    @aq.task(name="hold")
    async def hold(n: int) -> None:
        started.append(n)
        await asyncio.sleep(2)

    jobs = [await hold.enqueue_async(n) for n in range(4)]
    async with background_worker(aq, concurrency=1, prefetch=3, shutdown_timeout=10):
        await async_wait_until(lambda: started == [0], timeout=10)
        await async_wait_until(
            lambda: _running_is(dsn, 4), timeout=10, message="three jobs prefetched")
    assert started == [0]
    rows = {job.id: await arow(dsn, job.id) for job in jobs}
    assert (rows[jobs[0].id] or {})["status"] == "succeeded"
    for job in jobs[1:]:
        stored = rows[job.id]
        assert stored is not None
        assert (stored["status"], stored["attempts"], stored["worker_id"]) == ("queued", 0, None)


async def _status(dsn: str, job_id: int, status: str) -> bool:
    stored = await arow(dsn, job_id)
    return stored is not None and stored["status"] == status


async def _running_is(dsn: str, count: int) -> bool:
    rows = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs "
                               "WHERE status = 'running'")
    return int(rows[0]["n"]) == count


async def _running(dsn: str) -> int:
    rows = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs WHERE status = 'running'")
    return int(rows[0]["n"])


async def test_the_measured_prefetch_gives_back_jobs_stuck_behind_slow_ones(
    aq: Queue, dsn: str
) -> None:
    """Fast jobs make the measured allowance large; when slow jobs then take every slot,
    the fast jobs prefetched behind them go back to the queue (attempt given back) after
    PATIENCE, for a worker with free slots, and the allowance shrinks to one."""
    finished: list[str] = []

    @aq.task(name="quick")
    async def quick(n: int) -> None:
        finished.append("quick")

    @aq.task(name="slow")
    async def slow(n: int) -> None:
        await asyncio.sleep(4)
        finished.append("slow")

    await quick.enqueue_many_async([(n,) for n in range(200)])
    async with background_worker(aq, concurrency=2) as worker:
        await async_wait_until(lambda: len(finished) == 200, timeout=20,
                               message="the first 200 quick jobs")
        assert worker.prefetch.allowance > 100  # jobs of microseconds
        await slow.enqueue_many_async([(0,), (1,)])
        await quick.enqueue_many_async([(n,) for n in range(300)])
        # The slow jobs hold both slots and quick ones wait behind them...
        highest = 0

        async def held_many() -> bool:
            nonlocal highest
            highest = max(highest, await _running(dsn))
            return highest > 50

        await async_wait_until(held_many, timeout=5, message="quick jobs prefetched")
        # ...until PATIENCE has passed: back to the queue, while the slow jobs still run.
        await async_wait_until(lambda: _running_at_most(dsn, 2 + FLOOR), timeout=3,
                               message="the prefetched jobs given back")
        assert "slow" not in finished
        assert worker.prefetch.allowance == FLOOR
        released = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs WHERE "
                                       "task = 'quick' AND status = 'queued' AND attempts = 0")
        assert released[0]["n"] > 50
        await async_wait_until(lambda: len(finished) == 502, timeout=30,
                               message="every job")
    rows = await aexecute(dsn, "SELECT max(attempts) AS most FROM pgqueue.jobs")
    assert rows[0]["most"] == 1  # the attempts of the given-back waits were given back


async def _running_at_most(dsn: str, n: int) -> bool:
    return await _running(dsn) <= n
