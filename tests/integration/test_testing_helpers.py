"""pgqueue.testing's helpers on a real database: drain runs jobs with the real worker,
``now=`` makes scheduled jobs due, the assertions read what waits in the queue."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel

from pgqueue import ConfigurationError, Discard, JobContext, Queue, chain
from pgqueue.testing import assert_enqueued, assert_not_enqueued, drain, drain_async


class Order(BaseModel):
    id: int
    total: float


@pytest.fixture
def q(dsn: str) -> Iterator[Queue]:
    queue = Queue(dsn=dsn)
    calls: list[Any] = []
    queue.calls = calls  # type: ignore[attr-defined]

    @queue.task(name="add", max_attempts=2, retry_intervals=[3600])
    def add(a: int, b: int) -> int:
        calls.append(("add", a, b))
        if a < 0:
            raise ValueError("negative")
        return a + b

    @queue.task(name="fan_out")
    def fan_out(n: int, ctx: JobContext) -> None:
        for i in range(n):
            add.using(priority=-1).enqueue(i, i)

    @queue.task(name="give_up")
    def give_up() -> None:
        raise Discard("not today")

    @queue.task(name="pay")
    def pay(order: Order) -> float:
        return order.total

    @queue.task(name="later")
    async def later(label: str) -> str:
        calls.append(("later", label))
        return label

    try:
        yield queue
    finally:
        queue.close()


def test_drain_runs_ready_jobs_and_those_they_enqueue_and_returns_each_attempt(q: Queue) -> None:
    add = q.tasks["add"]
    first = add.enqueue(1, 2)
    q.tasks["fan_out"].enqueue(2)
    attempts = drain(q)
    assert [(a.task, a.outcome, a.result) for a in attempts] == [
        ("add", "succeeded", 3), ("fan_out", "succeeded", None),
        ("add", "succeeded", 0), ("add", "succeeded", 2),
    ]
    assert attempts[0].job_id == first.id and attempts[0].attempt == 1
    assert q.get_job(first.id).status == "succeeded"  # type: ignore[union-attr]
    assert drain(q) == []  # nothing left


def test_failures_are_reported_not_raised_and_retries_wait_for_their_time(q: Queue) -> None:
    job = q.tasks["add"].enqueue(-1, 0)
    q.tasks["give_up"].enqueue()
    attempts = drain(q)
    assert [(a.task, a.outcome) for a in attempts] == [("add", "retrying"), ("give_up", "dead")]
    assert "ValueError: negative" in (attempts[0].error or "")
    assert "discarded: not today" in (attempts[1].error or "")
    assert not attempts[0].succeeded
    # The retry is an hour away (retry_intervals): a drain an hour ahead runs it.
    assert drain(q, now=datetime.now(UTC) + timedelta(minutes=30)) == []
    again = drain(q, now=datetime.now(UTC) + timedelta(hours=1, minutes=1))
    assert [(a.job_id, a.attempt, a.outcome) for a in again] == [(job.id, 2, "dead")]


def test_now_runs_what_is_due_by_then_in_order_and_leaves_the_rest_as_it_was(q: Queue) -> None:
    later = q.tasks["later"]
    start = datetime.now(UTC)
    in_2h = later.using(run_in=7200).enqueue("2h")
    later.using(run_in=3600).enqueue("1h")
    in_3h = later.using(run_in=3 * 3600).enqueue("3h")
    assert drain(q) == []
    ran = drain(q, now=start + timedelta(hours=2, minutes=1))
    assert [a.result for a in ran] == ["1h", "2h"]  # in run_at order, not id order
    assert q.get_job(in_2h.id).status == "succeeded"  # type: ignore[union-attr]
    untouched = q.get_job(in_3h.id)
    assert untouched is not None and untouched.status == "scheduled"
    assert untouched.run_at == in_3h.run_at
    # Two hours and a half "later": the 3 h job is still half an hour away.
    assert drain(q, now=start + timedelta(hours=2, minutes=30)) == []
    assert [a.result for a in drain(q, now=start + timedelta(hours=3, minutes=1))] == ["3h"]


def test_now_must_be_an_aware_datetime(q: Queue) -> None:
    with pytest.raises(ConfigurationError, match="aware datetime"):
        drain(q, now=datetime.now())


def test_drain_can_be_limited_to_queues_and_runs_workflows(q: Queue) -> None:
    add = q.tasks["add"]
    add.using(queue="other").enqueue(5, 5)
    handle = chain(add.s(1, 1), add.s(10)).enqueue()
    ran = drain(q, queues=["default"])
    assert [a.result for a in ran] == [2, 12]
    assert handle.wait(timeout=5) == 12
    assert [a.queue for a in drain(q)] == ["other"]


async def test_drain_async_runs_on_the_test_loop(q: Queue) -> None:
    await q.tasks["later"].enqueue_async("now")
    ran = await drain_async(q)
    assert [(a.task, a.result) for a in ran] == [("later", "now")]
    with pytest.raises(ConfigurationError, match="drain_async"):
        drain(q)
    await q.close_async()


def test_assert_enqueued_matches_arguments_as_stored(q: Queue) -> None:
    add, pay = q.tasks["add"], q.tasks["pay"]
    add.enqueue(1, b=2)
    add.enqueue(1, b=2)
    pay.enqueue(Order(id=7, total=9.5))
    jobs = assert_enqueued(add, args=[1], kwargs={"b": 2}, count=2)
    assert len(jobs) == 2 and jobs[0].id < jobs[1].id
    assert_enqueued(add)
    assert_enqueued(pay, args=[Order(id=7, total=9.5)])
    assert_enqueued(pay, args=[{"id": 7, "total": 9.5}], queue="default")
    assert_not_enqueued(add, args=[1, 2])
    assert_not_enqueued(add, queue="other")
    with pytest.raises(AssertionError) as failure:
        assert_enqueued(add, args=[3], kwargs={"b": 4})
    message = str(failure.value)
    assert "args=[3], kwargs={'b': 4}" in message and "args=[1] kwargs={'b': 2}" in message
    with pytest.raises(AssertionError, match="expected 1 job"):
        assert_enqueued(add, count=1)
    with pytest.raises(AssertionError, match="expected no job"):
        assert_not_enqueued(pay)


def test_assertions_see_only_waiting_jobs_and_through_conn_an_open_transaction(
    q: Queue, dsn: str,
) -> None:
    add = q.tasks["add"]
    add.enqueue(1, 1)
    drain(q)
    assert_not_enqueued(add)  # it ran: no longer waiting
    with psycopg.connect(dsn) as conn:
        add.using(conn=conn).enqueue(2, 2)
        assert_not_enqueued(add)  # not committed: others cannot see it
        assert_enqueued(add, args=[2, 2], conn=conn)
        conn.rollback()
    assert_not_enqueued(add)
