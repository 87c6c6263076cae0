"""The same library under a non-default schema name: nothing may assume ``pgqueue``."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from pgqueue import Discard, JobContext, Queue
from pgqueue.db.queries import for_schema
from pgqueue.worker.maintenance import Maintenance
from tests._polling import async_wait_until
from tests.integration._worker_helpers import (
    aexecute,
    arow,
    background_worker,
    run_burst,
    until_sleeping,
)

SCHEMA = "jobs_custom"


@pytest.fixture
def schema() -> str:
    return SCHEMA


async def test_nothing_is_created_in_the_default_schema(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ('pgqueue', %s)", (SCHEMA,)
        )
        assert await cursor.fetchall() == [(SCHEMA,)]


async def test_enqueue_run_and_read_jobs(aq: Queue, dsn: str) -> None:
    @aq.task(name="double")
    async def double(x: int, ctx: JobContext) -> int:
        ctx.set_progress("half-way")
        return int(await ctx.step("double", lambda: 2 * x))

    @aq.task(name="doomed")
    def doomed(ctx: JobContext) -> None:
        ctx.step("before", lambda: "kept")
        raise Discard("never works")

    job = await double.using(idempotency_key="k").enqueue_async(21)
    assert (await double.using(idempotency_key="k").enqueue_async(21)).id == job.id
    many = await double.enqueue_many_async([(1,), (2,)])
    dead = await doomed.enqueue_async()
    await run_burst(aq)

    stored = await arow(dsn, job.id, schema=SCHEMA)
    assert stored is not None
    assert (stored["status"], stored["result"], stored["meta"]) == (
        "succeeded", 42, {"progress": "half-way"})
    assert [(await arow(dsn, j.id, schema=SCHEMA) or {}).get("result") for j in many] == [2, 4]
    buried = await arow(dsn, dead.id, "dead_jobs", schema=SCHEMA)
    assert buried is not None
    assert "never works" in buried["error"]
    found = await aq.get_job_async(dead.id)
    assert found is not None
    assert found.status == "dead"
    stats = {entry.queue: entry for entry in await asyncio.to_thread(aq.stats)}
    assert (stats["default"].succeeded, stats["default"].dead) == (3, 1)
    assert (await asyncio.to_thread(aq.retry_dead_job, dead.id)).status == "queued"
    async with await psycopg.AsyncConnection.connect(dsn) as conn:  # ctx.step's table
        cursor = await conn.execute(
            f"SELECT job_id, name, result FROM {SCHEMA}.job_steps ORDER BY job_id".encode())
        assert await cursor.fetchall() == [(job.id, "double", 42), (many[0].id, "double", 2),
                                           (many[1].id, "double", 4), (dead.id, "before", "kept")]


async def test_wake_ups_use_the_schema_channel(aq: Queue, dsn: str) -> None:
    ran = asyncio.Event()

    @aq.task(name="ping")
    async def ping() -> None:
        ran.set()

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
        await listener.execute(f'LISTEN "{SCHEMA}_jobs"'.encode())
        async with background_worker(aq, poll_interval=60) as worker:
            await until_sleeping(worker)
            await ping.enqueue_async()
            await asyncio.wait_for(ran.wait(), 5)
            rows = await asyncio.to_thread(aq.workers)
            assert [w.id for w in rows] == [worker.id]
        notify = await anext(aiter(listener.notifies(timeout=5, stop_after=1)))
        assert notify.channel == f"{SCHEMA}_jobs"
        assert notify.payload == "default"
    assert await asyncio.to_thread(aq.workers) == []


async def test_rescue_and_prune_work_in_the_schema(aq: Queue, dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(
            f"INSERT INTO {SCHEMA}.jobs (task, status, attempts, worker_id, lease_expires_at) "
            "VALUES ('t', 'running', 1, 'ghost', now() - interval '1 second'), "
            "('t', 'succeeded', 1, 'w', NULL)".encode()
        )
        # as the completer leaves a job that succeeded two days ago (result_ttl one day)
        await conn.execute(f"UPDATE {SCHEMA}.jobs SET finished_at = now() - interval '2 days', "
                           "expires_at = now() - interval '1 day' "
                           "WHERE status = 'succeeded'".encode())

        async def connect() -> psycopg.AsyncConnection[object]:
            return await psycopg.AsyncConnection.connect(dsn, autocommit=True)

        service = Maintenance(connect=connect, queries=for_schema(SCHEMA))
        try:
            assert await service.rescue() == 1
            assert await service.prune() == 1
        finally:
            await service.close()
        cursor = await conn.execute(f"SELECT status, last_error FROM {SCHEMA}.jobs".encode())
        [(status, error)] = await cursor.fetchall()
    assert status == "queued"
    assert "lease expired" in error


async def test_bulk_enqueue_copies_into_the_custom_schema(
    aq: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """COPY, its sequence and its id lookup name the queue's schema, also when another
    session's job lands between the COPY's first id and its rows."""
    from pgqueue.db import plans
    from pgqueue.operations import COPY_MIN_JOBS

    @aq.task(name="t")
    async def task(n: int) -> None: ...

    run_step = plans._run_step_async
    copies: list[int] = []

    async def with_a_concurrent_enqueue(conn: object, step: object) -> object:
        if isinstance(step, plans.Copy):
            copies.append(1)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as other:
                await other.execute(
                    f"INSERT INTO {SCHEMA}.jobs (task, args) VALUES ('t', '[-1]')".encode()
                )
        return await run_step(conn, step)  # type: ignore[arg-type]

    monkeypatch.setattr(plans, "_run_step_async", with_a_concurrent_enqueue)
    jobs = await task.enqueue_many_async([(n,) for n in range(COPY_MIN_JOBS)])
    assert copies == [1]
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            f"SELECT id, (args->>0)::int FROM {SCHEMA}.jobs ORDER BY id".encode()
        )
        stored: dict[int, int] = dict(await cursor.fetchall())
    assert len(stored) == COPY_MIN_JOBS + 1
    assert [stored[job_id] for job_id in jobs.ids] == list(range(COPY_MIN_JOBS))


async def test_periodic_ticks_under_a_custom_schema(aq: Queue, dsn: str) -> None:
    """A code schedule declared in the custom schema; a run-time one added while the worker
    runs wakes it on the custom schema's channel, and its tick is enqueued there."""
    @aq.periodic("@yearly")
    @aq.task(name="yearly")
    def yearly() -> None: ...

    @aq.task(name="echo")
    def echo(value: str) -> str:
        return value

    async with background_worker(aq) as worker:
        assert worker.scheduler is not None
        await async_wait_until(lambda: aq.schedules(), timeout=10,
                               message="the worker to declare its code schedule")
        await asyncio.to_thread(aq.schedule, "rt", "@daily", "echo", args=["x"])
        await aexecute(dsn, f"UPDATE {SCHEMA}.schedules SET next_run_at = now(), "
                       "paused = false WHERE name = 'rt'")
        await async_wait_until(
            lambda: aexecute(dsn, f"SELECT id FROM {SCHEMA}.jobs WHERE task = 'echo'"),
            timeout=10, message="the tick's job in the custom schema")
    names = {info.name: info.source for info in await asyncio.to_thread(aq.schedules)}
    assert names == {"yearly": "code", "rt": "runtime"}
