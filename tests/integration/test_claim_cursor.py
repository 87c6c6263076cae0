"""The producer resumes each claim behind the last job it claimed, and never loses one.

Claims from the head of ``jobs_claim_idx`` walk over an entry for every job claimed
since the last vacuum (this database is never vacuumed during a test). After a full
claim the producer resumes behind the last job it took; any wake-up, and any resumed
claim that comes back short, sends it back to the head. These tests drive a real
``Producer`` against PostgreSQL and check the order jobs come out in, that jobs landing
behind the cursor are still claimed, and that every job is claimed exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import psycopg

from pgqueue.db.queries import ClaimedJob, for_schema
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.prefetch import Prefetch
from pgqueue.worker.producer import Producer

QUERIES = for_schema("pgqueue")


def _producer(dsn: str, queues: list[str] | None = None) -> Producer:
    return Producer(
        connect=WorkerConnections(dsn, "cursor-test").link(), queries=QUERIES,
        worker_id="cursor-test", queues=queues or [], tasks=frozenset(),
        lease=30.0, poll_interval=5.0,
        ledger=Ledger(concurrency=8, prefetch=Prefetch(0, concurrency=8)),
        start=lambda job: None, healthy=lambda: True,
    )


async def _insert(aconn: psycopg.AsyncConnection[Any], count: int, *, priority: int = 0,
                  queue: str = "default", run_at: str = "now()") -> list[int]:
    cursor = await aconn.execute(
        f"INSERT INTO pgqueue.jobs (queue, task, args, priority, run_at) "
        f"SELECT %s, 't', jsonb_build_array(g), %s, {run_at} FROM generate_series(1, %s) g "
        f"RETURNING id".encode(),
        [queue, priority, count],
    )
    return sorted(row[0] for row in await cursor.fetchall())


def _ids(jobs: list[ClaimedJob]) -> list[int]:
    return sorted(job.id for job in jobs)


async def test_full_claims_resume_behind_the_last_job_in_claim_order(
    dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    ids = await _insert(aconn, 20)
    producer = _producer(dsn)
    try:
        first = await producer.claim(8)
        assert _ids(first) == ids[:8]
        assert producer.cursor() == (0, first[0].run_at, ids[7])
        second = await producer.claim(8)
        assert _ids(second) == ids[8:16]
        cursor = producer.cursor()
        assert cursor is not None and cursor[2] == ids[15]
        # Only 4 left behind the cursor: the resumed claim is short, the head claim finds
        # nothing more, and a short claim keeps the cursor at the last job it took.
        third = await producer.claim(8)
        assert _ids(third) == ids[16:]
        assert await producer.claim(8) == []
        assert producer.cursor() is None
    finally:
        await producer.close()


async def test_a_wake_up_sends_the_next_claim_to_the_head_for_a_higher_priority_job(
    dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    ids = await _insert(aconn, 30)
    producer = _producer(dsn)
    try:
        await producer.claim(8)
        assert producer.cursor() is not None
        (urgent,) = await _insert(aconn, 1, priority=5)  # its NOTIFY wakes a real worker
        producer.wake()
        assert producer.cursor() is None
        claimed = await producer.claim(8)
        assert urgent in _ids(claimed)
        assert _ids(claimed) == sorted([urgent, *ids[8:15]])
    finally:
        await producer.close()


async def test_a_job_behind_the_cursor_is_claimed_once_the_resumed_claim_runs_short(
    dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    """No wake-up at all (a lost NOTIFY, or an UPDATE by hand): the job behind the cursor
    still runs, as soon as the region behind the cursor no longer fills a claim."""
    ids = await _insert(aconn, 12)
    producer = _producer(dsn)
    try:
        await producer.claim(8)
        (behind,) = await _insert(aconn, 1, run_at="now() - interval '1 hour'")
        (higher,) = await _insert(aconn, 1, priority=3)
        claimed = await producer.claim(8)
        # The resumed claim found the last 4 of the batch; the head claim topped it up
        # with the two jobs that sit ahead of them in claim order.
        assert _ids(claimed) == sorted([*ids[8:], behind, higher])
    finally:
        await producer.close()


async def test_queue_filters_and_lower_priorities_are_reached_through_the_head(
    dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    high = await _insert(aconn, 8, priority=2, queue="mail")
    other_queue = await _insert(aconn, 8, priority=2, queue="reports")
    low = await _insert(aconn, 8, priority=0, queue="mail")
    producer = _producer(dsn, queues=["mail"])
    try:
        assert _ids(await producer.claim(8)) == high
        cursor = producer.cursor()
        assert cursor is not None and cursor[0] == 2
        # Nothing of priority 2 is left in "mail": the resumed claim comes back empty and
        # the head claim continues with priority 0.
        assert _ids(await producer.claim(8)) == low
        assert await producer.claim(8) == []
        rows = await (await aconn.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE status = 'queued'")).fetchone()
        assert rows is not None and rows[0] == len(other_queue)
    finally:
        await producer.close()


# Job 7 as a claim lists it: the one row every fake claim below returns.
_JOB_SEVEN: tuple[Any, ...] = (7, "default", "t", [], {}, 0, 1, 3, None, {},
              datetime.fromisoformat("2026-01-01T00:00:00+00:00"),
              datetime.fromisoformat("2026-01-01T00:00:00+00:00"), 1)


class _FakeConnection:
    """Just enough of an AsyncConnection for a claim (``Query.all``): each statement
    goes to :meth:`on_execute`, and job 7 comes back through the real row factory."""

    closed = False

    async def on_execute(self, query: bytes) -> None:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def cursor(self, *, row_factory: Any) -> AsyncIterator[Any]:
        connection = self

        class Cursor:
            async def execute(self, query: bytes, params: Any, **_: Any) -> None:
                await connection.on_execute(query)

            async def fetchall(self) -> list[Any]:
                return [row_factory(self)(_JOB_SEVEN)]

        yield Cursor()


async def test_a_wake_up_during_a_claim_leaves_no_cursor(dsn: str) -> None:
    """A NOTIFY handled while a claim is in flight may be for a job the claim's snapshot
    could not see; a cursor set from that claim could hide the job behind it."""
    producer = _producer(dsn)

    class WakingConnection(_FakeConnection):
        async def on_execute(self, query: bytes) -> None:
            await asyncio.sleep(0)
            producer.wake()  # the listener, while the claim's round trip is in flight

    producer._conn = WakingConnection()  # type: ignore[assignment]
    claimed = await producer.claim(1)
    assert [job.id for job in claimed] == [7]
    assert producer.cursor() is None
    producer._conn = None


async def test_jobs_of_a_resumed_claim_are_kept_when_the_top_up_claim_fails(dsn: str) -> None:
    """Both statements commit on their own: if the second fails (connection lost), the
    first one's jobs are already this worker's and must run, not wait for lease expiry."""
    producer = _producer(dsn)
    producer._resume_after[tuple(producer._queues)] = (
        0, datetime.fromisoformat("2026-01-01T00:00:00+00:00"), 1)
    executed: list[bytes] = []

    class FailingSecondTime(_FakeConnection):
        async def on_execute(self, query: bytes) -> None:
            executed.append(query)
            if len(executed) == 2:
                raise psycopg.OperationalError("server closed the connection unexpectedly")

    producer._conn = FailingSecondTime()  # type: ignore[assignment]
    claimed = await producer.claim(8)
    assert executed == [QUERIES.claim_jobs_any_queue_after.sql, QUERIES.claim_jobs_any_queue.sql]
    assert [job.id for job in claimed] == [7]
    assert producer.cursor() is None
    producer._conn = None


async def test_every_job_is_claimed_exactly_once_by_competing_producers(
    dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    """Three producers with their own cursors drain a queue while jobs of several
    priorities keep arriving, some behind their cursors; no job is lost or taken twice."""
    expected = set(await _insert(aconn, 300))
    producers = [_producer(dsn) for _ in range(3)]
    claimed: list[int] = []

    async def drain(producer: Producer) -> None:
        idle_rounds = 0
        while idle_rounds < 3:
            jobs = await producer.claim(8)
            claimed.extend(job.id for job in jobs)
            idle_rounds = 0 if jobs else idle_rounds + 1
            await asyncio.sleep(0)

    async def arrive() -> None:
        for round_number in range(20):
            priority = round_number % 3
            run_at = "now() - interval '1 day'" if round_number % 4 == 0 else "now()"
            expected.update(await _insert(aconn, 10, priority=priority, run_at=run_at))
            if round_number % 5 == 0:
                producers[round_number % 3].wake()
            await asyncio.sleep(0.002)

    try:
        await asyncio.gather(arrive(), *(drain(p) for p in producers))
        # Whatever arrived after the drains gave up is still claimable from the head.
        for producer in producers:
            while jobs := await producer.claim(8):
                claimed.extend(job.id for job in jobs)
    finally:
        for producer in producers:
            await producer.close()
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == expected
