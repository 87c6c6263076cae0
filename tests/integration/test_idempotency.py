"""Idempotency keys: one live job per key, however many enqueuers race for it.

A key dedupes while its job is queued, scheduled, retrying, running or succeeded; a
cancelled, dead or pruned job frees it. Retrying a dead job whose key a newer live job
holds is refused and leaves the dead job where it is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from pgqueue import Discard, DuplicateJob, Queue
from pgqueue.dead_jobs import RefusalReason, RetryRefusal
from tests.integration._worker_helpers import row, run_burst


@pytest.fixture
def q(dsn: str) -> Iterator[Queue]:
    queue = Queue(dsn=dsn)

    @queue.task(name="charge")
    def charge(order_id: int) -> None:
        raise Discard("card declined")

    try:
        yield queue
    finally:
        queue.close()


def jobs_with_key(dsn: str, key: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT id FROM pgqueue.jobs WHERE idempotency_key = %s ORDER BY id", (key,)
        ).fetchall()]


def test_a_duplicate_key_returns_the_existing_job_and_inserts_nothing(
    q: Queue, dsn: str
) -> None:
    charge = q.get_task("charge")
    first = charge.using(idempotency_key="order:1").enqueue(1)
    second = charge.using(idempotency_key="order:1", priority=9).enqueue(2)
    assert second.id == first.id
    assert second.args == [1]  # the holder's row, not the new arguments
    assert second.priority == 0
    assert jobs_with_key(dsn, "order:1") == [first.id]
    other = charge.using(idempotency_key="order:2").enqueue(2)
    assert other.id != first.id


@pytest.mark.parametrize("state", [
    "status = 'running', attempts = 1, worker_id = 'w', "
    "lease_expires_at = now() + interval '30 seconds'",
    "status = 'succeeded', attempts = 1, finished_at = now()",
    "attempts = 1, run_at = now() + interval '1 hour'",
    "run_at = now() + interval '1 hour'",
])
def test_the_key_dedupes_while_the_job_is_live_or_succeeded(
    q: Queue, dsn: str, state: str
) -> None:
    charge = q.get_task("charge")
    first = charge.using(idempotency_key="k").enqueue(1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE pgqueue.jobs SET {state} WHERE id = %s".encode(), (first.id,))
    assert charge.using(idempotency_key="k").enqueue(1).id == first.id
    assert jobs_with_key(dsn, "k") == [first.id]


async def test_async_enqueue_dedupes_too(dsn: str) -> None:
    q = Queue(dsn=dsn)

    @q.task(name="t")
    def task() -> None: ...

    try:
        first = await task.using(idempotency_key="k").enqueue_async()
        second = await task.using(idempotency_key="k").enqueue_async()
        assert first.id == second.id
    finally:
        await q.close_async()


def test_twenty_concurrent_enqueuers_of_one_key_make_exactly_one_job(
    q: Queue, dsn: str
) -> None:
    charge = q.get_task("charge")
    enqueuers = 20
    barrier = threading.Barrier(enqueuers)
    ids: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def enqueue(n: int) -> None:
        try:
            with psycopg.connect(dsn) as conn:  # each its own connection and transaction
                conn.execute("SELECT 1")
                barrier.wait(timeout=20)
                job = charge.using(idempotency_key="order:race", conn=conn).enqueue(n)
                conn.commit()
            with lock:
                ids.append(job.id)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(enqueuers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(ids) == enqueuers
    assert len(set(ids)) == 1
    assert jobs_with_key(dsn, "order:race") == ids[:1]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (1,)


def test_concurrent_enqueuers_on_the_queue_pool_make_one_job(q: Queue, dsn: str) -> None:
    charge = q.get_task("charge")
    barrier = threading.Barrier(10)
    ids: list[int] = []

    def enqueue() -> None:
        barrier.wait(timeout=20)
        ids.append(charge.using(idempotency_key="pooled").enqueue(1).id)

    threads = [threading.Thread(target=enqueue) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(ids) == 10
    assert len(set(ids)) == 1
    assert len(jobs_with_key(dsn, "pooled")) == 1


def test_a_cancelled_job_no_longer_blocks_its_key(q: Queue, dsn: str) -> None:
    charge = q.get_task("charge")
    first = charge.using(idempotency_key="k").enqueue(1)
    first.cancel()
    second = charge.using(idempotency_key="k").enqueue(1)
    assert second.id != first.id
    assert second.status == "queued"
    assert jobs_with_key(dsn, "k") == [first.id, second.id]
    # and the new holder dedupes again
    assert charge.using(idempotency_key="k").enqueue(1).id == second.id


async def test_a_dead_job_no_longer_blocks_its_key(dsn: str) -> None:
    q = Queue(dsn=dsn)

    @q.task(name="charge")
    def charge(order_id: int) -> None:
        raise Discard("card declined")

    try:
        first = await charge.using(idempotency_key="k").enqueue_async(1)
        await run_burst(q)
        assert (await q.get_job_async(first.id)).status == "dead"  # type: ignore[union-attr]
        second = await charge.using(idempotency_key="k").enqueue_async(1)
        assert second.id != first.id
    finally:
        await q.close_async()


def test_a_pruned_job_no_longer_blocks_its_key(q: Queue, dsn: str) -> None:
    charge = q.get_task("charge")
    first = charge.using(idempotency_key="k").enqueue(1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (first.id,))
    assert charge.using(idempotency_key="k").enqueue(1).id != first.id


async def test_retry_dead_refuses_a_job_whose_key_a_newer_live_job_holds(dsn: str) -> None:
    q = Queue(dsn=dsn)

    @q.task(name="charge")
    def charge(order_id: int) -> None:
        raise Discard("card declined")

    try:
        dead = await charge.using(idempotency_key="order:7").enqueue_async(7)
        await run_burst(q)
        newer = await charge.using(idempotency_key="order:7").enqueue_async(7)
        assert newer.id != dead.id

        with pytest.raises(DuplicateJob) as refused:
            q.retry_dead_job(dead.id)
        message = str(refused.value)
        assert "\n" not in message
        assert "order:7" in message
        assert str(dead.id) in message
        outcome = q.retry_dead([dead.id])
        assert outcome.retried == []
        assert outcome.refused == {
            dead.id: RetryRefusal(dead.id, RefusalReason.KEY_HELD, "order:7")
        }
        assert "'order:7' is held by a live job" in outcome.refused[dead.id].message
        # The dead job stays where it is, untouched.
        assert row(dsn, dead.id, "dead_jobs") is not None
        assert row(dsn, dead.id) is None
        assert jobs_with_key(dsn, "order:7") == [newer.id]

        # Once the newer job no longer holds the key, the retry goes through.
        newer_job = q.get_job(newer.id)
        assert newer_job is not None
        newer_job.cancel()
        revived = q.retry_dead_job(dead.id)
        assert (revived.id, revived.status, revived.attempts) == (dead.id, "queued", 0)
        assert row(dsn, dead.id, "dead_jobs") is None
    finally:
        await q.close_async()
