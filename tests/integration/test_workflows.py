"""Workflows (revision 0007_workflows): chain, group, chord and the general
Workflow, against a real database and an in-process worker. Real worker processes, with
SIGKILL mid-chord, are in ``tests/e2e/test_workflows_processes.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import psycopg
import pytest

from pgqueue import (
    ArgumentError,
    ConfigurationError,
    JobContext,
    JobFailed,
    Queue,
    Retry,
    Workflow,
    chain,
    chord,
    group,
)
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.maintenance import Maintenance
from tests._polling import wait_until
from tests.integration._worker_helpers import aexecute, background_worker, run_burst


@pytest.fixture
def wq(q: Queue) -> Queue:
    """A Queue with the tasks these tests compose."""

    @q.task(name="add")
    def add(x: int, y: int) -> int:
        return x + y

    @q.task(name="double")
    def double(x: int) -> int:
        return 2 * x

    @q.task(name="total")
    def total(values: list[int], extra: int = 0) -> int:
        return sum(values) + extra

    @q.task(name="explode", max_attempts=1)
    def explode(x: int) -> int:
        raise ValueError(f"boom {x}")

    @q.task(name="flaky", max_attempts=3, retry_intervals=[0.01])
    def flaky(x: int, ctx: JobContext) -> int:
        if ctx.attempt < 2:
            raise Retry(delay=0.01)
        return x

    @q.task(name="tx_step")
    def tx_step(x: int, ctx: JobContext) -> int:
        with ctx.transaction() as conn:
            conn.execute("SELECT 1")
        return x * 10

    return q


def row_count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(query).fetchone()
    return int(found[0]) if found else 0


def _steps(q: Queue, workflow_id: int) -> dict[int, dict[str, Any]]:
    handle = q.get_workflow(workflow_id)
    assert handle is not None
    return {step.job.id: step.to_dict() for step in handle.steps()}


async def _drain(q: Queue) -> None:
    await run_burst(q, concurrency=8)


# -- the canvas ------------------------------------------------------------------------------


async def test_a_chain_passes_each_result_on_and_waits_for_the_last(wq: Queue) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")
    handle = chain(add.s(1, 2), double.s(), double.s()).enqueue()
    steps = _steps(wq, handle.id)
    assert [s["status"] for s in steps.values()] == ["queued", "waiting", "waiting"]
    assert [s["depends_on"] for s in steps.values()] == [[], [handle.job_ids[0]],
                                                         [handle.job_ids[1]]]
    await _drain(wq)
    assert handle.wait(timeout=5) == 12
    steps = _steps(wq, handle.id)
    # What SQL shows is what ran: the previous result in front of the step's arguments.
    assert [s["args"] for s in steps.values()] == [[1, 2], [3], [6]]
    assert all(s["workflow_id"] == handle.id for s in steps.values())


async def test_a_group_returns_its_results_in_order(wq: Queue) -> None:
    add = wq.get_task("add")
    handle = group(*(add.s(i, i) for i in range(10))).enqueue()
    await _drain(wq)
    assert handle.wait(timeout=5) == [2 * i for i in range(10)]


async def test_a_chord_callback_gets_results_in_group_order_once(wq: Queue, dsn: str) -> None:
    add, total = wq.get_task("add"), wq.get_task("total")
    members = [add.s(i, 0) for i in range(100)]
    handle = chord(group(*members), total.s(extra=1000)).enqueue()
    await _drain(wq)
    assert handle.wait(timeout=10) == sum(range(100)) + 1000
    callback = handle.outputs[0]
    rows = await aexecute(dsn, "SELECT args, attempts FROM pgqueue.jobs WHERE id = %s",
                          [callback])
    assert rows == [{"args": [list(range(100))], "attempts": 1}]


async def test_a_diamond_with_retries_inside_members(wq: Queue) -> None:
    add, flaky, total = wq.get_task("add"), wq.get_task("flaky"), wq.get_task("total")
    wf = Workflow()
    top = wf.add(add.s(1, 1))
    left = wf.add(flaky.s(), after=[top], inputs="result")
    right = wf.add(wq.get_task("double").s(), after=[top], inputs="result")
    wf.add(total.s(), after=[left, right], inputs="results")
    handle = wf.enqueue()
    async with background_worker(wq):  # a burst would stop before flaky's retry is due
        assert await handle.wait_async(timeout=10) == 2 + 4
    attempts = {s["task"]: s["attempts"] for s in _steps(wq, handle.id).values()}
    assert attempts["flaky"] == 2


async def test_nested_canvas_a_group_inside_a_chain_feeds_the_next_step_a_list(
    wq: Queue,
) -> None:
    add, double, total = wq.get_task("add"), wq.get_task("double"), wq.get_task("total")
    handle = chain(add.s(2, 3), group(double.s(), double.s()), total.s()).enqueue()
    await _drain(wq)
    assert handle.wait(timeout=5) == 20


async def test_a_step_marked_succeeded_by_ctx_transaction_passes_its_result(
    wq: Queue,
) -> None:
    handle = chain(wq.get_task("tx_step").s(4), wq.get_task("double").s()).enqueue()
    await _drain(wq)
    assert handle.wait(timeout=5) == 80


async def test_steps_that_return_none_pass_none_on(q: Queue, dsn: str) -> None:
    @q.task(name="nothing")
    def nothing(i: int) -> None:
        return None

    @q.task(name="tx_nothing")
    def tx_nothing(i: int, ctx: JobContext) -> None:
        with ctx.transaction() as conn:
            conn.execute("SELECT 1")

    @q.task(name="seen")
    def seen(value: Any) -> Any:
        return value

    handle = chord([nothing.s(1), tx_nothing.s(2)], seen.s()).enqueue()
    follow = chain(tx_nothing.s(3), seen.s()).enqueue()
    await _drain(q)
    assert handle.wait(timeout=5) == [None, None]
    assert follow.wait(timeout=5) is None
    # SQL NULL in a succeeded row would mean "not recorded yet": None is JSON null.
    rows = await aexecute(dsn, "SELECT result IS NULL AS sql_null, result FROM pgqueue.jobs "
                               "WHERE id = %s", [handle.job_ids[0]])
    assert rows == [{"sql_null": False, "result": None}]


async def test_a_step_whose_value_was_lost_still_lets_the_next_steps_run(
    wq: Queue, dsn: str
) -> None:
    """ctx.transaction() commits a step's success; its worker records the value a moment
    later. A worker killed in between never does: after RESULT_GRACE the maintenance
    records null, so the next step runs (with None) instead of waiting forever."""
    @wq.task(name="echo")
    def echo(value: Any) -> Any:
        return value

    handle = chain(wq.get_task("add").s(1, 2), echo.s()).enqueue()
    first = handle.job_ids[0]
    # What the killed worker left: succeeded (committed by ctx.transaction()), no value.
    await aexecute(dsn, "UPDATE pgqueue.jobs SET status = 'succeeded', started_at = now(), "
                        "finished_at = now() - interval '1 minute' WHERE id = %s", [first])
    assert [s["status"] for s in _steps(wq, handle.id).values()] == ["succeeded", "waiting"]
    maintenance = Maintenance(connect=WorkerConnections(dsn, "settle").link(),
                              queries=wq.queries)
    try:
        await maintenance.prune()
    finally:
        await maintenance.close()
    steps = list(_steps(wq, handle.id).values())
    assert steps[0]["last_error"].startswith("the worker stopped after ctx.transaction()")
    assert (steps[1]["status"], steps[1]["args"]) == ("queued", [None])
    await _drain(wq)
    assert handle.wait(timeout=5) is None


# -- transactions ----------------------------------------------------------------------------


async def test_a_rolled_back_transaction_leaves_no_workflow_row(wq: Queue, dsn: str) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")
    with psycopg.connect(dsn) as conn:
        chain(add.s(1, 2), double.s()).enqueue(conn=conn)
        conn.rollback()
    counts = await aexecute(dsn, """
        SELECT (SELECT count(*) FROM pgqueue.jobs) AS jobs,
               (SELECT count(*) FROM pgqueue.workflows) AS workflows,
               (SELECT count(*) FROM pgqueue.workflow_edges) AS edges""")
    assert counts == [{"jobs": 0, "workflows": 0, "edges": 0}]
    with psycopg.connect(dsn) as conn:
        handle = chain(add.s(1, 2), double.s()).enqueue(conn=conn)
    await _drain(wq)
    assert handle.wait(timeout=5) == 6


# -- failure, cancellation, retry ------------------------------------------------------------


async def test_a_dead_member_stops_everything_downstream_naming_it(wq: Queue) -> None:
    add, explode, double = wq.get_task("add"), wq.get_task("explode"), wq.get_task("double")
    handle = chain(add.s(1, 1), explode.s(), double.s(), add.s(5)).enqueue()
    await _drain(wq)
    with pytest.raises(JobFailed) as failed:
        handle.wait(timeout=5)
    dead_id = handle.job_ids[1]
    assert failed.value.job_id == handle.job_ids[3]
    assert failed.value.error == f"workflow step {dead_id} (explode) died: ValueError: boom 2"
    statuses = [s["status"] for s in _steps(wq, handle.id).values()]
    assert statuses == ["succeeded", "dead", "dead", "dead"]

    # Retrying the dead member resumes the workflow (its task fixed meanwhile).
    await aexecute(wq.dsn, "UPDATE pgqueue.dead_jobs SET task = 'double' WHERE id = %s",
                   [dead_id])
    retried = wq.retry_dead([dead_id])
    assert retried.retried == [dead_id]
    statuses = [s["status"] for s in _steps(wq, handle.id).values()]
    assert statuses == ["succeeded", "queued", "waiting", "waiting"]
    await _drain(wq)
    assert handle.wait(timeout=5) == 13  # double(2) → double(4) → add(8, 5)


async def test_a_step_with_another_dead_predecessor_stays_dead_when_one_is_retried(
    wq: Queue,
) -> None:
    add, explode, total = wq.get_task("add"), wq.get_task("explode"), wq.get_task("total")
    handle = chord([explode.s(1), explode.s(2), add.s(1, 1)], total.s()).enqueue()
    await _drain(wq)
    first, second, _, callback = handle.job_ids
    steps = _steps(wq, handle.id)
    assert steps[callback]["status"] == "dead"
    assert steps[callback]["error"].startswith(f"workflow step {first} (explode) died")
    await aexecute(wq.dsn, "UPDATE pgqueue.dead_jobs SET task = 'double' WHERE id = %s",
                   [first])
    wq.retry_dead([first])
    steps = _steps(wq, handle.id)
    assert (steps[first]["status"], steps[callback]["status"]) == ("queued", "dead")
    assert steps[callback]["error"].startswith(f"workflow step {second} (explode) died")
    await aexecute(wq.dsn, "UPDATE pgqueue.dead_jobs SET task = 'double' WHERE id = %s",
                   [second])
    wq.retry_dead([second])
    await _drain(wq)
    assert handle.wait(timeout=5) == 2 + 4 + 2


async def test_cancelling_a_workflow_cancels_its_steps_and_downstream(wq: Queue) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")
    handle = chain(add.s(1, 1), double.s(), double.s()).enqueue()
    assert handle.cancel() == {"cancelled": 3, "requested": 0}
    assert {s["status"] for s in _steps(wq, handle.id).values()} == {"cancelled"}
    await _drain(wq)
    assert handle.wait(timeout=5) is None

    # Cancelling one step cancels what waits for it.
    handle = chain(add.s(1, 1), double.s(), double.s()).enqueue()
    wq.cancel_job(handle.job_ids[0])
    statuses = [s["status"] for s in _steps(wq, handle.id).values()]
    assert statuses == ["cancelled", "cancelled", "cancelled"]


# -- bad input, refused where it is written -------------------------------------------------


def test_bad_workflows_are_refused_when_built(wq: Queue) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")
    other = Workflow()
    step = other.add(add.s(1, 2))
    wf = Workflow()
    with pytest.raises(ConfigurationError, match="not a step added to this workflow"):
        wf.add(double.s(), after=[step], inputs="result")
    with pytest.raises(ConfigurationError, match="exactly one step"):
        a, b = wf.add(add.s(1, 2)), wf.add(add.s(3, 4))
        wf.add(double.s(), after=[a, b], inputs="result")
    # A canvas is checked when it compiles (enqueue() does it first, before any write):
    # only then is it known which steps receive a result in front of their arguments.
    with pytest.raises(ArgumentError, match="double"):
        chain(add.s(1, 2), double.s(7)).workflow()  # double takes the previous result only
    with pytest.raises(ConfigurationError, match="at least one"):
        group()
    with pytest.raises(ConfigurationError, match="task signatures"):
        chain(add.s(1, 2), 42)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="two steps"):
        group(add.s(1, 2).using(idempotency_key="k"),
              add.s(3, 4).using(idempotency_key="k")).enqueue()
    with pytest.raises(ConfigurationError, match="conn="):
        add.using(conn=object()).s(1, 2)


async def test_idempotency_keys_of_steps_dedupe_the_whole_workflow(wq: Queue) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")

    def build() -> chain:
        return chain(add.s(1, 2).using(idempotency_key="order-7"), double.s())

    first = build().enqueue()
    second = build().enqueue()
    assert second.id == first.id and second.job_ids == first.job_ids
    plain = add.using(idempotency_key="plain").enqueue(1, 1)
    with pytest.raises(ArgumentError, match=f"held by job {plain.id}"):
        chain(add.s(1, 2).using(idempotency_key="plain"), double.s()).enqueue()


async def test_job_options_work_on_steps(wq: Queue, dsn: str) -> None:
    add, double = wq.get_task("add"), wq.get_task("double")
    handle = chain(
        add.s(1, 2).using(queue="fast", priority=7, meta={"source": "signup"},
                          max_attempts=5, timeout=30),
        double.s().using(queue="slow", run_in=3600, result_ttl=60),
    ).enqueue()
    first, second = handle.job_ids
    rows = {r["id"]: r for r in await aexecute(
        dsn, "SELECT id, queue, priority, meta, max_attempts, timeout, result_ttl, run_at, "
             "created_at FROM pgqueue.jobs WHERE workflow_id = %s", [handle.id])}
    assert (rows[first]["queue"], rows[first]["priority"], rows[first]["meta"],
            rows[first]["max_attempts"], rows[first]["timeout"]) == (
        "fast", 7, {"source": "signup"}, 5, 30.0)
    assert (rows[second]["queue"], rows[second]["result_ttl"]) == ("slow", 60)
    assert (rows[second]["run_at"] - rows[second]["created_at"]).total_seconds() == 3600
    await _drain(wq)
    # Released by its predecessor, the second step still waits for its own run_at.
    steps = _steps(wq, handle.id)
    assert (steps[first]["status"], steps[second]["status"]) == ("succeeded", "scheduled")
    assert steps[second]["args"] == [3]


def test_two_transactions_enqueuing_one_keyed_workflow_make_one(wq: Queue, dsn: str) -> None:
    """The second enqueue waits on the first's uncommitted key, loses the race when it
    commits, and returns the first's workflow instead of an error."""
    add, double = wq.get_task("add"), wq.get_task("double")

    def build() -> chain:
        return chain(add.s(1, 2).using(idempotency_key="race"), double.s())

    with psycopg.connect(dsn) as first_conn:
        first = build().enqueue(conn=first_conn)  # not committed yet
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            second = pool.submit(lambda: build().enqueue())
            wait_until(lambda: bool(row_count(
                dsn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")),
                timeout=10, message="the second enqueue waiting for the first's key")
            first_conn.commit()
            assert second.result(timeout=10).id == first.id


async def test_workflow_rows_go_with_their_last_step(wq: Queue, dsn: str) -> None:
    handle = chain(wq.get_task("add").s(1, 2), wq.get_task("double").s()).enqueue()
    await _drain(wq)
    handle.wait(timeout=5)
    await aexecute(dsn, "DELETE FROM pgqueue.jobs WHERE id = %s", [handle.job_ids[0]])
    assert wq.get_workflow(handle.id) is not None
    await aexecute(dsn, "DELETE FROM pgqueue.jobs WHERE id = %s", [handle.job_ids[1]])
    assert wq.get_workflow(handle.id) is None
    assert await aexecute(dsn, "SELECT count(*) AS n FROM pgqueue.workflow_edges") == [{"n": 0}]


async def test_async_enqueue_and_wait(aq: Queue) -> None:
    @aq.task(name="inc")
    async def inc(x: int) -> int:
        return x + 1

    handle = await chain(inc.s(1), inc.s(), inc.s()).enqueue_async()
    await run_burst(aq)
    assert await handle.wait_async(timeout=5) == 4
    await asyncio.sleep(0)
