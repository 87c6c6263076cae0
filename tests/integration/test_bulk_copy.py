"""Bulk enqueue through COPY: the same rows as the INSERT path, ids in input order, and
the cases that must take the INSERT path instead.

``enqueue_many`` streams a batch of at least ``COPY_MIN_JOBS`` jobs with COPY when it
can (see ``pgqueue.db.copy_rows``). Each test records which steps the plan ran, so a
test of the COPY path fails if the batch quietly took the INSERT path, and vice versa.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import pgqueue.operations
from pgqueue import Queue
from pgqueue.db import plans
from tests.integration.test_transactions import Notifications, count_jobs, sqlalchemy_url

N = pgqueue.operations.COPY_MIN_JOBS  # the smallest batch that copies

# Compared between the two paths: everything but the id and the creation time (run_at
# compares as such when given, else as its distance from created_at).
COLUMNS = (
    "queue, task, args, kwargs, status, priority, run_at, run_at - created_at AS delay, "
    "attempts, "
    "max_attempts, idempotency_key, lease_expires_at, worker_id, last_error, result, meta, "
    "timeout, result_ttl, cancel_requested, started_at, finished_at, expires_at, lease_token"
)


class StepLog:
    """Which kinds of step (Statement, Copy, ...) plans ran, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kinds: list[str] = []
        run_sync, run_async = plans._run_step_sync, plans._run_step_async

        def logged_sync(conn: Any, step: Any) -> Any:
            self.kinds.append(type(step).__name__)
            return run_sync(conn, step)

        async def logged_async(conn: Any, step: Any) -> Any:
            self.kinds.append(type(step).__name__)
            return await run_async(conn, step)

        monkeypatch.setattr(plans, "_run_step_sync", logged_sync)
        monkeypatch.setattr(plans, "_run_step_async", logged_async)

    def copied(self) -> bool:
        found = "Copy" in self.kinds
        self.kinds.clear()
        return found


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> StepLog:
    return StepLog(monkeypatch)


