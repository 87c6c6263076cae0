"""Enqueueing inside the caller's transaction (``conn=``).

For every accepted connection type: the job is invisible to others until the commit; a
rollback leaves no job and sends no wake-up; a commit makes the job visible and sends
exactly one NOTIFY on ``pgqueue_jobs``. Anything else is a TypeError listing what works.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from pgqueue import JobContext, Queue
from tests._database import as_url
from tests.integration._worker_helpers import background_worker, row, until_sleeping

SYNC_KINDS = ["psycopg", "sqlalchemy-connection", "sqlalchemy-session"]
ASYNC_KINDS = ["psycopg-async", "sqlalchemy-async-connection", "sqlalchemy-async-session"]


def sqlalchemy_url(dsn: str) -> str:
    return as_url(dsn).replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def engine(dsn: str) -> Iterator[Engine]:
    created = create_engine(sqlalchemy_url(dsn))
    try:
        yield created
    finally:
        created.dispose()


@pytest.fixture
async def async_engine(dsn: str) -> AsyncIterator[AsyncEngine]:
    created = create_async_engine(sqlalchemy_url(dsn))
    try:
        yield created
    finally:
        await created.dispose()


class Notifications:
    """A LISTEN connection on the queue's wake-up channel."""

    def __init__(self, dsn: str, channel: str = "pgqueue_jobs") -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(f'LISTEN "{channel}"'.encode())

    def after_commit(self) -> list[str]:
        """Payloads up to and including the first one (waiting up to 5 s for it), plus
        any that arrive within a short drain after it."""
        received = [n.payload for n in self.conn.notifies(timeout=5, stop_after=1)]
        received += [n.payload for n in self.conn.notifies(timeout=0.2)]
        return received

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def notifications(dsn: str) -> Iterator[Notifications]:
    listener = Notifications(dsn)
    try:
        yield listener
    finally:
        listener.close()


@contextlib.contextmanager
def sync_transaction(kind: str, dsn: str, engine: Engine) -> Iterator[tuple[Any, Any]]:
    """(conn for enqueue, object with commit()/rollback()) for one transaction."""
    if kind == "psycopg":
        with psycopg.connect(dsn) as conn:
            yield conn, conn
    elif kind == "sqlalchemy-connection":
        with engine.connect() as connection:
            yield connection, connection
    else:
        with Session(engine) as session:
            yield session, session


@contextlib.asynccontextmanager
async def async_transaction(
    kind: str, dsn: str, engine: AsyncEngine
) -> AsyncIterator[tuple[Any, Any]]:
    if kind == "psycopg-async":
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            yield conn, conn
    elif kind == "sqlalchemy-async-connection":
        async with engine.connect() as connection:
            yield connection, connection
    else:
        async with AsyncSession(engine) as session:
            yield session, session


