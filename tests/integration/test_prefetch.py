"""Prefetch: jobs claimed ahead of the slots are held, ``claimed`` in SQL, not started.

They start as slots free, in claim order, and never more than ``concurrency`` at once;
heartbeats renew their leases while they wait; they read ``queued`` in the API and the
counts; cancelling one ends it at once and it never starts; a job of higher priority
enqueued later starts before them; a queue paused while they wait stops them from
starting; a shutdown gives them back as they were (the bound SQL shows while draining is
tests/e2e/test_running_within_slots.py).
"""

from __future__ import annotations

import asyncio

from pgqueue import Queue
from pgqueue.worker.prefetch import FLOOR
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, arow, background_worker, run_burst


async def _count(dsn: str, status: str, task: str | None = None) -> int:
    rows = await aexecute(
        dsn, "SELECT count(*) AS n FROM pgqueue.jobs WHERE status = %s"
             " AND (%s::text IS NULL OR task = %s::text)", (status, task, task))
    return int(rows[0]["n"])


async def _status(dsn: str, job_id: int, status: str) -> bool:
    stored = await arow(dsn, job_id)
    return stored is not None and stored["status"] == status


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


async def test_a_held_job_reads_queued_and_keeps_its_lease_while_it_waits(
    aq: Queue, dsn: str
) -> None:
    runs: list[int] = []
    release = asyncio.Event()

    @aq.task(name="slow")
    async def slow(n: int) -> None:
        runs.append(n)
        if n == 0:
            await release.wait()

    first = await slow.enqueue_async(0)
    second = await slow.enqueue_async(1)
    async with background_worker(aq, concurrency=1, prefetch=1, lease=1,
                                 rescue_interval=0.2):
        await async_wait_until(lambda: runs == [0], timeout=10)
        await async_wait_until(lambda: _status(dsn, second.id, "claimed"), timeout=10,
                               message="the second job held")
        held = await arow(dsn, second.id)
        assert held is not None
        # Held, not started: no attempt spent, no start time; the API says queued.
        assert (held["attempts"], held["started_at"]) == (0, None)
        assert (await aq.get_job_async(second.id)).status == "queued"  # type: ignore[union-attr]
        [counts] = [s for s in await asyncio.to_thread(aq.stats) if s.queue == "default"]
        assert (counts.queued, counts.running) == (1, 1)
        # More than three 1-second leases: the rescuer (every 0.2 s) would take it back if
        # heartbeats did not renew the held job's lease.
        await asyncio.sleep(3.5)
        assert await _status(dsn, second.id, "claimed")
        release.set()
        await async_wait_until(lambda: _status(dsn, second.id, "succeeded"), timeout=10)
    assert runs == [0, 1]
    for job in (first, second):
        stored = await arow(dsn, job.id)
        assert stored is not None
        assert (stored["status"], stored["attempts"]) == ("succeeded", 1)


async def test_a_held_job_cancelled_ends_cancelled_at_once_and_never_starts(
    aq: Queue, dsn: str
) -> None:
    started: list[int] = []
    release = asyncio.Event()

    @aq.task(name="gate")
    async def gate(n: int) -> None:
        started.append(n)
        if n == 0:
            await release.wait()

    await gate.enqueue_async(0)
    waiting = await gate.enqueue_async(1)
    async with background_worker(aq, concurrency=1, prefetch=1) as worker:
        await async_wait_until(lambda: started == [0], timeout=10)
        await async_wait_until(lambda: _status(dsn, waiting.id, "claimed"), timeout=10,
                               message="the second job held")
        cancelled = await asyncio.to_thread(aq.cancel_job, waiting.id)
        assert cancelled is not None and cancelled.status == "cancelled"
        release.set()
        await async_wait_until(lambda: worker.ledger.held == 0 and not worker.executions,
                               timeout=10, message="the worker done with both jobs")
        stored = await arow(dsn, waiting.id)
        assert stored is not None
        assert (stored["status"], stored["attempts"], stored["worker_id"]) == (
            "cancelled", 0, None)
    assert started == [0]