def stored(dsn: str, ids: list[int]) -> list[dict[str, Any]]:
    """The rows of ``ids``, in that order."""
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rows = conn.execute(
            f"SELECT id, {COLUMNS} FROM pgqueue.jobs WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    by_id = {found.pop("id"): found for found in rows}
    return [by_id[job_id] for job_id in ids]


AWKWARD_ARGS: list[tuple[Any, ...]] = [
    ("back\\slash", None), ("tab\tnew\nline\rcr", 1), ('"quoted"', 2.5), ("é ☃ \u2028", True),
    ({"nested": {"list": [1, 2]}}, [3]), ("]", "["), ("", 2**70), (-1, False),
]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"queue": "odd queue\\name", "priority": -7, "max_attempts": 9, "timeout": 2.5,
         "result_ttl": 60, "meta": {"who": "tab\there \\ and \"quotes\""}},
        {"run_in": 600},
        {"run_at": datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)},
    ],
    ids=["defaults", "every-option", "run_in", "run_at"],
)
def test_copy_writes_the_rows_the_insert_path_writes(
    q: Queue, dsn: str, steps: StepLog, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    @q.task(name="bulk.task")
    def task(a: Any, b: Any = None) -> None: ...

    items = [AWKWARD_ARGS[n % len(AWKWARD_ARGS)] for n in range(N)]
    copied = task.using(**options).enqueue_many(items)
    assert steps.copied()
    monkeypatch.setattr(pgqueue.operations, "COPY_MIN_JOBS", 10**9)
    inserted = task.using(**options).enqueue_many(items)
    assert not steps.copied()

    comparable = "delay" if "run_at" in options else "run_at"
    copied_rows, inserted_rows = stored(dsn, copied.ids), stored(dsn, inserted.ids)
    for found in copied_rows + inserted_rows:
        del found[comparable]
    assert copied_rows == inserted_rows
    assert [job.args for job in copied] == [list(item) for item in items]
    assert stored(dsn, copied.ids)[0]["args"] == list(items[0])
    later = "run_in" in options or "run_at" in options
    assert {job.status for job in copied} == {"scheduled" if later else "queued"}
    for mine, theirs in ((copied[0], inserted[0]), (copied[-1], inserted[-1])):
        fresh = q.get_job(mine.id)
        assert fresh is not None
        assert (mine.created_at, mine.run_at) == (fresh.created_at, fresh.run_at)
        if "run_at" in options:
            assert mine.run_at == theirs.run_at == options["run_at"]
        else:
            assert mine.run_at and mine.created_at and theirs.run_at and theirs.created_at
            assert mine.run_at - mine.created_at == theirs.run_at - theirs.created_at


def test_ids_follow_the_input_order(q: Queue, dsn: str, steps: StepLog) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    numbers = list(range(N + 500, 0, -1))
    jobs = task.enqueue_many([(n,) for n in numbers])
    assert steps.copied()
    assert jobs.ids == sorted(jobs.ids)
    with psycopg.connect(dsn) as conn:
        by_id: dict[int, int] = dict(
            conn.execute("SELECT id, (args->>0)::int FROM pgqueue.jobs").fetchall())
    assert [by_id[job_id] for job_id in jobs.ids] == numbers


def test_ids_stay_right_when_another_session_draws_ids_during_the_copy(
    q: Queue, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another enqueue between the COPY's first statement and the COPY takes an id inside
    the batch's range: the ids then come from the rows themselves."""

    @q.task(name="t")
    def task(n: int) -> None: ...

    others: list[int] = []
    run_step = plans._run_step_sync

    def enqueue_elsewhere(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as other:
            found = other.execute(
                "INSERT INTO pgqueue.jobs (task, args) VALUES ('t', %s) RETURNING id",
                (Jsonb([n]),),
            ).fetchone()
        assert found is not None
        others.append(found[0])

    def with_a_concurrent_enqueue(conn: Any, step: Any) -> Any:
        if isinstance(step, plans.Copy):
            enqueue_elsewhere(-1)
        result = run_step(conn, step)
        if isinstance(step, plans.Copy):
            enqueue_elsewhere(-2)
        return result

    monkeypatch.setattr(plans, "_run_step_sync", with_a_concurrent_enqueue)
    numbers = list(range(N))
    jobs = task.enqueue_many([(n,) for n in numbers])
    assert len(others) == 2
    assert others[0] < min(jobs.ids)  # drawn after the COPY's first id, before its rows
    assert not set(others) & set(jobs.ids)
    with psycopg.connect(dsn) as conn:
        by_id: dict[int, int] = dict(
            conn.execute("SELECT id, (args->>0)::int FROM pgqueue.jobs").fetchall())
    assert [by_id[job_id] for job_id in jobs.ids] == numbers
    assert len(by_id) == N + 2


@pytest.mark.parametrize(
    "items",
    [
        [([1], [2])] * N,  # nested arrays side by side: the text does not cut cleanly
        [("a],[b",)] * N,  # a string that reads like a boundary between jobs
        [{"a": n} for n in range(N)],  # keyword arguments
    ],
    ids=["nested-arrays", "boundary-in-a-string", "kwargs"],
)
def test_batches_that_do_not_cut_cleanly_take_the_insert_path(
    q: Queue, dsn: str, steps: StepLog, items: list[Any]
) -> None:
    @q.task(name="t")
    def task(a: Any, b: Any = None) -> None: ...

    jobs = task.enqueue_many(items)
    assert not steps.copied()
    rows = stored(dsn, jobs.ids)
    assert len(rows) == N
    expected = [job.args for job in jobs]
    assert [found["args"] for found in rows] == expected


def test_small_batches_take_the_insert_path(q: Queue, steps: StepLog) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    task.enqueue_many([(n,) for n in range(pgqueue.operations.COPY_MIN_JOBS - 1)])
    assert not steps.copied()
    task.enqueue_many([(n,) for n in range(pgqueue.operations.COPY_MIN_JOBS)])
    assert steps.copied()


def test_copy_joins_the_callers_transaction(q: Queue, dsn: str, steps: StepLog) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    listener = Notifications(dsn)
    try:
        with psycopg.connect(dsn) as conn:
            lost = task.using(conn=conn).enqueue_many([(n,) for n in range(N)])
            assert steps.copied()
            conn.rollback()
            kept = task.using(conn=conn, queue="mail").enqueue_many([(n,) for n in range(N)])
            assert steps.copied()
            assert count_jobs(dsn) == 0  # not visible outside the transaction
            conn.commit()
        with psycopg.connect(dsn) as conn:
            ids = [found[0] for found in conn.execute("SELECT id FROM pgqueue.jobs ORDER BY id")]
        assert ids == kept.ids
        assert not set(lost.ids) & set(ids)
        # One wake-up, from the commit; the rolled-back COPY sent none.
        assert listener.after_commit() == ["mail"]
    finally:
        listener.close()


def test_autocommit_and_pipeline_connections_take_the_insert_path(
    q: Queue, dsn: str, steps: StepLog
) -> None:
    """In autocommit each statement commits on its own, so the COPY's rows and the
    timestamps it reports would come from different transactions; libpq refuses COPY in
    pipeline mode. Both insert the batch with one INSERT."""

    @q.task(name="t")
    def task(n: int) -> None: ...

    with psycopg.connect(dsn, autocommit=True) as conn:
        jobs = task.using(conn=conn).enqueue_many([(n,) for n in range(N)])
        assert not steps.copied()
        assert len(stored(dsn, jobs.ids)) == N
        with conn.pipeline():
            jobs = task.using(conn=conn).enqueue_many([(n,) for n in range(N)])
            one = task.using(conn=conn).enqueue(-1)
        assert not steps.copied()
        assert len(stored(dsn, jobs.ids)) == N
        assert [found["args"] for found in stored(dsn, [one.id])] == [[-1]]


async def test_async_pipeline_connections_enqueue_too(
    aq: Queue, dsn: str, steps: StepLog
) -> None:
    """A plan reads each statement's rows before the next: in the caller's pipeline that
    needs a sync point per statement, which the async driver makes as the sync one does."""

    @aq.task(name="t")
    async def task(n: int) -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.pipeline():
            jobs = await task.using(conn=conn).enqueue_many_async([(n,) for n in range(N)])
            one = await task.using(conn=conn).enqueue_async(-1)
        await conn.commit()
    assert not steps.copied()
    rows = await asyncio.to_thread(stored, dsn, [*jobs.ids, one.id])
    assert [found["args"] for found in rows] == [[n] for n in range(N)] + [[-1]]


def test_sqlalchemy_session_bulk_enqueue_copies_in_its_transaction(
    q: Queue, dsn: str, steps: StepLog
) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    engine = create_engine(sqlalchemy_url(dsn))
    try:
        with Session(engine) as session:
            jobs = task.using(conn=session).enqueue_many([(n,) for n in range(N)])
            assert steps.copied()
            assert count_jobs(dsn) == 0
            session.commit()
    finally:
        engine.dispose()
    assert [found["args"] for found in stored(dsn, jobs.ids)] == [[n] for n in range(N)]


async def test_async_bulk_enqueue_copies(aq: Queue, dsn: str, steps: StepLog) -> None:
    @aq.task(name="t")
    async def task(n: int) -> None: ...

    jobs = await task.using(run_in=timedelta(minutes=5)).enqueue_many_async(
        [(n,) for n in range(N)]
    )
    assert steps.copied()
    rows = await asyncio.to_thread(stored, dsn, jobs.ids)
    assert [found["args"] for found in rows] == [[n] for n in range(N)]
    assert {found["delay"] for found in rows} == {timedelta(minutes=5)}
    assert {job.status for job in jobs} == {"scheduled"}