def count_jobs(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert found is not None
    return int(found[0])


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_sync_connection_rollback_leaves_no_job_and_commit_notifies_once(
    q: Queue, dsn: str, engine: Engine, notifications: Notifications, kind: str
) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    with sync_transaction(kind, dsn, engine) as (conn, tx):
        lost = task.using(conn=conn).enqueue(1)
        assert count_jobs(dsn) == 0  # not visible outside the transaction
        tx.rollback()
    assert row(dsn, lost.id) is None

    with sync_transaction(kind, dsn, engine) as (conn, tx):
        kept = task.using(conn=conn, queue="mail").enqueue(2)
        assert count_jobs(dsn) == 0
        tx.commit()
    stored = row(dsn, kept.id)
    assert stored is not None
    assert (stored["args"], stored["queue"]) == ([2], "mail")
    assert count_jobs(dsn) == 1
    # One wake-up, from the commit; the rolled-back insert sent none (it would come first).
    assert notifications.after_commit() == ["mail"]


@pytest.mark.parametrize("kind", ASYNC_KINDS)
async def test_async_connection_rollback_leaves_no_job_and_commit_notifies_once(
    dsn: str, async_engine: AsyncEngine, kind: str
) -> None:
    q = Queue(dsn=dsn)

    @q.task(name="t")
    def task(n: int) -> None: ...

    notifications = Notifications(dsn)
    try:
        async with async_transaction(kind, dsn, async_engine) as (conn, tx):
            lost = await task.using(conn=conn).enqueue_async(1)
            assert await asyncio.to_thread(count_jobs, dsn) == 0
            await tx.rollback()
        assert await asyncio.to_thread(row, dsn, lost.id) is None

        async with async_transaction(kind, dsn, async_engine) as (conn, tx):
            kept = await task.using(conn=conn, queue="mail").enqueue_async(2)
            many = await task.using(conn=conn, queue="mail").enqueue_many_async([(3,), (4,)])
            assert await asyncio.to_thread(count_jobs, dsn) == 0
            await tx.commit()
        assert await asyncio.to_thread(count_jobs, dsn) == 3
        stored = await asyncio.to_thread(row, dsn, kept.id)
        assert stored is not None
        assert stored["args"] == [2]
        assert [job.id for job in many] == [kept.id + 1, kept.id + 2]
        # Nothing from the rollback; the commit's wake-up (PostgreSQL folds identical
        # notifications of one transaction into one).
        assert await asyncio.to_thread(notifications.after_commit) == ["mail"]
    finally:
        notifications.close()
        await q.close_async()


def test_enqueue_many_and_by_name_join_the_transaction(
    q: Queue, dsn: str, engine: Engine
) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    with Session(engine) as session:
        session.execute(text("CREATE TABLE orders (id int)"))
        session.execute(text("INSERT INTO orders VALUES (1)"))
        task.using(conn=session).enqueue_many([(1,), (2,)])
        q.enqueue_by_name("t", args=[3], conn=session)
        q.enqueue_by_name("elsewhere.task", args=[4], conn=session)
        session.rollback()
    assert count_jobs(dsn) == 0

    with Session(engine) as session:
        session.execute(text("CREATE TABLE orders (id int)"))
        session.execute(text("INSERT INTO orders VALUES (1)"))
        task.using(conn=session).enqueue_many([(1,), (2,)])
        q.enqueue_by_name("elsewhere.task", args=[4], conn=session)
        session.commit()
    assert count_jobs(dsn) == 2 + 1


async def test_a_committed_enqueue_wakes_an_idle_worker(dsn: str, engine: Engine) -> None:
    q = Queue(dsn=dsn)
    ran = asyncio.Event()
    loop = asyncio.get_running_loop()

    @q.task(name="t")
    def task(ctx: JobContext) -> None:
        loop.call_soon_threadsafe(ran.set)

    def enqueue_in_session() -> None:
        with Session(engine) as session:
            task.using(conn=session).enqueue()
            session.commit()

    try:
        async with background_worker(q, poll_interval=60) as worker:
            await until_sleeping(worker)  # idle: the next poll is a minute away
            await asyncio.to_thread(enqueue_in_session)
            await asyncio.wait_for(ran.wait(), 5)
    finally:
        await q.close_async()


def test_a_wrong_connection_type_is_a_type_error_listing_what_works(q: Queue) -> None:
    @q.task(name="t")
    def task() -> None: ...

    with pytest.raises(TypeError) as raised:
        task.using(conn=object()).enqueue()
    message = str(raised.value)
    for accepted in ("psycopg Connection", "AsyncConnection", "SQLAlchemy Connection",
                     "Session", "AsyncSession"):
        assert accepted in message
    with pytest.raises(TypeError, match="psycopg Connection"):
        q.enqueue_by_name("t", conn="postgresql://nope")


async def test_sync_and_async_connections_are_not_mixed_up(
    dsn: str, async_engine: AsyncEngine
) -> None:
    q = Queue(dsn=dsn)

    @q.task(name="t")
    def task() -> None: ...

    try:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            with pytest.raises(TypeError, match="enqueue_async"):
                task.using(conn=aconn).enqueue()
        async with AsyncSession(async_engine) as session:
            with pytest.raises(TypeError, match="enqueue_async"):
                task.using(conn=session).enqueue()
        with psycopg.connect(dsn) as conn, pytest.raises(TypeError, match="enqueue\\(\\)"):
            await task.using(conn=conn).enqueue_async()
        assert await asyncio.to_thread(count_jobs, dsn) == 0
    finally:
        await q.close_async()


async def test_wait_returns_the_value_a_task_returns_after_its_transaction(
    aq: Queue, dsn: str
) -> None:
    """ctx.transaction() commits the job's success before the task returns its value;
    wait() must not return in between (it used to, with None)."""
    gap = asyncio.Event()

    @aq.task(name="late_value")
    async def late_value(ctx: JobContext) -> dict[str, int]:
        async with ctx.transaction() as conn:
            await conn.execute("SELECT 1")
        await gap.wait()  # succeeded in SQL, value not returned yet
        return {"value": 7}

    job = await late_value.enqueue_async()
    async with background_worker(aq):
        waiter = asyncio.create_task(job.wait_async(timeout=10))
        await asyncio.sleep(0.3)  # the job is succeeded; the waiter must keep waiting
        assert (row(dsn, job.id) or {})["status"] == "succeeded"
        assert not waiter.done()
        gap.set()
        assert await waiter == {"value": 7}
    assert (row(dsn, job.id) or {})["result"] == {"value": 7}
