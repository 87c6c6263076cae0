"""Helpers shared by the integration tests: an in-process worker and row readers.

Workers run in the test's own event loop (``Worker.run``), so a test can count what its
tasks did in plain Python objects. Reads go through a separate psycopg connection, so
they see only what the worker committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pgqueue import Queue
from pgqueue.worker import Worker, WorkerSettings
from tests._polling import async_wait_until

__all__ = [
    "aexecute",
    "arow",
    "background_worker",
    "row",
    "run_burst",
    "until_sleeping",
    "worker_settings",
]

# A burst that takes longer than this is stuck, not slow.
BURST_DEADLINE = 120.0


def worker_settings(**settings: Any) -> WorkerSettings:
    """Worker settings for tests: no signal handlers, fast rescue, given overrides."""
    values: dict[str, Any] = {"concurrency": 8, "install_signal_handlers": False}
    values.update(settings)
    return WorkerSettings(**values)


async def run_burst(queue: Queue, **settings: Any) -> Worker:
    """Run a burst worker until nothing is ready or running; return it for inspection."""
    worker = Worker(queue, worker_settings(burst=True, **settings))
    status = await asyncio.wait_for(worker.run(), BURST_DEADLINE)
    assert status == 0
    return worker


@asynccontextmanager
async def background_worker(queue: Queue, **settings: Any) -> AsyncIterator[Worker]:
    """A long-running worker in this loop; stopped cleanly (and awaited) on exit."""
    worker = Worker(queue, worker_settings(**settings))
    task = asyncio.create_task(worker.run(), name="test-worker")
    # Registered (first heartbeat done) and listening for NOTIFY before the test goes on.
    await async_wait_until(
        lambda: task.done() or worker.ready.is_set(), timeout=15,
        message="the worker to start listening",
    )
    if task.done():
        task.result()  # start-up failed: raise its error here
    try:
        yield worker
    finally:
        worker.request_stop()
        status = await asyncio.wait_for(task, 60)
        assert status == 0


async def until_sleeping(worker: Worker) -> None:
    """Wait until ``worker`` has nothing to claim and sleeps until something wakes it.

    After this, a job starts only if a wake-up (a NOTIFY) reaches the worker or its poll
    interval passes: what a test of wake-ups needs before it enqueues.
    """
    await asyncio.wait_for(worker.sleeping.wait(), 15)


def _select(schema: str, table: str) -> sql.Composed:
    return sql.SQL("SELECT * FROM {}.{} WHERE id = %s").format(
        sql.Identifier(schema), sql.Identifier(table)
    )


def row(
    dsn: str, job_id: int, table: str = "jobs", schema: str = "pgqueue"
) -> dict[str, Any] | None:
    """The row of job ``job_id`` in ``schema.table`` (``jobs`` or ``dead_jobs``), or None."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(_select(schema, table), (job_id,)).fetchone()


async def arow(
    dsn: str, job_id: int, table: str = "jobs", schema: str = "pgqueue"
) -> dict[str, Any] | None:
    """Async :func:`row`, for tests whose event loop runs a worker."""
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row
    ) as conn:
        cursor = await conn.execute(_select(schema, table), (job_id,))
        return await cursor.fetchone()


async def aexecute(dsn: str, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Run one statement in autocommit and return its rows (empty if it returns none)."""
    async with await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, row_factory=dict_row
    ) as conn:
        cursor = await conn.execute(query.encode(), params)
        return await cursor.fetchall() if cursor.description is not None else []
