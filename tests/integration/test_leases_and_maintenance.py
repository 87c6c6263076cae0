"""Leases, fencing and maintenance at the SQL level and with a live worker.

* Fencing: ``complete_jobs`` changes a row only for the claim holding it (its lease token).
* Heartbeat: extends this worker's leases in one statement and reports what it holds.
* Rescuer: expired leases go back to ``queued`` (attempt counted, "lease expired") or to
  ``dead_jobs`` when the attempts are spent.
* Pruner: finished rows past ``result_ttl`` are deleted; dead jobs stay.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import psycopg
import pytest

from pgqueue import Job, JobContext, Queue
from pgqueue.db.queries import ClaimedJob, HeldJob, RecordedOutcome, for_schema
from pgqueue.worker.completer import Completer, outcome_params
from pgqueue.worker.connections import Link, WorkerConnections
from pgqueue.worker.heartbeat import Heartbeat
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.maintenance import Maintenance
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.prefetch import Prefetch
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, arow, background_worker, run_burst

QUERIES = for_schema("pgqueue")


@asynccontextmanager
async def maintenance(dsn: str) -> AsyncIterator[Maintenance]:
    """A Maintenance service whose connection is closed afterwards."""
    service = Maintenance(connect=connector(dsn), queries=QUERIES)
    try:
        yield service
    finally:
        await service.close()


def connector(dsn: str) -> Link:
    """How a service under test reaches the test database (as a worker's would)."""
    return WorkerConnections(dsn, "services-test").link()


async def insert_job(aconn: psycopg.AsyncConnection[Any], **columns: Any) -> int:
    """Insert a job row directly (status, attempts, lease... as given)."""
    values = {"task": "t", "args": "[]"} | columns
    names = ", ".join(values)
    marks = ", ".join(
        f"{'now() + make_interval(secs => %s)' if name == 'lease_expires_at' else '%s'}"
        for name in values
    )
    cursor = await aconn.execute(
        f"INSERT INTO pgqueue.jobs ({names}) VALUES ({marks}) RETURNING id".encode(),
        list(values.values()),
    )
    found = await cursor.fetchone()
    assert found is not None
    return int(found[0])


async def claim(
    aconn: psycopg.AsyncConnection[Any], worker_id: str, token: int, limit: int = 10
) -> list[ClaimedJob]:
    return await QUERIES.claim_jobs_any_queue.all(aconn, {
        "limit": limit, "start": limit, "worker_id": worker_id, "lease": 30.0, "token": token})


async def complete(
    aconn: psycopg.AsyncConnection[Any], *outcomes: tuple[int, int, str]
) -> list[RecordedOutcome]:
    """Run complete_jobs for (id, lease token, kind) outcomes; return the rows it changed."""
    return await QUERIES.complete_jobs.all(aconn, outcome_params([
        Outcome(job_id, 1, token, kind, '"ok"',  # type: ignore[arg-type]
                error="failed" if kind in ("retry", "dead") else None)
        for job_id, token, kind in outcomes
    ]))


# -- fencing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["succeeded", "retry", "snooze", "release", "cancelled",
                                  "progress", "dead"])
async def test_completion_is_fenced_on_the_claims_lease_token(
    aconn: psycopg.AsyncConnection[Any], dsn: str, kind: str
) -> None:
    job_id = await insert_job(aconn)
    [claimed] = await claim(aconn, "w1", token=1001)
    assert (claimed.id, claimed.token) == (job_id, 1001)
    before = await arow(dsn, job_id)
    assert before is not None and before["lease_token"] == 1001

    assert await complete(aconn, (job_id, 1000, kind)) == []  # another claim's token
    assert await complete(aconn, (job_id + 1, 1001, kind)) == []  # another job
    assert await arow(dsn, job_id) == before

    changed = await complete(aconn, (job_id, 1001, kind))
    assert [(r.id, r.token) for r in changed] == [(job_id, 1001)]
    after = await arow(dsn, job_id)
    if kind == "dead":
        assert after is None  # moved to dead_jobs
    else:
        # Back in the queue the token is gone: no outcome of this claim can match again.
        assert after is not None
        assert after["lease_token"] == (None if kind in ("retry", "snooze", "release") else 1001)


