"""Periodic jobs against a real database: the tick statement, code and run-time schedules.

Fast by construction: instead of waiting for a real minute, a test puts a schedule's
``next_run_at`` in the past and drives the scheduler's round itself (a standalone
:class:`Scheduler`, or a worker's woken by NOTIFY). The real-minute test with worker
processes is tests/e2e/test_periodic_workers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pgqueue import ConfigurationError, JobContext, Queue, ScheduleNotFound
from pgqueue.cron import parse_cron
from pgqueue.schedules import tick_key
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.scheduler import Scheduler
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, background_worker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def app(dsn: str) -> Iterator[Queue]:
    """A Queue with two code schedules (every minute, and daily in Paris)."""
    queue = Queue(dsn=dsn)

    @queue.periodic("* * * * *", queue="cron", priority=5, meta={"from": "cron"})
    @queue.task(name="minutely")
    def minutely(ctx: JobContext) -> str:
        return f"attempt {ctx.attempt}"

    @queue.periodic("@daily", tz="Europe/Paris", name="paris-midnight")
    @queue.task(name="daily")
    def daily() -> None:
        return None

    @queue.task(name="report")
    def report(day: str, *, pages: int = 1) -> str:
        return f"{day}:{pages}"

    try:
        yield queue
    finally:
        queue.close()


Make = Callable[..., Scheduler]


@pytest.fixture
async def scheduler(dsn: str) -> AsyncIterator[Make]:
    """Makes standalone schedulers, as a worker runs them; closes their connections
    (a scheduler borrows its connection and never closes it) at the end."""
    opened: list[psycopg.AsyncConnection[Any]] = []
    connections = WorkerConnections(dsn, "test-scheduler")

    async def connect() -> psycopg.AsyncConnection[Any]:
        conn = await connections.connect()
        opened.append(conn)
        return conn

    def make(queue: Queue, *, lease: float = 30.0, code: bool = True) -> Scheduler:
        return Scheduler(connect=connect, queries=queue.queries, lease=lease,
                         specs=list(queue.periodic_tasks.values()) if code else [])

    try:
        yield make
    finally:
        for conn in opened:
            await conn.close()


async def make_due(dsn: str, name: str, ago: str = "1 second") -> datetime:
    """Put ``name``'s next tick in the past (on a whole second); returns it."""
    rows = await aexecute(dsn, "UPDATE pgqueue.schedules SET next_run_at = "
                          "date_trunc('second', now() - %s::interval) WHERE name = %s "
                          "RETURNING next_run_at", (ago, name))
    assert rows, name
    tick: datetime = rows[0]["next_run_at"]
    return tick


async def jobs_of(dsn: str, task: str) -> list[dict[str, Any]]:
    return await aexecute(dsn, "SELECT * FROM pgqueue.jobs WHERE task = %s ORDER BY id",
                          (task,))


