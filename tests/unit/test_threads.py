"""The daemon thread pool's accounting of calls nobody waits for."""

from __future__ import annotations

import asyncio
import threading

from pgqueue.worker.threads import DaemonThreadPool
from tests._polling import async_wait_until


async def test_an_abandoned_running_call_counts_as_stuck_until_it_returns() -> None:
    unstuck = asyncio.Event()
    pool = DaemonThreadPool(1, on_unstuck=unstuck.set)
    release = threading.Event()
    started = threading.Event()

    def blocking() -> str:
        started.set()
        release.wait(10)
        return "late"

    future = pool.submit(blocking)
    await asyncio.to_thread(started.wait, 10)
    assert pool.abandon(future) is True
    assert pool.stuck == 1
    assert pool.abandon(future) is False  # counted once
    release.set()
    await asyncio.wait_for(unstuck.wait(), 10)
    assert pool.stuck == 0
    pool.shutdown()


async def test_an_abandoned_call_that_had_not_started_never_runs() -> None:
    pool = DaemonThreadPool(1)
    release = threading.Event()
    ran: list[str] = []

    first = pool.submit(lambda: release.wait(10))
    second = pool.submit(lambda: ran.append("second"))
    assert pool.abandon(second) is False  # still queued: dropped, not stuck
    assert pool.stuck == 0
    release.set()
    assert await first is True
    third = pool.submit(lambda: "third")
    assert await third == "third"  # the pool moved past the dropped call
    await async_wait_until(lambda: pool.stuck == 0, timeout=5)
    assert ran == []
    pool.shutdown()
