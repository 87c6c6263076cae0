"""Checkpointed steps (``ctx.step``): run once per job, stored, returned on later runs.

In-process workers against the test's database: results stored in ``job_steps`` and
returned (JSON round-tripped); a retry after a later failure reruns only the later
steps; a dead job retried keeps its steps; a name used twice, a bad name and a result
that is not JSON fail the attempt with one line naming the step; a worker that lost its
lease records nothing; a step inside ``ctx.transaction()`` commits or rolls back with
it; steps are deleted with their job (pruner, dead purge, purge_queue), never when it
moves to ``dead_jobs``. With real worker processes and SIGKILL:
tests/e2e/test_steps_kill.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import JobContext, LeaseLost, Queue
from pgqueue.db.queries import for_schema
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.maintenance import Maintenance
from tests._polling import async_wait_until
from tests.integration._worker_helpers import aexecute, arow, background_worker, run_burst

KINDS = ["sync", "async"]


async def steps_of(dsn: str, job_id: int) -> dict[str, Any]:
    """The stored steps of a job: name -> result."""
    rows = await aexecute(dsn, "SELECT name, result FROM pgqueue.job_steps WHERE job_id = %s",
                          (job_id,))
    return {r["name"]: r["result"] for r in rows}


# -- stored and returned ------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_step_stores_its_result_and_returns_it_json_round_tripped(
    aq: Queue, dsn: str, kind: str
) -> None:
    when = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)

    def charge(order_id: int, *, amount: int) -> dict[str, Any]:
        return {"order": order_id, "amount": amount, "at": when, "ids": (1, 2)}

    async def refund() -> None:
        return None

    if kind == "sync":
        @aq.task(name="order")
        def order(order_id: int, ctx: JobContext) -> list[Any]:
            charged = ctx.step("charge-card", charge, order_id, amount=5)
            return [charged, ctx.step("nothing", lambda: None)]
    else:
        @aq.task(name="order")
        async def order(order_id: int, ctx: JobContext) -> list[Any]:
            charged = await ctx.step("charge-card", charge, order_id, amount=5)  # sync fn
            return [charged, await ctx.step("nothing", refund)]  # async fn

    job = await order.enqueue_async(7)
    await run_burst(aq)
    # The first run already gets the JSON form: what a later run would read back.
    stored = {"order": 7, "amount": 5, "at": "2026-12-04T06:00:00Z", "ids": [1, 2]}
    done = await arow(dsn, job.id)
    assert done is not None
    assert (done["status"], done["result"]) == ("succeeded", [stored, None])
    assert await steps_of(dsn, job.id) == {"charge-card": stored, "nothing": None}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_after_a_later_failure_reruns_only_the_later_steps(
    aq: Queue, dsn: str, kind: str
) -> None:
    calls: Counter[str] = Counter()

    def work(name: str) -> str:
        calls[name] += 1
        return f"{name}-done"

    if kind == "sync":
        @aq.task(name="three", retry_intervals=[0])
        def three(ctx: JobContext) -> list[str]:
            first = ctx.step("first", work, "first")
            second = ctx.step("second", work, "second")
            if ctx.attempt == 1:
                raise RuntimeError("failed after the second step")
            return [first, second, ctx.step("third", work, "third")]
    else:
        @aq.task(name="three", retry_intervals=[0])
        async def three(ctx: JobContext) -> list[str]:
            first = await ctx.step("first", work, "first")
            second = await ctx.step("second", work, "second")
            if ctx.attempt == 1:
                raise RuntimeError("failed after the second step")
            return [first, second, await ctx.step("third", work, "third")]

    job = await three.enqueue_async()
    await run_burst(aq)
    done = await arow(dsn, job.id)
    assert done is not None
    assert (done["status"], done["attempts"]) == ("succeeded", 2)
    assert done["result"] == ["first-done", "second-done", "third-done"]
    assert calls == {"first": 1, "second": 1, "third": 1}


async def test_a_dead_job_retried_keeps_its_steps(aq: Queue, dsn: str) -> None:
    calls: Counter[str] = Counter()
    failing = [True]

    def work(name: str) -> str:
        calls[name] += 1
        return name.upper()

    @aq.task(name="fragile", max_attempts=1)
    async def fragile(ctx: JobContext) -> str:
        before = await ctx.step("before", work, "before")
        if failing[0]:
            raise RuntimeError("downstream is down")
        return str(before + await ctx.step("after", work, "after"))

    job = await fragile.enqueue_async()
    await run_burst(aq)
    assert await arow(dsn, job.id, "dead_jobs") is not None
    assert await steps_of(dsn, job.id) == {"before": "BEFORE"}  # the move kept them

    failing[0] = False
    await asyncio.to_thread(aq.retry_dead_job, job.id)
    await run_burst(aq)
    done = await arow(dsn, job.id)
    assert done is not None
    assert (done["status"], done["result"]) == ("succeeded", "BEFOREAFTER")
    assert calls == {"before": 1, "after": 1}


# -- bad input: one line naming the step ---------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_step_name_used_twice_in_one_run_fails_at_once(
    aq: Queue, dsn: str, kind: str
) -> None:
    calls: Counter[str] = Counter()

    def work(n: int) -> int:
        calls[f"call{n}"] += 1
        return n

    if kind == "sync":
        @aq.task(name="twice", max_attempts=1)
        def twice(ctx: JobContext) -> None:
            ctx.step("charge-card", work, 1)
            ctx.step("charge-card", work, 2)
    else:
        @aq.task(name="twice", max_attempts=1)
        async def twice(ctx: JobContext) -> None:
            await ctx.step("charge-card", work, 1)
            await ctx.step("charge-card", work, 2)

    job = await twice.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    last = dead["error"].splitlines()[-1]
    assert last.startswith("ValueError: step 'charge-card' is used twice in job "), last
    assert calls == {"call1": 1}  # the second call never ran


async def test_a_step_whose_function_raised_may_be_tried_again_in_the_same_run(
    aq: Queue, dsn: str
) -> None:
    """Nothing was stored for it: calling it again retries the step, it is no duplicate."""
    tries: list[int] = []

    def flaky() -> int:
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return len(tries)

    @aq.task(name="loop")
    def loop(ctx: JobContext) -> int:
        while True:
            try:
                return int(ctx.step("fetch", flaky))
            except ConnectionError:
                continue

    job = await loop.enqueue_async()
    await run_burst(aq)
    done = await arow(dsn, job.id)
    assert done is not None and (done["status"], done["result"]) == ("succeeded", 3)
    assert await steps_of(dsn, job.id) == {"fetch": 3}


@pytest.mark.parametrize(("name", "problem"), [
    ("", "invalid step name '': must not be empty"),
    ("x" * 201, "is 201 characters long; the limit is 200"),
    ("two\nlines", "contains '\\n'"),
    (42, "invalid step name 42: expected a string, got int"),
])
async def test_a_bad_step_name_fails_the_attempt_naming_it(
    aq: Queue, dsn: str, name: Any, problem: str
) -> None:
    @aq.task(name="bad_name", max_attempts=1)
    def bad_name(ctx: JobContext) -> None:
        ctx.step(name, lambda: 1)

    job = await bad_name.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    last = dead["error"].splitlines()[-1]
    assert last.startswith("ValueError: invalid step name ") and problem in last, last
    assert await steps_of(dsn, job.id) == {}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_result_that_is_not_json_fails_the_attempt_naming_the_step(
    aq: Queue, dsn: str, kind: str
) -> None:
    if kind == "sync":
        @aq.task(name="not_json", max_attempts=1)
        def not_json(ctx: JobContext) -> None:
            ctx.step("tags", lambda: {"lock": threading.Lock()})
    else:
        @aq.task(name="not_json", max_attempts=1)
        async def not_json(ctx: JobContext) -> None:
            await ctx.step("tags", lambda: {"lock": threading.Lock()})

    job = await not_json.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    last = dead["error"].splitlines()[-1]
    assert last.startswith("TypeError: step 'tags' returned a dict that cannot be stored as "
                           "JSON"), last
    assert await steps_of(dsn, job.id) == {}


async def test_a_sync_task_cannot_step_into_a_coroutine_function(aq: Queue, dsn: str) -> None:
    async def fetch() -> int:
        return 1

    @aq.task(name="mixed", max_attempts=1)
    def mixed(ctx: JobContext) -> None:
        ctx.step("fetch", fetch)

    job = await mixed.enqueue_async()
    await run_burst(aq)
    dead = await arow(dsn, job.id, "dead_jobs")
    assert dead is not None
    assert "TypeError: step 'fetch': " in dead["error"]
    assert "is a coroutine function" in dead["error"].splitlines()[-1]


# -- the lease fence -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_worker_that_lost_its_lease_records_no_step(
    aq: Queue, dsn: str, kind: str
) -> None:
    started = threading.Event()
    go = threading.Event()
    raised: list[BaseException] = []

    if kind == "sync":
        @aq.task(name="late")
        def late(ctx: JobContext) -> None:
            ctx.step("early", lambda: "kept")
            started.set()
            go.wait(10)
            try:
                ctx.step("late", lambda: "refused")
            except LeaseLost as exc:
                raised.append(exc)
                raise
    else:
        @aq.task(name="late")
        async def late(ctx: JobContext) -> None:
            await ctx.step("early", lambda: "kept")
            started.set()
            await asyncio.to_thread(go.wait, 10)
            try:
                await ctx.step("late", lambda: "refused")
            except LeaseLost as exc:
                raised.append(exc)
                raise

    job = await late.enqueue_async()
    async with background_worker(aq, lease=30, rescue_interval=3600) as worker:
        await asyncio.to_thread(started.wait, 10)
        # The job moved on (as after a lost lease) before the task records its next step.
        await aexecute(dsn, "UPDATE pgqueue.jobs SET worker_id = 'other', attempts = 2, "
                            "lease_token = lease_token + 1 WHERE id = %s", (job.id,))
        go.set()
        await async_wait_until(lambda: not worker.executions, timeout=10)
    assert len(raised) == 1
    assert "step 'late' was not recorded" in str(raised[0])
    assert await steps_of(dsn, job.id) == {"early": "kept"}
    stored = await arow(dsn, job.id)
    assert stored is not None
    # the other holder's row is untouched: our outcome was dropped, not forced
    assert (stored["status"], stored["worker_id"], stored["attempts"]) == ("running", "other", 2)


# -- inside ctx.transaction() --------------------------------------------------------------


@pytest.fixture
async def side_table(dsn: str) -> None:
    await aexecute(dsn, "CREATE TABLE side_effects (job_id bigint, note text)")


@pytest.mark.usefixtures("side_table")
@pytest.mark.parametrize("kind", KINDS)
async def test_a_step_inside_a_transaction_commits_or_rolls_back_with_it(
    aq: Queue, dsn: str, kind: str
) -> None:
    calls: Counter[str] = Counter()

    def reserve() -> str:
        calls["reserve"] += 1
        return "r1"

    if kind == "sync":
        @aq.task(name="in_tx", retry_intervals=[0])
        def in_tx(ctx: JobContext) -> str:
            with ctx.transaction() as conn:
                reservation = ctx.step("reserve", reserve)
                conn.execute("INSERT INTO side_effects VALUES (%s, %s)",
                             (ctx.job.id, reservation))
                if ctx.attempt == 1:
                    raise RuntimeError("roll back the step with the write")
            return str(reservation)
    else:
        @aq.task(name="in_tx", retry_intervals=[0])
        async def in_tx(ctx: JobContext) -> str:
            async with ctx.transaction() as conn:
                reservation = await ctx.step("reserve", reserve)
                await conn.execute("INSERT INTO side_effects VALUES (%s, %s)",
                                   (ctx.job.id, reservation))
                if ctx.attempt == 1:
                    raise RuntimeError("roll back the step with the write")
            return str(reservation)

    job = await in_tx.enqueue_async()
    await run_burst(aq)
    done = await arow(dsn, job.id)
    assert done is not None
    assert (done["status"], done["attempts"], done["result"]) == ("succeeded", 2, "r1")
    # The rolled-back attempt recorded nothing, so the step ran again in the second.
    assert calls == {"reserve": 2}
    assert await steps_of(dsn, job.id) == {"reserve": "r1"}
    assert await aexecute(dsn, "SELECT note FROM side_effects") == [{"note": "r1"}]


async def test_a_step_after_the_transaction_committed_is_refused(aq: Queue, dsn: str) -> None:
    @aq.task(name="late_step")
    def late_step(ctx: JobContext) -> str:
        with ctx.transaction():
            pass
        ctx.step("after", lambda: 1)
        return "unreachable"

    job = await late_step.enqueue_async()
    await run_burst(aq)
    done = await arow(dsn, job.id)
    assert done is not None and done["status"] == "succeeded"  # the commit marked it
    assert await steps_of(dsn, job.id) == {}


# -- deleted with their job, kept through dead_jobs ----------------------------------------


async def add_steps(dsn: str, *job_ids: int) -> None:
    for job_id in job_ids:
        await aexecute(dsn, "INSERT INTO pgqueue.job_steps (job_id, name, result) "
                            "VALUES (%s, 'a', '1'), (%s, 'b', '2')", (job_id, job_id))


async def test_steps_are_pruned_with_their_finished_job(aq: Queue, dsn: str) -> None:
    @aq.task(name="short_lived", result_ttl=0)
    async def short_lived(ctx: JobContext) -> None:
        await ctx.step("a", lambda: 1)

    @aq.task(name="kept", result_ttl=3600)
    async def kept(ctx: JobContext) -> None:
        await ctx.step("a", lambda: 1)

    succeeded, still_kept, cancelled = (await short_lived.enqueue_async(),
                                        await kept.enqueue_async(),
                                        await short_lived.using(run_in=3600).enqueue_async())
    await run_burst(aq)
    await asyncio.to_thread(aq.cancel_job, cancelled.id)  # cancelled with result_ttl 0
    await add_steps(dsn, cancelled.id)
    assert set(await steps_of(dsn, succeeded.id)) == {"a"}
    service = Maintenance(connect=WorkerConnections(dsn, "steps-test").link(),
                          queries=for_schema("pgqueue"))
    try:
        assert await service.prune() == 2
    finally:
        await service.close()
    assert await steps_of(dsn, succeeded.id) == {}
    assert await steps_of(dsn, cancelled.id) == {}
    assert set(await steps_of(dsn, still_kept.id)) == {"a"}


async def test_steps_are_deleted_by_dead_purge_and_purge_queue(aq: Queue, dsn: str) -> None:
    @aq.task(name="doomed", max_attempts=1, queue="doomed")
    async def doomed(ctx: JobContext) -> None:
        await ctx.step("a", lambda: 1)
        raise RuntimeError("dies")

    dead = await doomed.enqueue_async()
    waiting, dead_in_queue = (await doomed.using(run_in=3600).enqueue_async(),
                              await doomed.enqueue_async())
    await run_burst(aq)
    await add_steps(dsn, waiting.id)
    assert set(await steps_of(dsn, dead.id)) == {"a"}
    await aexecute(dsn, "UPDATE pgqueue.dead_jobs SET queue = 'elsewhere', "
                        "failed_at = now() - interval '2 days' WHERE id = %s", (dead.id,))

    assert await asyncio.to_thread(aq.purge_dead, "1d") == 1
    assert await steps_of(dsn, dead.id) == {}
    assert set(await steps_of(dsn, dead_in_queue.id)) == {"a"}  # failed just now: kept

    assert await asyncio.to_thread(aq.purge_queue, "doomed") == 2  # waiting + dead_in_queue
    assert await steps_of(dsn, waiting.id) == {}
    assert await steps_of(dsn, dead_in_queue.id) == {}


# -- lazy loading ----------------------------------------------------------------------------


async def test_stored_steps_are_read_once_per_run_and_never_without_a_step(
    aq: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgqueue.steps import JobSteps

    loads: list[int] = []
    keep = JobSteps._keep

    def counted(self: JobSteps, rows: list[tuple[str, Any]]) -> dict[str, Any]:
        loads.append(len(rows))
        return keep(self, rows)

    monkeypatch.setattr(JobSteps, "_keep", counted)

    @aq.task(name="three", retry_intervals=[0])
    async def three(ctx: JobContext) -> None:
        for name in ("a", "b", "c"):
            await ctx.step(name, lambda: 1)
        if ctx.attempt == 1:
            raise RuntimeError("again")

    @aq.task(name="plain")
    async def plain() -> None:
        return None

    await three.enqueue_async()
    await plain.enqueue_many_async([() for _ in range(5)])
    await run_burst(aq)
    # One read per run of the stepping job (none stored, then all three); none for the
    # jobs without steps.
    assert loads == [0, 3]