async def test_a_higher_priority_job_enqueued_later_starts_before_held_ones(
    aq: Queue, dsn: str
) -> None:
    started: list[str] = []
    release = asyncio.Event()

    @aq.task(name="work")
    async def work(name: str) -> None:
        started.append(name)
        if name == "long":
            await release.wait()

    await work.enqueue_async("long")
    async with background_worker(aq, concurrency=1, prefetch=3):
        await async_wait_until(lambda: started == ["long"], timeout=10)
        for name in ("low-1", "low-2", "low-3"):
            await work.enqueue_async(name)
        await async_wait_until(lambda: _count(dsn, "claimed", "work"), timeout=10,
                               message="the low jobs held")
        await async_wait_until(lambda: _count_is(dsn, "claimed", 3), timeout=10,
                               message="all three low jobs held")
        await work.using(priority=100).enqueue_async("high")
        release.set()
        await async_wait_until(lambda: len(started) == 5, timeout=10)
    assert started == ["long", "high", "low-1", "low-2", "low-3"]


async def _count_is(dsn: str, status: str, n: int) -> bool:
    return await _count(dsn, status) == n


async def test_held_jobs_of_a_queue_paused_meanwhile_do_not_start(
    aq: Queue, dsn: str
) -> None:
    started: list[int] = []
    release = asyncio.Event()

    @aq.task(name="in_a", queue="a")
    async def in_a(n: int) -> None:
        started.append(n)
        if n == 0:
            await release.wait()

    await in_a.enqueue_async(0)
    await in_a.enqueue_many_async([(1,), (2,)])
    async with background_worker(aq, concurrency=1, prefetch=2):
        await async_wait_until(lambda: started == [0], timeout=10)
        await async_wait_until(lambda: _count_is(dsn, "claimed", 2), timeout=10,
                               message="two jobs held")
        await asyncio.to_thread(aq.pause_queue, "a")
        release.set()
        # The slot frees; the held jobs may no longer start: back to the queue.
        await async_wait_until(lambda: _count_is(dsn, "queued", 2), timeout=10,
                               message="the held jobs given back")
        rows = await aexecute(dsn, "SELECT attempts, worker_id, lease_token FROM pgqueue.jobs "
                                   "WHERE status = 'queued'")
        assert [tuple(r.values()) for r in rows] == [(0, None, None)] * 2
        assert started == [0]
        await asyncio.to_thread(aq.resume_queue, "a")
        await async_wait_until(lambda: len(started) == 3, timeout=10)
    assert started == [0, 1, 2]


async def test_shutdown_gives_held_jobs_back_as_they_were(aq: Queue, dsn: str) -> None:
    started: list[int] = []

    @aq.task(name="hold")
    async def hold(n: int) -> None:
        started.append(n)
        await asyncio.sleep(2)

    jobs = [await hold.enqueue_async(n) for n in range(4)]
    async with background_worker(aq, concurrency=1, prefetch=3, shutdown_timeout=10):
        await async_wait_until(lambda: started == [0], timeout=10)
        await async_wait_until(lambda: _count_is(dsn, "claimed", 3), timeout=10,
                               message="three jobs held")
        assert await _count(dsn, "running") == 1
    assert started == [0]
    rows = {job.id: await arow(dsn, job.id) for job in jobs}
    assert (rows[jobs[0].id] or {})["status"] == "succeeded"
    for job in jobs[1:]:
        stored = rows[job.id]
        assert stored is not None
        assert (stored["status"], stored["attempts"], stored["worker_id"]) == ("queued", 0, None)
        assert stored["run_at"] == job.run_at  # its place in the queue kept


async def test_an_expired_lease_gives_a_held_job_back_untouched(
    aq: Queue, dsn: str
) -> None:
    @aq.task(name="later")
    def later() -> None:
        pass

    job = await later.enqueue_async()
    # Held by a worker that died before starting it: claimed, its lease run out.
    await aexecute(dsn, "UPDATE pgqueue.jobs SET status = 'claimed', worker_id = 'gone', "
                        "lease_token = 42, lease_expires_at = now() - interval '1 second' "
                        "WHERE id = %s", (job.id,))
    async with background_worker(aq, concurrency=1, rescue_interval=0.1):
        await async_wait_until(lambda: _status(dsn, job.id, "succeeded"), timeout=10)
    stored = await arow(dsn, job.id)
    assert stored is not None
    # Rescued without a failed attempt: it never started. Then it ran once.
    assert (stored["status"], stored["attempts"], stored["last_error"]) == (
        "succeeded", 1, None)