async def test_a_claim_lost_in_a_crash_cannot_complete_the_same_workers_next_claim(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    """Claims commit asynchronously, so a PostgreSQL crash can undo one: the row is
    ``queued`` again with the attempt count it had before. The same worker may claim it
    again at the same attempt number; (id, attempts, worker_id) would then be equal for
    both claims, so only the token tells the pre-crash run's outcome from the new one."""
    job_id = await insert_job(aconn)
    [first] = await claim(aconn, "w1", token=7)
    # What crash recovery leaves when the claim's commit never reached disk:
    await aconn.execute("UPDATE pgqueue.jobs SET status = 'queued', attempts = 0, "
                        "worker_id = NULL, lease_token = NULL, lease_expires_at = NULL, "
                        "started_at = NULL WHERE id = %s", (job_id,))
    [second] = await claim(aconn, "w1", token=8)
    assert (first.id, first.attempt) == (second.id, second.attempt) == (job_id, 1)

    assert await complete(aconn, (job_id, 7, "succeeded")) == []
    stored = await arow(dsn, job_id)
    assert stored is not None
    assert (stored["status"], stored["lease_token"]) == ("running", 8)
    assert len(await complete(aconn, (job_id, 8, "succeeded"))) == 1


async def test_late_completion_after_rescue_and_reclaim_changes_nothing(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    job_id = await insert_job(aconn)
    await claim(aconn, "w1", token=1)
    await aconn.execute("UPDATE pgqueue.jobs SET lease_expires_at = now() - interval '1 second'")
    async with maintenance(dsn) as service:
        assert await service.rescue() == 1
    rescued = await arow(dsn, job_id)
    assert rescued is not None and rescued["lease_token"] is None
    [reclaimed] = await claim(aconn, "w2", token=2)
    assert (reclaimed.id, reclaimed.attempt) == (job_id, 2)

    assert await complete(aconn, (job_id, 1, "succeeded")) == []
    stored = await arow(dsn, job_id)
    assert stored is not None
    assert (stored["status"], stored["worker_id"], stored["attempts"]) == ("running", "w2", 2)

    assert len(await complete(aconn, (job_id, 2, "succeeded"))) == 1
    stored = await arow(dsn, job_id)
    assert stored is not None
    assert (stored["status"], stored["result"]) == ("succeeded", "ok")


async def test_completer_reports_refused_outcomes_and_records_the_rest(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    held = await insert_job(aconn)
    other = await insert_job(aconn)
    await claim(aconn, "w1", token=1, limit=1)
    await claim(aconn, "w2", token=2, limit=1)
    recorded: list[tuple[int, str, bool]] = []
    completer = Completer(
        connect=connector(dsn), queries=QUERIES,
        ledger=Ledger(concurrency=2, prefetch=Prefetch(0, concurrency=2)),
        on_recorded=lambda o, ok: recorded.append((o.job_id, o.kind, ok)),
        on_started=lambda job: None,
        start_params={"worker_id": "w1", "lease": 30.0, "queues": []},
    )
    runner = asyncio.create_task(completer.run())
    try:
        completer.submit(Outcome(held, 1, 1, "succeeded", '{"n": 1}'))
        completer.submit(Outcome(other, 1, 1, "succeeded", '{"n": 2}'))  # held by w2 (token 2)
        await asyncio.wait_for(completer.wait_idle(), 10)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    assert sorted(recorded) == sorted([(held, "succeeded", True), (other, "succeeded", False)])
    assert (await arow(dsn, held) or {})["result"] == {"n": 1}
    assert (await arow(dsn, other) or {})["status"] == "running"


# -- heartbeat -------------------------------------------------------------------------------


@dataclass
class FakeExecution:
    """What the heartbeat reads from an execution: the claim, its start and its context."""

    job_id: int
    token: int
    started: float = field(default_factory=lambda: time.monotonic() - 1)
    asyncio_task: Any = None

    @property
    def job(self) -> Any:
        return type("J", (), {"id": self.job_id, "token": self.token})()

    @cached_property
    def ctx(self) -> JobContext:
        snapshot = Job(id=self.job_id, queue="default", task="t", args=[], kwargs={},
                       status="running", attempts=1)
        return JobContext(snapshot, worker_id="w1", queries=QUERIES,
                          report_progress=lambda value: None, connections=None)  # type: ignore[arg-type]


async def test_heartbeat_extends_leases_and_reports_lost_and_cancelled_jobs(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    kept = await insert_job(aconn, status="running", attempts=1, worker_id="w1",
                            lease_expires_at=2, lease_token=11)
    cancelled = await insert_job(aconn, status="running", attempts=1, worker_id="w1",
                                 lease_expires_at=2, cancel_requested=True, lease_token=11)
    stolen = await insert_job(aconn, status="running", attempts=2, worker_id="w2",
                              lease_expires_at=2, lease_token=22)
    finished = await insert_job(aconn, status="succeeded", attempts=1, worker_id="w1",
                                lease_token=11)
    # Ours again, but under a newer claim than the execution's (a lost claim, re-claimed).
    reclaimed = await insert_job(aconn, status="running", attempts=1, worker_id="w1",
                                 lease_expires_at=2, lease_token=12)
    executions = [FakeExecution(kept, 11), FakeExecution(cancelled, 11),
                  FakeExecution(stolen, 11), FakeExecution(finished, 11),
                  FakeExecution(reclaimed, 11)]
    lost: list[int] = []
    cancel: list[int] = []
    ledger = Ledger(concurrency=8, prefetch=Prefetch(0, concurrency=8))
    ledger.executions.update((e.job_id, e) for e in executions)  # type: ignore[misc]
    heartbeat = Heartbeat(
        connect=connector(dsn), queries=QUERIES, lease=30.0,
        registration={"worker_id": "w1", "hostname": "h", "pid": 42, "queues": [],
                      "concurrency": 4},
        ledger=ledger, holdings=list,
        on_lease_lost=lambda e: lost.append(e.job.id),
        on_cancel_requested=lambda e: cancel.append(e.job.id),
    )
    try:
        await heartbeat.beat()
    finally:
        await heartbeat.close()
    assert sorted(lost) == sorted([stolen, finished, reclaimed])
    assert cancel == [cancelled]
    leases = await aexecute(
        dsn,
        "SELECT id, extract(epoch FROM lease_expires_at - now()) AS left FROM pgqueue.jobs "
        "WHERE status = 'running' ORDER BY id",
    )
    remaining = {r["id"]: r["left"] for r in leases}
    assert remaining[kept] > 25
    assert remaining[cancelled] > 25
    assert remaining[stolen] < 3  # not ours: untouched
    workers = await aexecute(dsn, "SELECT id, hostname, pid, queues, concurrency FROM "
                                  "pgqueue.workers")
    assert workers == [{"id": "w1", "hostname": "h", "pid": 42, "queues": [],
                        "concurrency": 4}]


async def test_heartbeat_query_returns_the_jobs_still_held(
    aconn: psycopg.AsyncConnection[Any],
) -> None:
    mine = await insert_job(aconn, status="running", attempts=3, worker_id="w1", lease_expires_at=1,
                            lease_token=5)
    await insert_job(aconn, status="running", attempts=1, worker_id="w9", lease_expires_at=1)
    await insert_job(aconn, status="queued")
    held = await QUERIES.heartbeat.all(aconn, {
        "worker_id": "w1", "hostname": "h", "pid": 1, "queues": ["a", "b"], "concurrency": 2,
        "lease": 30.0, "stuck": 1, "held": f"[[{mine}, 5]]",
    })
    assert held == [HeldJob(id=mine, lease_token=5, cancel_requested=False)]
    cursor = await aconn.execute("SELECT queues, stuck FROM pgqueue.workers WHERE id = 'w1'")
    assert await cursor.fetchone() == (["a", "b"], 1)


# -- rescuer ---------------------------------------------------------------------------------


async def test_rescue_requeues_expired_leases_as_a_failed_attempt(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    expired = await insert_job(aconn, status="running", attempts=1, max_attempts=3,
                               worker_id="ghost", lease_expires_at=-5)
    alive = await insert_job(aconn, status="running", attempts=1, worker_id="w1",
                             lease_expires_at=30)
    async with maintenance(dsn) as service:
        handled = await service.rescue()
    assert handled == 1
    stored = await arow(dsn, expired)
    assert stored is not None
    assert stored["status"] == "queued"
    assert stored["attempts"] == 1  # the lost attempt counts
    assert stored["worker_id"] is None
    assert stored["lease_expires_at"] is None
    assert "lease expired" in stored["last_error"]
    ready = await aexecute(dsn, "SELECT run_at <= now() AS ready FROM pgqueue.jobs WHERE id = %s",
                           (expired,))
    assert ready == [{"ready": True}]  # at once, no backoff
    assert (await arow(dsn, alive) or {})["status"] == "running"


async def test_rescue_sends_jobs_with_spent_attempts_to_dead_jobs(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    job_id = await insert_job(aconn, status="running", attempts=3, max_attempts=3,
                              worker_id="ghost", lease_expires_at=-5,
                              idempotency_key="k-1", meta='{"a": 1}')
    async with maintenance(dsn) as service:
        assert await service.rescue() == 1
    assert await arow(dsn, job_id) is None
    dead = await arow(dsn, job_id, "dead_jobs")
    assert dead is not None
    assert "lease expired" in dead["error"]
    assert (dead["attempts"], dead["idempotency_key"], dead["meta"]) == (3, "k-1", {"a": 1})


async def test_rescue_of_a_job_being_cancelled_cancels_it(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    job_id = await insert_job(aconn, status="running", attempts=1, worker_id="ghost",
                              lease_expires_at=-5, cancel_requested=True)
    async with maintenance(dsn) as service:
        assert await service.rescue() == 1
    stored = await arow(dsn, job_id)
    assert stored is not None
    assert stored["status"] == "cancelled"
    assert stored["finished_at"] is not None


def fragile_task(aq: Queue) -> tuple[list[int], asyncio.Event]:
    """A task whose first attempt hangs until cancelled and whose second one succeeds."""
    attempts: list[int] = []
    first_cancelled = asyncio.Event()

    @aq.task(name="fragile")
    async def fragile(ctx: JobContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                first_cancelled.set()
                raise
        return f"attempt {ctx.attempt}"

    return attempts, first_cancelled


async def lose_lease(dsn: str, job_id: int) -> None:
    """What the database looks like after this worker's lease ran out and another worker
    took the job over: it no longer belongs to us, and its lease has expired."""
    await aexecute(dsn, "UPDATE pgqueue.jobs SET worker_id = 'ghost', "
                        "lease_expires_at = now() - interval '1 second' WHERE id = %s",
                   (job_id,))


async def test_heartbeat_stops_an_attempt_whose_lease_was_lost(aq: Queue, dsn: str) -> None:
    attempts, first_cancelled = fragile_task(aq)
    job = await aq.get_task("fragile").enqueue_async()
    async with background_worker(aq, lease=3, rescue_interval=3600):
        await async_wait_until(lambda: attempts == [1], timeout=10)
        await lose_lease(dsn, job.id)
        # Within one heartbeat (1 s) the worker notices and stops attempt 1...
        await asyncio.wait_for(first_cancelled.wait(), 5)
        assert (await arow(dsn, job.id) or {})["worker_id"] == "ghost"  # ...writing nothing
        # ...and once rescued, the job runs again.
        async with maintenance(dsn) as service:
            assert await service.rescue() == 1
        stored = await async_wait_until(lambda: _succeeded(dsn, job.id), timeout=10)
    assert attempts == [1, 2]
    assert stored["result"] == "attempt 2"
    assert stored["attempts"] == 2
    assert "lease expired" in stored["last_error"]


async def test_reclaiming_a_job_stops_the_attempt_this_worker_still_runs(
    aq: Queue, dsn: str
) -> None:
    """The rescuer requeues the job and this same worker claims it again before its next
    heartbeat: the stale first attempt must be stopped, not left running unseen (outside
    the concurrency count, never released)."""
    attempts, first_cancelled = fragile_task(aq)
    job = await aq.get_task("fragile").enqueue_async()
    async with background_worker(aq, lease=30, rescue_interval=0.1) as worker:
        await async_wait_until(lambda: attempts == [1], timeout=10)
        await lose_lease(dsn, job.id)
        stored = await async_wait_until(lambda: _succeeded(dsn, job.id), timeout=10)
        await asyncio.wait_for(first_cancelled.wait(), 5)
        await async_wait_until(lambda: not worker.executions, timeout=5)
    assert attempts == [1, 2]
    assert stored["result"] == "attempt 2"


async def _succeeded(dsn: str, job_id: int) -> dict[str, Any] | None:
    stored = await arow(dsn, job_id)
    return stored if stored and stored["status"] == "succeeded" else None


# -- pruner ----------------------------------------------------------------------------------


async def test_prune_deletes_finished_jobs_past_their_result_ttl(
    aq: Queue, dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    @aq.task(name="quick", max_attempts=1)
    def quick(fail: bool = False) -> int:
        if fail:
            raise RuntimeError("dies")
        return 1

    short = [await quick.using(result_ttl=0).enqueue_async() for _ in range(3)]
    kept = await quick.enqueue_async()  # default result_ttl: a day
    dead = await quick.using(result_ttl=0).enqueue_async(fail=True)
    cancelled = await quick.using(result_ttl=0, run_in=3600).enqueue_async()
    await asyncio.to_thread(cancelled.cancel)
    waiting = await quick.using(result_ttl=0, run_in=3600).enqueue_async()
    await run_burst(aq)
    await asyncio.sleep(0.01)  # finished_at < now() needs a later transaction clock

    async with maintenance(dsn) as service:
        assert await service.prune() == 4  # three succeeded and one cancelled
    for job in short:
        assert await arow(dsn, job.id) is None
    assert await arow(dsn, cancelled.id) is None
    assert (await arow(dsn, kept.id) or {})["status"] == "succeeded"
    assert await arow(dsn, dead.id, "dead_jobs") is not None
    assert (await arow(dsn, waiting.id) or {})["status"] == "queued"
    assert await aq.get_job_async(short[0].id) is None


async def test_prune_removes_worker_rows_that_stopped_heartbeating(
    aconn: psycopg.AsyncConnection[Any], dsn: str
) -> None:
    await aconn.execute(
        "INSERT INTO pgqueue.workers (id, hostname, pid, concurrency, lease_expires_at) VALUES "
        "('stale', 'h', 1, 1, now() - interval '1 hour'), "
        "('fresh', 'h', 2, 1, now() + interval '30 seconds')"
    )
    async with maintenance(dsn) as service:
        await service.prune()
    assert await aexecute(dsn, "SELECT id FROM pgqueue.workers") == [{"id": "fresh"}]


async def test_a_dead_workers_job_is_recovered_within_lease_plus_five_seconds(
    aq: Queue, dsn: str, aconn: psycopg.AsyncConnection[Any]
) -> None:
    """Default settings (rescue every ~1 s): a job whose holder vanished runs again soon
    after its lease runs out."""
    ran = asyncio.Event()

    @aq.task(name="orphan")
    async def orphan(ctx: JobContext) -> int:
        ran.set()
        return ctx.attempt

    job_id = await insert_job(aconn, task="orphan", status="running", attempts=1,
                              worker_id="killed-worker", lease_expires_at=1)
    cursor = await aconn.execute("SELECT lease_expires_at FROM pgqueue.jobs WHERE id = %s",
                              (job_id,))
    found = await cursor.fetchone()
    assert found is not None
    async with background_worker(aq):
        await asyncio.wait_for(ran.wait(), 10)
        stored = await async_wait_until(lambda: _succeeded(dsn, job_id), timeout=10)
    assert stored["result"] == 2
    assert stored["started_at"] > found[0]  # not before the lease ran out
    assert (stored["started_at"] - found[0]).total_seconds() < 5


async def test_a_running_worker_prunes_expired_results_on_its_own(aq: Queue, dsn: str) -> None:
    @aq.task(name="quick")
    async def quick() -> int:
        return 1

    short = await quick.using(result_ttl=0).enqueue_async()
    kept = await quick.enqueue_async()
    async with background_worker(aq, prune_interval=0.3):
        await async_wait_until(lambda: _gone(dsn, short.id), timeout=10)
    assert (await arow(dsn, kept.id) or {}).get("status") == "succeeded"


async def _gone(dsn: str, job_id: int) -> bool:
    return await arow(dsn, job_id) is None
