"""Limits across workers (revision 0010_limits), against a real database.

Several in-process workers share one event loop here, so the tests can count what runs
at once in plain Python; each worker has its own connections, claims and ``workers`` row,
exactly as separate processes do (tests/e2e/test_limits_workers.py runs real ones).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from contextlib import AsyncExitStack
from typing import Any

import psycopg
import pytest

from pgqueue import ConfigurationError, JobContext, Queue, RateLimited
from tests._polling import async_wait_until
from tests.integration._worker_helpers import background_worker, row, run_burst


class Gauge:
    """Counts what runs at once, overall and per key, and remembers the highest."""

    def __init__(self) -> None:
        self.now: Counter[str] = Counter()
        self.highest: Counter[str] = Counter()
        self.starts: list[tuple[float, str]] = []

    async def hold(self, key: str, seconds: float) -> None:
        self.now[key] += 1
        self.now["*"] += 1
        self.starts.append((time.monotonic(), key))
        for name in (key, "*"):
            self.highest[name] = max(self.highest[name], self.now[name])
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now[key] -= 1
            self.now["*"] -= 1


def _done(dsn: str, ids: list[int]) -> bool:
    return all((row(dsn, i) or {}).get("status") == "succeeded" for i in ids)


def _paused(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pgqueue.limit_state "
                             "WHERE paused_until > now()").fetchone()
    return found == (1,)


async def _workers(stack: AsyncExitStack, queue: Queue, count: int, **settings: Any) -> None:
    for _ in range(count):
        await stack.enter_async_context(background_worker(queue, **settings))


async def test_a_queue_concurrency_limit_holds_across_workers(aq: Queue, dsn: str) -> None:
    gauge = Gauge()

    @aq.task(name="slow", queue="limited")
    async def slow(n: int) -> None:
        await gauge.hold("all", 0.1)

    await asyncio.to_thread(aq.set_queue, "limited", concurrency=3)
    ids = [(await slow.enqueue_async(n)).id for n in range(24)]
    async with AsyncExitStack() as stack:
        await _workers(stack, aq, 3, concurrency=4)
        await async_wait_until(lambda: _done(dsn, ids), timeout=30,
                               message="the limited jobs to finish")
    assert gauge.highest["*"] == 3  # never more, and the limit was used


async def test_a_task_global_concurrency_limit_is_declared_and_holds(
    aq: Queue, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    gauge = Gauge()

    @aq.task(name="one_at_a_time", global_concurrency=1)
    async def one(n: int) -> None:
        await gauge.hold("all", 0.05)

    @aq.task(name="free")
    async def free(n: int) -> None:
        await gauge.hold("free", 0.2)

    ids = [(await one.enqueue_async(n)).id for n in range(8)]
    free_ids = [(await free.enqueue_async(n)).id for n in range(4)]
    async with AsyncExitStack() as stack:
        await _workers(stack, aq, 2, concurrency=8)
        await async_wait_until(lambda: _done(dsn, ids + free_ids), timeout=30,
                               message="the jobs to finish")
    assert gauge.highest["all"] == 1
    assert gauge.highest["free"] == 4  # the unlimited task ran beside it, all at once
    declared = conn.execute("SELECT task, global_concurrency FROM pgqueue.task_limits").fetchall()
    assert declared == [("one_at_a_time", 1)]


async def test_key_concurrency_holds_per_key_while_other_keys_run(aq: Queue, dsn: str) -> None:
    gauge = Gauge()

    @aq.task(name="export", key_concurrency=1)
    async def export(tenant: str) -> None:
        await gauge.hold(tenant, 0.05)

    ids = [(await export.using(concurrency_key=f"tenant:{n % 4}").enqueue_async(f"t{n % 4}")).id
           for n in range(20)]
    async with AsyncExitStack() as stack:
        await _workers(stack, aq, 2, concurrency=8)
        await async_wait_until(lambda: _done(dsn, ids), timeout=30,
                               message="the keyed jobs to finish")
    assert all(gauge.highest[f"t{k}"] == 1 for k in range(4))
    assert gauge.highest["*"] > 1  # keys ran side by side


async def test_a_rate_limit_spreads_starts_evenly(aq: Queue, dsn: str) -> None:
    gauge = Gauge()

    @aq.task(name="call_api", rate_limit="20/s")
    async def call_api(n: int) -> None:
        await gauge.hold("api", 0)

    ids = [(await call_api.enqueue_async(n)).id for n in range(10)]
    async with AsyncExitStack() as stack:
        await _workers(stack, aq, 2, concurrency=8)
        await async_wait_until(lambda: _done(dsn, ids), timeout=30,
                               message="the rate-limited jobs to finish")
    starts = sorted(t for t, _ in gauge.starts)
    # 20/s: a start every 50 ms. A start may come up to 50 ms early (the claim's
    # tolerance), so 10 starts span at least 8 intervals, not a burst.
    assert starts[-1] - starts[0] >= 0.39
    assert max(Counter(int((t - starts[0]) / 0.25) for t in starts).values()) <= 7


async def test_a_cost_limit_charges_the_estimate_then_what_the_job_reports(
    aq: Queue, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    starts: list[float] = []

    @aq.task(name="llm", queue="tokens")
    async def llm(used: int, ctx: JobContext) -> None:
        starts.append(time.monotonic())
        ctx.charge(used)

    await asyncio.to_thread(aq.set_queue, "tokens", rate_limit="1000 tokens/s")
    # Estimated at 10 tokens each, but the first one reports 500: the bucket is corrected
    # by 490 tokens (0.49 s), so the second waits about half a second after it.
    first = await llm.using(cost=10).enqueue_async(500)
    async with background_worker(aq, concurrency=4):
        await async_wait_until(lambda: _done(dsn, [first.id]), timeout=10,
                               message="the first job")
        second = await llm.using(cost=10).enqueue_async(10)
        await async_wait_until(lambda: _done(dsn, [second.id]), timeout=10,
                               message="the second job")
    assert starts[1] - starts[0] >= 0.4
    info = {i.name: i for i in await asyncio.to_thread(aq.queues)}["tokens"]
    assert info.rate_limit == "1000 tokens/s"


async def test_rate_limited_pauses_the_key_everywhere_and_gives_the_attempt_back(
    aq: Queue, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    ran: dict[str, list[float]] = defaultdict(list)
    first_call = True

    @aq.task(name="webhook")
    async def webhook(name: str) -> None:
        nonlocal first_call
        ran[name].append(time.monotonic())
        if first_call:
            first_call = False
            raise RateLimited(retry_after=1.5, key="api.example.com")

    throttled = await webhook.using(concurrency_key="api.example.com").enqueue_async("a1")
    async with AsyncExitStack() as stack:
        await _workers(stack, aq, 2, concurrency=4, poll_interval=0.5)
        await async_wait_until(lambda: ran["a1"], timeout=10, message="the first call")
        paused_at = ran["a1"][0]
        # The pause is written with the attempt's outcome (the completer's next batch).
        await async_wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pgqueue.limit_state WHERE paused_until > now()"
        ).fetchone() == (1,), timeout=5, message="the pause to be recorded")
        same_key = await webhook.using(concurrency_key="api.example.com").enqueue_async("a2")
        other = await webhook.using(concurrency_key="other.example.com").enqueue_async("b")
        await async_wait_until(lambda: _done(dsn, [other.id]), timeout=10,
                               message="the other key's job")
        assert not ran["a2"]  # still paused
        pause = conn.execute("SELECT paused_until > now() FROM pgqueue.limit_state "
                             "WHERE scope = 'key:api.example.com'").fetchone()
        assert pause == (True,)
        await async_wait_until(lambda: _done(dsn, [throttled.id, same_key.id]), timeout=10,
                               message="the paused key to resume")
    assert min(ran["a2"][0], ran["a1"][1]) - paused_at >= 1.4
    assert (row(dsn, throttled.id) or {})["attempts"] == 1  # the 429 attempt was given back


async def test_a_fair_queue_takes_keys_in_turn(aq: Queue, dsn: str) -> None:
    order: list[str] = []

    @aq.task(name="work", queue="shared")
    async def work(key: str) -> None:
        order.append(key)
        await asyncio.sleep(0.01)

    await asyncio.to_thread(aq.set_queue, "shared", fair=True)
    big = await asyncio.to_thread(
        work.using(concurrency_key="big").enqueue_many, [("big",)] * 300)
    small = [(await work.using(concurrency_key="small").enqueue_async("small")).id
             for _ in range(5)]
    await run_burst(aq, concurrency=2)
    assert _done(dsn, small) and _done(dsn, list(big.ids))
    # Round-robin: the five small jobs start among the first dozen, not after 300 big ones.
    starts = "".join(key[0] for key in order[:40])  # b(ig) and s(mall), in start order
    assert [n for n, key in enumerate(order) if key == "small"][-1] < 12, starts


async def test_rate_limited_without_a_limit_pauses_its_task_and_nothing_else(
    aq: Queue, dsn: str
) -> None:
    """A task paused by RateLimited (no key, no limit) waits; other tasks do not."""
    calls: list[float] = []

    @aq.task(name="flaky")
    async def flaky() -> None:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RateLimited(retry_after=1.0)

    @aq.task(name="steady")
    async def steady() -> None:
        pass

    job = await flaky.enqueue_async()
    async with background_worker(aq, poll_interval=0.2):
        await async_wait_until(lambda: calls, timeout=10, message="the first call")
        await async_wait_until(lambda: _paused(dsn), timeout=5,
                               message="the pause to be recorded with the outcome")
        later = await flaky.enqueue_async()
        other = await steady.enqueue_async()
        await async_wait_until(lambda: _done(dsn, [other.id]), timeout=10,
                               message="the other task's job")
        await async_wait_until(lambda: _done(dsn, [job.id, later.id]), timeout=10,
                               message="the paused task to resume")
    assert min(calls[1:]) - calls[0] >= 0.9
    assert (row(dsn, job.id) or {})["attempts"] == 1


@pytest.mark.parametrize("rate", ["10/x", "-1/s", "1e99/s", "0/s", "ten/s", "", 5, "5/0s"])
def test_a_malformed_rate_is_refused_in_one_line(q: Queue, rate: object) -> None:
    with pytest.raises(ConfigurationError) as raised:
        q.set_queue("x", rate_limit=rate)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value) and "N/s" in str(raised.value)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "3"])
def test_a_bad_concurrency_is_refused_in_one_line(q: Queue, value: object) -> None:
    with pytest.raises(ConfigurationError, match="concurrency"):
        q.set_queue("x", concurrency=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="key_concurrency"):
        q.task(name="t", key_concurrency=value)(lambda: None)


@pytest.mark.parametrize("seconds", [-1, float("inf"), float("nan")])
def test_rate_limited_refuses_a_bad_retry_after(seconds: float) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        RateLimited(retry_after=seconds)


def test_queue_limits_are_shown_and_cleared(q: Queue) -> None:
    info = q.set_queue("api", concurrency=5, key_concurrency=1, rate_limit="100/m", fair=True)
    assert info.settings | {} == {"max_queued": None, "priority_aging": None,
                                  "concurrency": 5, "key_concurrency": 1,
                                  "rate_limit": "100/m", "fair": True}
    info = q.set_queue("api", rate_limit=None, concurrency=None)
    assert (info.rate_limit, info.concurrency, info.key_concurrency) == (None, None, 1)
