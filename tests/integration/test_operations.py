"""Managing a queue: stats, listing jobs, dead jobs (list, retry, purge) and workers."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import psycopg
import pytest

from pgqueue import ConfigurationError, Discard, JobContext, JobNotFound, Queue
from pgqueue.dead_jobs import RefusalReason, RetryRefusal
from pgqueue.stats import QueueStats, WorkerInfo
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, background_worker, row, run_burst


def execute(dsn: str, query: str, params: Any = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query.encode(), params)


def make_dead(dsn: str, job_id: int, *, error: str = "Traceback: boom",
              failed_ago: str = "0 seconds") -> None:
    """Move a live job to dead_jobs as the worker would."""
    execute(
        dsn,
        "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = %s RETURNING *) "
        "INSERT INTO pgqueue.dead_jobs (id, queue, task, args, kwargs, priority, run_at, "
        "attempts, max_attempts, idempotency_key, meta, created_at, error, last_error, "
        "failed_at) SELECT id, queue, task, args, kwargs, priority, run_at, max_attempts, "
        "max_attempts, idempotency_key, meta, created_at, %s, %s, now() - %s::interval "
        "FROM gone",
        (job_id, error, error, failed_ago),
    )


# -- stats ---------------------------------------------------------------------------------


def test_stats_count_jobs_per_queue_and_status(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    for _ in range(3):
        task.enqueue()
    task.using(queue="email").enqueue()
    task.using(queue="email", run_in=3600).enqueue()
    retrying = task.using(queue="email").enqueue()
    execute(dsn, "UPDATE pgqueue.jobs SET attempts = 1, run_at = now() + interval '1 minute' "
                 "WHERE id = %s", (retrying.id,))
    running = task.using(queue="email").enqueue()
    execute(dsn, "UPDATE pgqueue.jobs SET status = 'running', attempts = 1, worker_id = 'w', "
                 "lease_expires_at = now() + interval '30 seconds' WHERE id = %s", (running.id,))
    done = task.using(queue="email").enqueue()
    execute(dsn, "UPDATE pgqueue.jobs SET status = 'succeeded', finished_at = now() "
                 "WHERE id = %s", (done.id,))
    task.using(queue="email").enqueue().cancel()
    make_dead(dsn, task.using(queue="reports").enqueue().id)
    execute(dsn, "UPDATE pgqueue.jobs SET run_at = now() - interval '90 seconds' "
                 "WHERE queue = 'default'")

    stats = {entry.queue: entry for entry in q.stats()}
    assert list(stats) == ["default", "email", "reports"]  # ordered by name
    default = stats["default"]
    assert default.oldest_queued_age_seconds is not None
    assert 89 <= default.oldest_queued_age_seconds <= 120
    assert default == QueueStats("default", queued=3, scheduled=0, retrying=0, waiting=0,
                                 running=0, succeeded=0, cancelled=0, dead=0,
                                 oldest_queued_age_seconds=default.oldest_queued_age_seconds)
    email = stats["email"]
    assert email == QueueStats("email", queued=1, scheduled=1, retrying=1, waiting=0,
                               running=1, succeeded=1, cancelled=1, dead=0,
                               oldest_queued_age_seconds=email.oldest_queued_age_seconds)
    assert stats["reports"] == QueueStats("reports", queued=0, scheduled=0, retrying=0,
                                          waiting=0, running=0, succeeded=0, cancelled=0,
                                          dead=1,
                                          oldest_queued_age_seconds=None)
    # The JSON shape of pgq stats --json and of an HTTP API: exactly these keys.
    assert stats["reports"].to_dict() == {
        "queue": "reports", "queued": 0, "scheduled": 0, "retrying": 0, "waiting": 0,
        "running": 0, "succeeded": 0, "cancelled": 0, "dead": 1,
        "oldest_queued_age_seconds": None,
    }


def test_stats_of_an_empty_queue_table(q: Queue) -> None:
    assert q.stats() == []


# -- listing jobs --------------------------------------------------------------------------


def test_list_jobs_filters_by_status_queue_and_task(q: Queue, dsn: str) -> None:
    @q.task(name="a")
    def a() -> None: ...

    @q.task(name="b")
    def b() -> None: ...

    first = a.enqueue()
    second = a.using(queue="email").enqueue()
    third = b.using(queue="email", run_in=600).enqueue()
    fourth = b.enqueue()
    make_dead(dsn, fourth.id)

    assert [j.id for j in q.list_jobs()] == [fourth.id, third.id, second.id, first.id]
    assert [j.id for j in q.list_jobs(status="queued")] == [second.id, first.id]
    assert [j.id for j in q.list_jobs(status="scheduled")] == [third.id]
    assert [j.id for j in q.list_jobs(status="dead")] == [fourth.id]
    assert [j.id for j in q.list_jobs(queue="email")] == [third.id, second.id]
    assert [j.id for j in q.list_jobs(task="b")] == [fourth.id, third.id]
    assert [j.id for j in q.list_jobs(task="b", status="dead")] == [fourth.id]
    assert [j.id for j in q.list_jobs(queue="email", status="queued")] == [second.id]
    assert [j.id for j in q.list_jobs(limit=2)] == [fourth.id, third.id]
    assert q.list_jobs(status="running") == []
    assert [j.status for j in q.list_jobs()] == ["dead", "scheduled", "queued", "queued"]
    with pytest.raises(ConfigurationError, match="unknown status"):
        q.list_jobs(status="finished")
    with pytest.raises(ConfigurationError, match="limit"):
        q.list_jobs(limit=0)


def test_job_to_dict_has_the_columns_and_the_status(q: Queue) -> None:
    @q.task(name="a")
    def a(x: int) -> None: ...

    data = a.enqueue(1).to_dict()
    for column in ("id", "queue", "task", "args", "kwargs", "status", "priority", "run_at",
                   "attempts", "max_attempts", "idempotency_key", "lease_expires_at",
                   "worker_id", "last_error", "result", "meta", "created_at", "started_at",
                   "finished_at"):
        assert column in data
    assert data["status"] == "queued"
    assert isinstance(data["run_at"], str)


# -- dead jobs -----------------------------------------------------------------------------


async def test_dead_jobs_list_retry_keeps_the_id_and_resets_attempts(
    aq: Queue, dsn: str
) -> None:
    attempts: list[tuple[int, int]] = []
    failing = True

    @aq.task(name="flaky", max_attempts=2, retry_intervals=[0])
    def flaky(n: int, ctx: JobContext) -> None:
        attempts.append((ctx.job.id, ctx.attempt))
        if failing:
            raise RuntimeError(f"bad {n}")

    jobs = [await flaky.using(meta={"n": n}).enqueue_async(n) for n in range(3)]
    await run_burst(aq)

    dead = await asyncio.to_thread(aq.dead_jobs)
    assert sorted(j.id for j in dead) == [j.id for j in jobs]
    assert all(j.status == "dead" and j.attempts == 2 for j in dead)
    assert all("RuntimeError: bad" in (j.error or "") for j in dead)

    outcome = await asyncio.to_thread(aq.retry_dead, [jobs[0].id])
    assert (outcome.retried, outcome.refused) == ([jobs[0].id], {})
    revived = await asyncio.to_thread(row, dsn, jobs[0].id)
    assert revived is not None
    assert (revived["status"], revived["attempts"], revived["meta"], revived["args"]) == (
        "queued", 0, {"n": 0}, [0])
    assert await asyncio.to_thread(row, dsn, jobs[0].id, "dead_jobs") is None

    single = await asyncio.to_thread(aq.retry_dead_job, jobs[1].id)
    assert (single.id, single.status, single.attempts) == (jobs[1].id, "queued", 0)

    with pytest.raises(JobNotFound, match="no dead job with id 999999"):
        await asyncio.to_thread(aq.retry_dead_job, 999_999)
    # Already retried, or never there: refused as not found, with the reason as a value.
    again = await asyncio.to_thread(aq.retry_dead, [jobs[0].id, 999_999])
    assert again.retried == []
    assert again.refused == {
        jobs[0].id: RetryRefusal(jobs[0].id, RefusalReason.NOT_FOUND),
        999_999: RetryRefusal(999_999, RefusalReason.NOT_FOUND),
    }
    assert again.to_dict() == {"retried": [], "refused": [
        {"id": jobs[0].id, "reason": "no dead job with this id"},
        {"id": 999_999, "reason": "no dead job with this id"},
    ]}

    # The revived jobs run again, their attempts counted afresh.
    attempts.clear()
    failing = False
    await run_burst(aq)
    assert sorted(attempts) == [(jobs[0].id, 1), (jobs[1].id, 1)]
    assert [j.id for j in await asyncio.to_thread(aq.dead_jobs)] == [jobs[2].id]


def test_retry_all_dead_jobs_of_one_queue(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    a = task.using(queue="a").enqueue()
    b = task.using(queue="b").enqueue()
    c = task.using(queue="a").enqueue()
    for job in (a, b, c):
        make_dead(dsn, job.id)
    outcome = q.retry_dead(queue="a")
    assert sorted(outcome.retried) == sorted([a.id, c.id])
    assert [j.id for j in q.dead_jobs()] == [b.id]
    assert q.retry_dead().retried == [b.id]
    assert q.dead_jobs() == []


def test_purge_dead_deletes_only_old_enough_dead_jobs(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    old = task.enqueue()
    old_other_queue = task.using(queue="other").enqueue()
    recent = task.enqueue()
    live = task.enqueue()
    make_dead(dsn, old.id, failed_ago="8 days")
    make_dead(dsn, old_other_queue.id, failed_ago="8 days")
    make_dead(dsn, recent.id, failed_ago="1 hour")

    assert q.purge_dead(7 * 86400, queue="other") == 1
    assert q.purge_dead(7 * 86400) == 1
    assert row(dsn, old.id, "dead_jobs") is None
    assert row(dsn, old_other_queue.id, "dead_jobs") is None
    assert row(dsn, recent.id, "dead_jobs") is not None
    assert row(dsn, live.id) is not None
    assert q.purge_dead(0) == 1
    assert q.dead_jobs() == []


def test_dead_jobs_filters_by_queue_newest_failure_first(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    older = task.enqueue()
    newer = task.enqueue()
    elsewhere = task.using(queue="x").enqueue()
    make_dead(dsn, older.id, failed_ago="2 hours")
    make_dead(dsn, newer.id, failed_ago="1 hour")
    make_dead(dsn, elsewhere.id)
    assert [j.id for j in q.dead_jobs(queue="default")] == [newer.id, older.id]
    assert [j.id for j in q.dead_jobs(limit=1)] == [elsewhere.id]


# -- workers -------------------------------------------------------------------------------


async def test_a_worker_registers_and_removes_its_row_on_a_clean_stop(
    aq: Queue, dsn: str
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @aq.task(name="hold")
    async def hold() -> None:
        started.set()
        await release.wait()

    job = await hold.enqueue_async()
    async with background_worker(aq, concurrency=3) as worker:
        found = await asyncio.to_thread(aq.workers)
        assert len(found) == 1
        registered = found[0]
        assert registered.id == worker.id
        assert registered.queues == []  # no queue list: every queue
        assert registered.concurrency == 3
        assert registered.pid == os.getpid()
        assert registered.hostname == socket.gethostname()
        assert registered.started_at <= registered.last_heartbeat_at
        assert registered.status == "alive"
        await asyncio.wait_for(started.wait(), 10)
        stored = await asyncio.to_thread(row, dsn, job.id)
        assert stored is not None
        assert stored["worker_id"] == worker.id  # jobs.worker_id equals workers.id
        release.set()
    assert await asyncio.to_thread(aq.workers) == []


async def test_a_worker_with_queues_records_them_and_claims_only_those(
    aq: Queue, dsn: str
) -> None:
    ran: list[str] = []

    @aq.task(name="t")
    def task(label: str) -> None:
        ran.append(label)

    await task.using(queue="email").enqueue_async("email")
    await task.using(queue="reports").enqueue_async("reports")
    await task.enqueue_async("default")
    async with background_worker(aq, queues=["email", "default"]) as worker:
        registered = await asyncio.to_thread(aq.workers)
        assert [(w.id, w.queues) for w in registered] == [(worker.id, ["email", "default"])]
        await async_wait_until(lambda: len(ran) == 2, timeout=10)
    assert sorted(ran) == ["default", "email"]
    remaining = await aexecute(dsn, "SELECT queue, status FROM pgqueue.jobs "
                                    "WHERE status = 'queued'")
    assert remaining == [{"queue": "reports", "status": "queued"}]


async def test_a_burst_worker_removes_its_row_too(aq: Queue) -> None:
    @aq.task(name="t")
    async def task() -> None:
        raise Discard("no")

    await task.enqueue_async()
    await run_burst(aq)
    assert await asyncio.to_thread(aq.workers) == []


def test_workers_are_alive_until_their_row_lease_runs_out(q: Queue, dsn: str) -> None:
    execute(
        dsn,
        "INSERT INTO pgqueue.workers (id, hostname, pid, queues, concurrency, started_at, "
        "last_heartbeat_at, lease_expires_at) VALUES "
        "('h:1:a', 'h', 1, '{}', 4, now() - interval '2 minutes', now() - interval '1 minute', "
        "now() - interval '1 second'), "
        "('h:2:b', 'h', 2, '{email}', 8, now() - interval '1 minute', now(), "
        "now() + interval '30 seconds')",
    )
    found = q.workers()
    assert [(w.id, w.status) for w in found] == [("h:1:a", "expired"), ("h:2:b", "alive")]
    assert isinstance(found[1], WorkerInfo)
    # The JSON shape of pgq workers --json: the table's columns plus status, ISO datetimes.
    data = found[1].to_dict()
    assert set(data) == {"id", "hostname", "pid", "queues", "concurrency", "stuck", "started_at",
                         "last_heartbeat_at", "lease_expires_at", "status"}
    assert (data["queues"], data["concurrency"], data["status"]) == (["email"], 8, "alive")
    assert data["started_at"] == found[1].started_at.isoformat()
