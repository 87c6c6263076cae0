"""Throughput counts (job_counts, revision 0011): workers count the outcomes they record,
write them per heartbeat and at stop, maintenance prunes old ones, and the
``throughput`` plan sums them over workers."""

from __future__ import annotations

from collections import Counter

import pytest

from pgqueue import Discard, JobContext, Queue, Retry, Snooze
from pgqueue.errors import ConfigurationError
from pgqueue.stats import ThroughputPoint, throughput
from pgqueue.worker import Worker
from pgqueue.worker.counts import RETENTION
from tests._polling import async_wait_until
from tests.integration._worker_helpers import (
    aexecute,
    background_worker,
    run_burst,
    worker_settings,
)


def _totals(points: list[ThroughputPoint]) -> Counter[tuple[str, str]]:
    totals: Counter[tuple[str, str]] = Counter()
    for point in points:
        totals[(point.queue, point.outcome)] += point.count
    return totals


async def test_a_worker_counts_each_recorded_outcome_by_queue(aq: Queue, dsn: str) -> None:
    snoozed: set[int] = set()

    @aq.task(name="ok", queue="mail")
    async def ok() -> None:
        return None

    @aq.task(name="discard", queue="mail")
    async def discard() -> None:
        raise Discard("no")

    @aq.task(name="flaky", queue="reports", max_attempts=2)
    async def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise Retry(delay=0)

    @aq.task(name="sleepy", queue="reports")
    async def sleepy(ctx: JobContext) -> None:
        if ctx.job.id not in snoozed:
            snoozed.add(ctx.job.id)
            raise Snooze(0)

    await ok.enqueue_many_async([() for _ in range(5)])
    await discard.enqueue_async()
    await flaky.enqueue_async()
    await sleepy.enqueue_async()
    worker = await run_burst(aq)

    totals = _totals(await aq.run_plan_async(throughput(aq.queries)))
    assert totals == {
        ("mail", "succeeded"): 5, ("mail", "dead"): 1,
        ("reports", "failed"): 1, ("reports", "succeeded"): 2, ("reports", "snoozed"): 1,
    }
    # One row per minute, queue and outcome, under this worker's id.
    rows = await aexecute(dsn, "SELECT DISTINCT worker_id FROM pgqueue.job_counts")
    assert rows == [{"worker_id": worker.id}]
    by_task = await aexecute(dsn, "SELECT task, outcome, count FROM pgqueue.job_counts "
                                  "WHERE queue = 'reports' ORDER BY 1, 2")
    assert by_task == [
        {"task": "flaky", "outcome": "failed", "count": 1},
        {"task": "flaky", "outcome": "succeeded", "count": 1},
        {"task": "sleepy", "outcome": "snoozed", "count": 1},
        {"task": "sleepy", "outcome": "succeeded", "count": 1},
    ]
    only_mail = await aq.run_plan_async(throughput(aq.queries, queue="mail"))
    assert {p.queue for p in only_mail} == {"mail"}
    assert all(p.to_dict()["minute"].endswith(":00+00:00") for p in only_mail)


async def test_the_heartbeat_writes_counts_while_the_worker_runs(aq: Queue, dsn: str) -> None:
    @aq.task(name="ok")
    async def ok() -> None:
        return None

    async with background_worker(aq, lease=1.5) as worker:
        await ok.enqueue_many_async([() for _ in range(3)])

        async def counted() -> bool:
            rows = await aexecute(dsn, "SELECT sum(count) AS n FROM pgqueue.job_counts "
                                       "WHERE worker_id = %s", (worker.id,))
            return bool(rows[0]["n"] == 3)

        await async_wait_until(counted, timeout=15, message="3 outcomes in job_counts")
        # Written once: the memory is empty after the write.
        assert not worker.counts


async def test_throughput_sums_workers_within_the_window(aq: Queue, dsn: str) -> None:
    await aexecute(dsn, """
        INSERT INTO pgqueue.job_counts (minute, queue, task, outcome, worker_id, count) VALUES
          (date_trunc('minute', now()), 'q', 't', 'succeeded', 'w1', 4),
          (date_trunc('minute', now()), 'q', 't2', 'succeeded', 'w2', 6),
          (date_trunc('minute', now()) - interval '5 minutes', 'q', 't', 'dead', 'w1', 1),
          (date_trunc('minute', now()) - interval '2 hours', 'q', 't', 'succeeded', 'w1', 100),
          (date_trunc('minute', now()), 'other', 't', 'failed', 'w1', 2)
    """)
    points = await aq.run_plan_async(throughput(aq.queries, minutes=60, queue="q"))
    assert [(p.outcome, p.count) for p in points] == [("dead", 1), ("succeeded", 10)]
    assert points[0].minute < points[1].minute
    recent = await aq.run_plan_async(throughput(aq.queries, minutes=1))
    assert sorted((p.queue, p.outcome, p.count) for p in recent) == [
        ("other", "failed", 2), ("q", "succeeded", 10)]
    of_t2 = await aq.run_plan_async(throughput(aq.queries, queue="q", task="t2"))
    assert [(p.outcome, p.count) for p in of_t2] == [("succeeded", 6)]
    everything = await aq.run_plan_async(throughput(aq.queries, minutes=7 * 24 * 60))
    assert sum(p.count for p in everything) == 113


async def test_maintenance_prunes_counts_past_the_retention(aq: Queue, dsn: str) -> None:
    await aexecute(dsn, """
        INSERT INTO pgqueue.job_counts (minute, queue, task, outcome, worker_id, count) VALUES
          (date_trunc('minute', now()) - make_interval(secs => %(old)s), 'q', 't', 'dead', 'w', 1),
          (date_trunc('minute', now()) - interval '6 days', 'q', 't', 'dead', 'w', 2)
    """, {"old": RETENTION + 60})
    worker = Worker(aq, worker_settings())
    try:
        await worker.maintenance.prune()
    finally:
        await worker.maintenance.close()
    rows = await aexecute(dsn, "SELECT count FROM pgqueue.job_counts")
    assert rows == [{"count": 2}]


def test_queue_throughput_reads_the_plan_and_rejects_a_window_out_of_range(
    q: Queue, dsn: str
) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgqueue.job_counts VALUES "
                     "(date_trunc('minute', now()), 'q', 't', 'succeeded', 'w', 3)")
    assert [(p.queue, p.outcome, p.count) for p in q.throughput(minutes=5)] == [
        ("q", "succeeded", 3)]
    for minutes in (0, 7 * 24 * 60 + 1):
        with pytest.raises(ConfigurationError, match="minutes must be between 1 and"):
            q.throughput(minutes=minutes)
