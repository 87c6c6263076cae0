"""Enqueueing through PgBouncer in transaction mode (a real pgbouncer, see tests/_pgbouncer.py).

In transaction mode each transaction may run on another server connection. psycopg
prepares a statement on the server after its fifth execution on a connection; through
the pooler that statement then lands on a server connection that does not have it
(``InvalidSqlStatementName``) or that already has another client's statement of the
same name (``DuplicatePreparedStatement``), or binds another client's statement. With
``pool_mode=transaction`` in its DSN a Queue's connections never prepare, and every
enqueue path works behind the pooler. (tests/e2e/test_pgbouncer_workers.py runs workers behind it.)
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from pgqueue import JobContext, Queue
from pgqueue.worker.connections import CLAIMS, WorkerConnections
from tests._pgbouncer import POOL_SIZE, PgBouncer

THREADS = 4
JOBS_PER_THREAD = 150


@pytest.fixture
def pooled(dsn: str, pgbouncer: PgBouncer) -> str:
    """This test's database, through the pooler, with the DSN option that says so."""
    return pgbouncer.dsn(dsn) + " pool_mode=transaction"


def _count(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT id) FROM pgqueue.jobs").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_enqueue_from_four_threads_through_the_pooler(pooled: str, dsn: str) -> None:
    queue = Queue(dsn=pooled)
    assert "pool_mode" not in queue.dsn  # libpq never sees pgqueue's own option

    @queue.task(name="work")
    def work(n: int, ctx: JobContext) -> None: ...

    failures: list[BaseException] = []
    ids: list[int] = []
    lock = threading.Lock()

    def enqueue_many_times(offset: int) -> None:
        try:
            mine = [work.enqueue(offset + n).id for n in range(JOBS_PER_THREAD)]
            keyed = work.using(idempotency_key=f"k{offset}")
            mine += [keyed.enqueue(offset).id for _ in range(10)]  # the holder's read path
            mine += [queue.enqueue_by_name("work", args=[offset]).id for _ in range(10)]
            mine += work.enqueue_many([(offset + n,) for n in range(20)]).ids
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
            return
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=enqueue_many_times, args=(i * 10_000,))
               for i in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert failures == []
        assert all(not thread.is_alive() for thread in threads)
        # One row per distinct id returned; the keyed enqueues share one job per thread.
        assert _count(dsn) == (len(set(ids)), len(set(ids)))
        assert len(set(ids)) == THREADS * (JOBS_PER_THREAD + 1 + 10 + 20)
        assert queue.get_job(ids[0]) is not None
    finally:
        queue.close()


def test_bulk_copy_and_the_callers_connection_through_the_pooler(
    pooled: str, dsn: str, pgbouncer: PgBouncer
) -> None:
    pgbouncer_dsn = pgbouncer.dsn(dsn)
    queue = Queue(dsn=pooled)
    assert queue.pool_mode == "transaction"

    @queue.task(name="work")
    def work(n: int) -> None: ...

    try:
        for _ in range(3):
            assert len(work.enqueue_many([(n,) for n in range(2500)])) == 2500  # COPY
        # The caller's own connection, set up for the pooler as psycopg's documentation
        # says (prepare_threshold=None): pgqueue's statements follow it.
        with psycopg.connect(pgbouncer_dsn, prepare_threshold=None) as conn:
            for n in range(20):
                work.using(conn=conn).enqueue(n)
        assert _count(dsn) == (3 * 2500 + 20, 3 * 2500 + 20)
    finally:
        queue.close()


async def test_async_enqueue_from_four_tasks_through_the_pooler(pooled: str, dsn: str) -> None:
    queue = Queue(dsn=pooled)

    @queue.task(name="work")
    async def work(n: int) -> None: ...

    async def enqueue_many_times(offset: int) -> list[Any]:
        return [(await work.enqueue_async(offset + n)).id for n in range(JOBS_PER_THREAD)]

    try:
        results = await asyncio.gather(*(enqueue_many_times(i * 10_000) for i in range(THREADS)))
    finally:
        await queue.close_async()
    ids = {job_id for result in results for job_id in result}
    assert len(ids) == THREADS * JOBS_PER_THREAD
    assert await asyncio.to_thread(_count, dsn) == (len(ids), len(ids))


# What a worker's claim connection must see inside each of its transactions
# (pgqueue/worker/connections.py, CLAIMS), and what the pooler's server sessions keep.
SHOW = "SELECT current_setting('enable_sort'), current_setting('synchronous_commit')"


async def test_worker_links_apply_their_settings_in_every_transaction(
    pgbouncer: PgBouncer, dsn: str
) -> None:
    connections = WorkerConnections(pgbouncer.dsn(dsn), "pooled-test", pooled=True)
    claims = connections.link(CLAIMS)
    assert not claims.prepare
    # More clients than the pool's two server connections, so that every round may land
    # on a server connection another client used last; and more rounds than psycopg's
    # prepare threshold (5), so that a prepared statement would have been made.
    conns = [await claims() for _ in range(POOL_SIZE + 2)]
    try:
        for round_ in range(12):
            for conn in conns:
                async with claims.applied(conn):
                    cursor = await conn.execute(SHOW)
                    assert await cursor.fetchone() == ("off", "off"), round_
                # Outside the block: the server session's own values, never left changed.
                cursor = await conn.execute(SHOW)
                assert await cursor.fetchone() == ("on", "on"), round_
        # A link without settings runs its statements as they are.
        plain = connections.link()
        conn = await plain()
        async with plain.applied(conn):
            cursor = await conn.execute(SHOW)
            assert await cursor.fetchone() == ("on", "on")
        await conn.close()
    finally:
        for conn in conns:
            await conn.close()


async def test_a_direct_worker_link_sets_its_settings_once_per_connection(dsn: str) -> None:
    claims = WorkerConnections(dsn, "direct-test").link(CLAIMS)
    assert claims.prepare
    conn = await claims()
    try:
        cursor = await conn.execute(SHOW)  # startup options: no block needed
        assert await cursor.fetchone() == ("off", "off")
    finally:
        await conn.close()