async def test_code_schedules_are_declared_with_their_next_tick(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    service = scheduler(app)
    await service.round()
    found = {info.name: info for info in await asyncio.to_thread(app.schedules)}
    assert set(found) == {"minutely", "paris-midnight"}
    minutely = found["minutely"]
    assert (minutely.source, minutely.state, minutely.cron, minutely.tz) == \
        ("code", "active", "* * * * *", "UTC")
    assert (minutely.queue, minutely.priority, minutely.meta) == ("cron", 5, {"from": "cron"})
    now = datetime.now(UTC)
    assert now < minutely.next_run_at <= now + timedelta(seconds=61)
    assert minutely.next_run_at.second == 0
    paris = found["paris-midnight"]
    assert paris.next_run_at == parse_cron("@daily", "Europe/Paris").next_after(now)
    assert paris.last_run_at is None and paris.last_job_id is None


async def test_a_tick_is_enqueued_once_by_many_schedulers(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    """Eight schedulers race for one due tick: one job, run_at = the tick."""
    services = [scheduler(app) for _ in range(8)]
    await services[0].round()  # declares
    tick = await make_due(dsn, "minutely")
    await asyncio.gather(*(service.round() for service in services))
    jobs = await jobs_of(dsn, "minutely")
    assert len(jobs) == 1
    job = jobs[0]
    assert job["run_at"] == tick
    assert job["idempotency_key"] == tick_key("minutely", tick)
    assert (job["queue"], job["priority"], job["meta"]) == ("cron", 5, {"from": "cron"})
    assert sum(service.enqueued for service in services) == 1
    info = await asyncio.to_thread(app.schedules)
    minutely = next(i for i in info if i.name == "minutely")
    assert minutely.last_job_id == job["id"] and minutely.last_run_at == tick
    assert minutely.next_run_at > datetime.now(UTC) - timedelta(seconds=1)


async def test_missed_ticks_are_not_backfilled(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    """Three hours without a worker: one job (for the first missed tick), then the next
    tick after now."""
    service = scheduler(app)
    await service.round()
    tick = await make_due(dsn, "minutely", "3 hours")
    await service.round()
    await service.round()
    jobs = await jobs_of(dsn, "minutely")
    assert [job["run_at"] for job in jobs] == [tick]
    rows = await aexecute(dsn, "SELECT next_run_at - now() AS ahead FROM pgqueue.schedules "
                          "WHERE name = 'minutely'")
    assert timedelta(0) < rows[0]["ahead"] <= timedelta(seconds=60)


async def test_a_running_worker_picks_up_a_runtime_schedule(app: Queue, dsn: str) -> None:
    """q.schedule while a worker runs: the NOTIFY wakes its scheduler (no restart), and
    the job runs with the schedule's arguments and options."""
    async with background_worker(app) as worker:
        await async_wait_until(lambda: worker.scheduler is not None
                               and worker.scheduler._declared, timeout=10)
        info = await asyncio.to_thread(
            app.schedule, "nightly-report", "0 3 * * *", "report", args=["today"],
            kwargs={"pages": 2}, queue="reports", priority=7, meta={"k": 1})
        assert (info.source, info.state, info.args, info.kwargs) == \
            ("runtime", "active", ["today"], {"pages": 2})
        # Make it due; the update of paused notifies, as an edit in SQL would.
        await aexecute(dsn, "UPDATE pgqueue.schedules SET next_run_at = now(), "
                       "paused = false WHERE name = 'nightly-report'")
        jobs = await async_wait_until(lambda: jobs_of(dsn, "report"), timeout=10)
        assert (jobs[0]["queue"], jobs[0]["priority"], jobs[0]["meta"]) == \
            ("reports", 7, {"k": 1})
        assert (jobs[0]["args"], jobs[0]["kwargs"]) == (["today"], {"pages": 2})


async def test_a_removed_code_schedule_turns_inactive(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    """A schedule no live worker declares any more is inactive: listed, not enqueued."""
    old = scheduler(app, lease=0.5)
    await old.round()  # an old deployment declares it, then stops renewing
    newer = Queue(dsn=dsn)  # the new deployment has no schedules in its code
    await async_wait_until(
        lambda: all(not i.active for i in newer.schedules()), timeout=10)
    assert {i.state for i in await asyncio.to_thread(newer.schedules)} == {"inactive"}
    await make_due(dsn, "minutely")
    service = scheduler(newer, code=False)
    await service.round()
    assert await jobs_of(dsn, "minutely") == []
    newer.close()


async def test_pause_and_resume(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    service = scheduler(app)
    await service.round()
    paused = await asyncio.to_thread(app.pause_schedule, "minutely")
    assert (paused.paused, paused.state) == (True, "paused")
    await make_due(dsn, "minutely", "2 hours")
    await service.round()
    assert await jobs_of(dsn, "minutely") == []
    resumed = await asyncio.to_thread(app.resume_schedule, "minutely")
    # Resuming starts from the next tick: the ones missed while paused never run.
    assert resumed.state == "active"
    assert resumed.next_run_at > datetime.now(UTC) - timedelta(seconds=1)
    await service.round()
    assert await jobs_of(dsn, "minutely") == []


def test_runtime_schedule_management(app: Queue) -> None:
    app.schedule("rt", "*/5 * * * *", "somewhere.else", args=[1, {"a": None}], tz="Asia/Tokyo")
    (info,) = [i for i in app.schedules() if i.name == "rt"]
    assert (info.task, info.args, info.tz, info.queue) == \
        ("somewhere.else", [1, {"a": None}], "Asia/Tokyo", "default")
    assert info.to_dict()["state"] == "active"
    replaced = app.schedule("rt", "@hourly", "report", args=["x"])
    assert (replaced.cron, replaced.task, replaced.tz) == ("@hourly", "report", "UTC")
    app.unschedule("rt")
    assert [i.name for i in app.schedules()] == []
    with pytest.raises(ScheduleNotFound, match="no schedule named 'rt'"):
        app.unschedule("rt")
    with pytest.raises(ScheduleNotFound):
        app.pause_schedule("rt")


def test_runtime_schedule_arguments_are_checked(app: Queue) -> None:
    with pytest.raises(ConfigurationError, match=r"invalid cron expression '\* \* \*'"):
        app.schedule("bad", "* * *", "report", args=["x"])
    with pytest.raises(ConfigurationError, match="unknown time zone 'Nowhere/City'"):
        app.schedule("bad", "* * * * *", "report", args=["x"], tz="Nowhere/City")
    with pytest.raises(Exception, match="missing a required argument: 'day'"):
        app.schedule("bad", "* * * * *", "report")
    with pytest.raises(ConfigurationError, match="invalid priority"):
        app.schedule("bad", "* * * * *", "report", args=["x"], priority="high")
    with pytest.raises(ConfigurationError, match="unknown option"):
        app.schedule("bad", "* * * * *", "report", args=["x"], run_in=5)
    assert app.schedules() == []


async def test_code_and_runtime_names_do_not_mix(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    service = scheduler(app)
    await service.round()
    with pytest.raises(ConfigurationError, match="declared in code"):
        await asyncio.to_thread(app.schedule, "minutely", "* * * * *", "report", args=["x"])


async def test_a_full_queue_skips_the_tick(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    """QueueFull: the tick is skipped with a warning, the schedule moves on."""
    service = scheduler(app)
    await service.round()
    await asyncio.to_thread(app.set_queue, "cron", max_queued=1)
    await asyncio.to_thread(app.enqueue_by_name, "other", queue="cron")
    tick = await make_due(dsn, "minutely")
    await service.round()
    assert await jobs_of(dsn, "minutely") == []
    rows = await aexecute(dsn, "SELECT next_run_at FROM pgqueue.schedules "
                          "WHERE name = 'minutely'")
    assert rows[0]["next_run_at"] > tick


async def test_a_schedule_broken_in_sql_is_paused_not_fatal(
    app: Queue, dsn: str, scheduler: Make
) -> None:
    service = scheduler(app, code=False)
    await asyncio.to_thread(app.schedule, "rt", "* * * * *", "report", args=["x"])
    await asyncio.to_thread(app.schedule, "rt2", "* * * * *", "report", args=["y"])
    await aexecute(dsn, "UPDATE pgqueue.schedules SET cron = 'every minute', "
                   "next_run_at = now() WHERE name = 'rt'")
    # A row the jobs table refuses (meta must be an object): paused too, the worker lives.
    await aexecute(dsn, "UPDATE pgqueue.schedules SET meta = '[]', "
                   "next_run_at = now() WHERE name = 'rt2'")
    await service.round()
    assert {i.name: i.paused for i in await asyncio.to_thread(app.schedules)} == \
        {"rt": True, "rt2": True}
    assert await jobs_of(dsn, "report") == []


async def test_a_tick_is_enqueued_while_every_slot_is_busy(app: Queue, dsn: str) -> None:
    """The scheduler does not wait for a free slot: the tick's job is inserted while the
    worker's only slot runs a job that does not end until the test says so."""
    release = asyncio.Event()

    @app.task(name="hold")
    async def hold() -> None:
        await release.wait()

    async with background_worker(app, concurrency=1, prefetch=0) as worker:
        await asyncio.to_thread(hold.enqueue)
        await async_wait_until(lambda: len(worker.executions) == 1, timeout=10)
        await asyncio.to_thread(app.schedule, "busy", "@daily", "report", args=["x"])
        await aexecute(dsn, "UPDATE pgqueue.schedules SET next_run_at = now(), "
                       "paused = false WHERE name = 'busy'")
        jobs = await async_wait_until(lambda: jobs_of(dsn, "report"), timeout=10)
        assert jobs[0]["status"] == "queued"  # inserted, waiting for the slot
        release.set()