async def test_a_running_row_its_worker_does_not_hold_is_given_back_at_once(
    aq: Queue, dsn: str
) -> None:
    """A lossy failover or a restore can leave a row running under a live worker that no
    longer has it (its outcome, or its claim, was lost): the worker's heartbeats must not
    keep it running for ever, and the reason given is the true one."""
    ran: list[int] = []

    @aq.task(name="once")
    def once(n: int) -> None:
        ran.append(n)

    running = await once.enqueue_async(1)
    held = await once.enqueue_async(2)
    async with background_worker(aq, concurrency=2, lease=1, rescue_interval=60) as worker:
        await async_wait_until(lambda: sorted(ran) == [1, 2], timeout=10)
        await async_wait_until(lambda: _status(dsn, held.id, "succeeded"), timeout=10)
        # As the replica had them: the first job running (its outcome lost), the second
        # claimed (its claim replicated, its start not), both under this worker.
        await aexecute(
            dsn, "UPDATE pgqueue.jobs SET status = 'running', worker_id = %s, "
                 "lease_token = 42, lease_expires_at = now() + interval '0.5 second', "
                 "finished_at = NULL, expires_at = NULL WHERE id = %s",
            (worker.id, running.id))
        await aexecute(
            dsn, "UPDATE pgqueue.jobs SET status = 'claimed', attempts = 0, worker_id = %s, "
                 "lease_token = 43, lease_expires_at = now() + interval '0.5 second', "
                 "finished_at = NULL, expires_at = NULL WHERE id = %s",
            (worker.id, held.id))
        # The rescuer runs once a minute here: only the heartbeat (every 1/3 s) can do it.
        await async_wait_until(lambda: len(ran) == 4, timeout=10,
                               message="both jobs given back and run again")
        await async_wait_until(lambda: _status(dsn, running.id, "succeeded"), timeout=10)
        await async_wait_until(lambda: _status(dsn, held.id, "succeeded"), timeout=10)
    first = await arow(dsn, running.id)
    second = await arow(dsn, held.id)
    assert first is not None and second is not None
    assert first["attempts"] == 2  # the lost attempt counts as failed
    assert "no longer holds attempt 1" in first["last_error"]
    assert "stopped heartbeating" not in first["last_error"]
    assert (second["attempts"], second["last_error"]) == (1, None)


async def test_the_measured_prefetch_gives_back_jobs_stuck_behind_slow_ones(
    aq: Queue, dsn: str
) -> None:
    """Fast jobs make the measured allowance large; when slow jobs then take every slot,
    the fast jobs held behind them go back to the queue (never started) after PATIENCE,
    for a worker with free slots, and the allowance shrinks to one."""
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
        # Jobs of microseconds (a loaded machine measures them at a few ms): many held.
        assert worker.prefetch.allowance > 20
        await slow.enqueue_many_async([(0,), (1,)])
        await quick.enqueue_many_async([(n,) for n in range(300)])
        # The slow jobs hold both slots and quick ones are held behind them...
        most = 0

        async def held_many() -> bool:
            nonlocal most
            most = max(most, await _count(dsn, "claimed", "quick"))
            assert await _count(dsn, "running") <= 2
            return most > 10

        await async_wait_until(held_many, timeout=5, message="quick jobs held")
        # ...until PATIENCE has passed: back to the queue, while the slow jobs still run.
        await async_wait_until(lambda: _held_at_most(dsn, FLOOR), timeout=3,
                               message="the held jobs given back")
        assert "slow" not in finished
        assert worker.prefetch.allowance == FLOOR
        released = await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.jobs WHERE "
                                       "task = 'quick' AND status = 'queued' AND attempts = 0")
        assert released[0]["n"] > 10
        await async_wait_until(lambda: len(finished) == 502, timeout=30,
                               message="every job")
    rows = await aexecute(dsn, "SELECT max(attempts) AS most FROM pgqueue.jobs")
    assert rows[0]["most"] == 1  # held jobs given back never spent an attempt


async def _held_at_most(dsn: str, n: int) -> bool:
    return await _count(dsn, "claimed") <= n
