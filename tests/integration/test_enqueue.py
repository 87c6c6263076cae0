"""Enqueueing: what lands in the row, the Job handle, get_job, statuses and wait()."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from pgqueue import ArgumentError, ConfigurationError, Discard, Job, JobFailed, Queue
from tests.integration._worker_helpers import background_worker, row


def seconds_until(when: datetime, dsn: str) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT extract(epoch FROM %s - now())::float8", (when,)).fetchone()
    assert found is not None
    return float(found[0])


# -- enqueue and options -------------------------------------------------------------------


def test_enqueue_inserts_a_queued_job_with_the_defaults(q: Queue, dsn: str) -> None:
    @q.task
    def send_email(user_id: str, email: str) -> None: ...

    job = send_email.enqueue("u1", email="a@example.com")
    assert isinstance(job, Job)
    assert job.status == "queued"
    assert job.task == f"{__name__}.test_enqueue_inserts_a_queued_job_with_the_defaults." \
                       "<locals>.send_email"
    stored = row(dsn, job.id)
    assert stored is not None
    assert stored["task"] == job.task
    assert stored["args"] == ["u1"]  # stored as given (contract §8)
    assert stored["kwargs"] == {"email": "a@example.com"}
    assert (stored["queue"], stored["priority"], stored["max_attempts"]) == ("default", 0, 3)
    assert (stored["timeout"], stored["result_ttl"], stored["meta"]) == (None, 86400, {})
    assert (stored["status"], stored["attempts"], stored["idempotency_key"]) == ("queued", 0, None)
    assert stored["run_at"] <= datetime.now(UTC) + timedelta(seconds=1)
    assert stored["created_at"] is not None
    assert job.created_at == stored["created_at"]


def test_task_options_land_in_the_row(q: Queue, dsn: str) -> None:
    @q.task(name="mail.send", queue="email", priority=5, max_attempts=7, timeout="2m",
            result_ttl="1h")
    def send() -> None: ...

    job = send.enqueue()
    stored = row(dsn, job.id)
    assert stored is not None
    assert stored["task"] == "mail.send"
    assert (stored["queue"], stored["priority"], stored["max_attempts"]) == ("email", 5, 7)
    assert (stored["timeout"], stored["result_ttl"]) == (120.0, 3600)


def test_using_options_land_in_the_row_and_override_the_task(q: Queue, dsn: str) -> None:
    @q.task(name="t", queue="email", priority=1, max_attempts=2)
    def task(x: int) -> None: ...

    job = task.using(
        priority=10, run_in=timedelta(minutes=30), queue="high", meta={"source": "signup"},
        max_attempts=9, timeout=15, result_ttl=0, idempotency_key="welcome:u1",
    ).enqueue(1)
    stored = row(dsn, job.id)
    assert stored is not None
    assert (stored["queue"], stored["priority"], stored["max_attempts"]) == ("high", 10, 9)
    assert (stored["timeout"], stored["result_ttl"]) == (15.0, 0)
    assert stored["meta"] == {"source": "signup"}
    assert stored["idempotency_key"] == "welcome:u1"
    assert 1790 <= seconds_until(stored["run_at"], dsn) <= 1800
    assert job.status == "scheduled"
    assert (job.priority, job.queue, job.meta) == (10, "high", {"source": "signup"})
    # using() does not change the task's own defaults
    plain = row(dsn, task.enqueue(2).id)
    assert plain is not None
    assert (plain["queue"], plain["priority"], plain["max_attempts"]) == ("email", 1, 2)


def test_run_at_is_stored_exactly(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    when = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)
    job = task.using(run_at=when).enqueue()
    stored = row(dsn, job.id)
    assert stored is not None
    assert stored["run_at"] == when
    assert job.status == "scheduled"
    past = task.using(run_at=datetime.now(UTC) - timedelta(hours=1)).enqueue()
    assert past.status == "queued"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 100_000}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": "soon"}, "timeout"),
        ({"run_at": datetime(2030, 1, 1)}, "naive"),
        ({"run_at": datetime.now(UTC), "run_in": 5}, "run_at or run_in"),
        ({"queue": ""}, "queue"),
        ({"meta": ["not", "a", "dict"]}, "meta"),
        ({"meta": {"x": {1, 2}}}, "meta"),
        ({"colour": "blue"}, "colour"),
        ({"retry_intervals": [1]}, "retry_intervals"),
    ],
)
def test_bad_options_fail_at_the_call_site(
    q: Queue, dsn: str, options: dict[str, Any], message: str
) -> None:
    @q.task(name="t")
    def task() -> None: ...

    with pytest.raises(ConfigurationError, match=message):
        task.using(**options).enqueue()
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)


def test_bad_arguments_fail_at_enqueue_not_in_the_worker(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(user_id: int, email: str) -> None: ...

    with pytest.raises(ArgumentError, match="missing a required argument: 'email'"):
        task.enqueue(1)  # type: ignore[call-arg]
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'colour'"):
        task.enqueue(1, "a@x", colour="blue")  # type: ignore[call-arg]
    with pytest.raises(ArgumentError, match="user_id"):
        task.enqueue("not a number", "a@x")  # type: ignore[arg-type]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)


async def test_enqueue_async_and_using_enqueue_async(aq: Queue, dsn: str) -> None:
    @aq.task(name="t")
    async def task(x: int) -> None: ...

    first = await task.enqueue_async(1)
    second = await task.using(priority=3, queue="q2").enqueue_async(x=2)
    stored = await asyncio.to_thread(row, dsn, second.id)
    assert stored is not None
    assert (stored["args"], stored["kwargs"], stored["priority"], stored["queue"]) == (
        [], {"x": 2}, 3, "q2")
    assert first.id < second.id
    assert (first.status, second.status) == ("queued", "queued")


# -- enqueue_many --------------------------------------------------------------------------


class CountingCursor(psycopg.Cursor[Any]):
    executed = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        CountingCursor.executed += 1
        return super().execute(*args, **kwargs)


def test_enqueue_many_takes_tuples_and_dicts_in_one_statement(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(a: int, b: str = "x") -> None: ...

    items: list[tuple[Any, ...] | dict[str, Any]] = [
        (1,), {"a": 2, "b": "two"}, (3, "three"), {"a": 4}, (5,),
    ]
    with psycopg.connect(dsn, cursor_factory=CountingCursor) as conn:
        CountingCursor.executed = 0
        jobs = task.using(conn=conn, priority=4, queue="bulk").enqueue_many(items)
        assert CountingCursor.executed == 1
    assert [job.args for job in jobs] == [[1], [], [3, "three"], [], [5]]
    assert [job.kwargs for job in jobs] == [{}, {"a": 2, "b": "two"}, {}, {"a": 4}, {}]
    ids = [job.id for job in jobs]
    assert ids == sorted(ids)
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT id, args, kwargs, priority, queue FROM pgqueue.jobs ORDER BY id"
        ).fetchall()
    by_id = {r["id"]: r for r in rows}
    for job, expected in zip(jobs, [[1], [2, "two"], [3, "three"], [4], [5]], strict=True):
        stored = by_id[job.id]
        # Stored in whatever positional/keyword split the worker rebinds; the values agree.
        assert stored["args"] + list(stored["kwargs"].values()) == expected
        assert (stored["priority"], stored["queue"]) == (4, "bulk")
    assert len(rows) == 5


def test_enqueue_many_returns_jobs_in_input_order(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    numbers = list(range(500, 0, -1))
    jobs = task.enqueue_many([(n,) for n in numbers])
    assert [job.args for job in jobs] == [[n] for n in numbers]
    with psycopg.connect(dsn) as conn:
        stored: dict[int, str] = dict(
            conn.execute("SELECT id, args->>0 FROM pgqueue.jobs").fetchall())
    assert [int(stored[job.id]) for job in jobs] == numbers


def test_enqueue_many_validates_every_item_before_inserting_any(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    with pytest.raises(ArgumentError):
        task.enqueue_many([(1,), (2,), ("three",)])
    with pytest.raises(ArgumentError):
        task.enqueue_many([(1,), {"m": 2}])
    with pytest.raises(ConfigurationError, match="tuple"):
        task.enqueue_many([(1,), 2])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="idempotency_key"):
        task.using(idempotency_key="k").enqueue_many([(1,)])
    assert list(task.enqueue_many([])) == []
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)


def test_enqueue_many_takes_the_tasks_typed_arguments(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(a: int, b: str = "x") -> None: ...

    with psycopg.connect(dsn, cursor_factory=CountingCursor) as conn:
        CountingCursor.executed = 0
        jobs = task.using(conn=conn, priority=4).enqueue_many(
            [task.args(1), task.args(2, b="two"), task.args(a=3), (4,), {"a": 5}])
        assert CountingCursor.executed == 1
    # Kept as given, positional or keyword, like enqueue's arguments (and tuples and dicts).
    assert [job.args for job in jobs] == [[1], [2], [], [4], []]
    assert [job.kwargs for job in jobs] == [{}, {"b": "two"}, {"a": 3}, {}, {"a": 5}]
    # Positional only: the fast path of tuples.
    jobs = task.enqueue_many([task.args(n, str(n)) for n in range(100)])
    assert [job.args for job in jobs] == [[n, str(n)] for n in range(100)]
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT args, kwargs, priority FROM pgqueue.jobs ORDER BY id").fetchall()
    assert [(r["args"], r["kwargs"], r["priority"]) for r in rows[:3]] == [
        ([1], {}, 4), ([2], {"b": "two"}, 4), ([], {"a": 3}, 4)]
    assert [r["args"] for r in rows[5:]] == [[n, str(n)] for n in range(100)]
    assert repr(task.args(2, b="two")) == "t.args(2, b='two')"


def test_enqueue_many_refuses_steps_and_other_tasks_arguments_in_one_line(
    q: Queue, dsn: str
) -> None:
    @q.task(name="t")
    def add(a: int, b: int) -> int:
        return a + b

    @q.task(name="other")
    def other(a: int, b: int) -> int:
        return a - b

    # A workflow step may lack its first argument (a chain gives it the previous result).
    with pytest.raises(ConfigurationError) as refused:
        add.enqueue_many([add.args(1, 2), add.s(3)])  # type: ignore[list-item]
    assert str(refused.value) == (
        "enqueue_many item 1 is t.s(*[3], **{}), a workflow step: use add.args(...) with "
        "every argument of the job")
    with pytest.raises(ConfigurationError, match=r"^enqueue_many item 0 is other\.args\(1, 2\), "
                       r"arguments of another task: use add\.args\(\.\.\.\)$"):
        # The same parameters: only the run time tells the two tasks apart.
        add.enqueue_many([other.args(1, 2)])
    # Missing arguments (code the type checker does not see) fail as enqueue's do.
    with pytest.raises(ArgumentError, match="missing a required argument: 'b'"):
        add.enqueue_many([add.args(1, 2), add.args(3)])  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError,
                       match=r"item 1 is an int: use add\.args\(\.\.\.\), a tuple"):
        add.enqueue_many([(1, 2), 2])  # type: ignore[list-item]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone() == (0,)


def test_enqueue_many_with_run_in_makes_scheduled_jobs(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(n: int) -> None: ...

    jobs = task.using(run_in=600).enqueue_many([(1,), (2,)])
    assert [job.status for job in jobs] == ["scheduled", "scheduled"]
    assert [q.get_job(job.id).status for job in jobs] == ["scheduled", "scheduled"]  # type: ignore[union-attr]


async def test_enqueue_many_async(aq: Queue, dsn: str) -> None:
    @aq.task(name="t")
    def task(n: int) -> None: ...

    jobs = await task.enqueue_many_async([(n,) for n in range(10)])
    assert [job.args for job in jobs] == [[n] for n in range(10)]
    assert len({job.id for job in jobs}) == 10
    jobs = await task.enqueue_many_async([task.args(n=n) for n in range(3)])
    assert [job.kwargs for job in jobs] == [{"n": n} for n in range(3)]


# -- enqueue_by_name -----------------------------------------------------------------------


def test_enqueue_by_name_of_a_known_task_validates_arguments(q: Queue, dsn: str) -> None:
    @q.task(name="reports.build", queue="reports")
    def build(report_id: int) -> None: ...

    job = q.enqueue_by_name("reports.build", args=[7], priority=2)
    stored = row(dsn, job.id)
    assert stored is not None
    assert (stored["task"], stored["args"], stored["queue"], stored["priority"]) == (
        "reports.build", [7], "reports", 2)
    with pytest.raises(ArgumentError):
        q.enqueue_by_name("reports.build", args=["seven"])
    with pytest.raises(ArgumentError):
        q.enqueue_by_name("reports.build", args=[], kwargs={"nope": 1})


def test_enqueue_by_name_of_an_unknown_task_inserts_it_as_given(q: Queue, dsn: str) -> None:
    job = q.enqueue_by_name("other.service.task", args=[1, "a"], kwargs={"k": True},
                            queue="elsewhere", run_in=60)
    stored = row(dsn, job.id)
    assert stored is not None
    assert (stored["task"], stored["args"], stored["kwargs"]) == (
        "other.service.task", [1, "a"], {"k": True})
    assert stored["queue"] == "elsewhere"
    assert job.status == "scheduled"
    with pytest.raises(ArgumentError):
        q.enqueue_by_name("other.service.task", args=[float("nan")])
    with pytest.raises(ConfigurationError):
        q.enqueue_by_name("other.service.task", priority="urgent")
    # Enqueueing it does not register it: this process's worker still does not know it.
    assert "other.service.task" not in q.tasks


def test_enqueue_by_name_of_an_unknown_task_joins_the_callers_transaction(
    q: Queue, dsn: str
) -> None:
    with psycopg.connect(dsn) as conn:
        job = q.enqueue_by_name("other.service.task", args=[1], conn=conn)
        conn.rollback()
    assert row(dsn, job.id) is None


# -- get_job and statuses ------------------------------------------------------------------


def set_row(dsn: str, job_id: int, assignments: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE pgqueue.jobs SET {assignments} WHERE id = %s".encode(), (job_id,))


def test_get_job_finds_live_and_dead_jobs_and_none_for_unknown(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task(x: int) -> None: ...

    live = task.using(meta={"a": 1}).enqueue(1)
    found = q.get_job(live.id)
    assert found is not None
    assert (found.id, found.task, found.args, found.meta, found.status) == (
        live.id, "t", [1], {"a": 1}, "queued")
    assert q.get_job(live.id + 1000) is None

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "WITH gone AS (DELETE FROM pgqueue.jobs WHERE id = %s RETURNING *) "
            "INSERT INTO pgqueue.dead_jobs (id, queue, task, args, kwargs, priority, run_at, "
            "attempts, max_attempts, created_at, error) SELECT id, queue, task, args, kwargs, "
            "priority, run_at, 3, max_attempts, created_at, 'Traceback: boom' FROM gone",
            (live.id,),
        )
    dead = q.get_job(live.id)
    assert dead is not None
    assert (dead.status, dead.error, dead.attempts, dead.args) == (
        "dead", "Traceback: boom", 3, [1])


def test_status_values(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    def status(job: Job) -> str:
        found = q.get_job(job.id)
        assert found is not None
        return found.status

    queued = task.enqueue()
    scheduled = task.using(run_in=3600).enqueue()
    retrying = task.enqueue()
    set_row(dsn, retrying.id, "attempts = 1, run_at = now() + interval '1 minute', "
                              "last_error = 'boom'")
    retry_due = task.enqueue()
    set_row(dsn, retry_due.id, "attempts = 1, last_error = 'boom'")
    running = task.enqueue()
    set_row(dsn, running.id, "status = 'running', attempts = 1, worker_id = 'w', "
                             "lease_expires_at = now() + interval '30 seconds'")
    succeeded = task.enqueue()
    set_row(dsn, succeeded.id, "status = 'succeeded', attempts = 1, finished_at = now()")
    cancelled = task.enqueue()
    cancelled.cancel()
    assert [status(j) for j in (queued, scheduled, retrying, retry_due, running, succeeded,
                                cancelled)] == [
        "queued", "scheduled", "retrying", "queued", "running", "succeeded", "cancelled"]
    assert retrying.refresh().status == "retrying"
    assert retrying.last_error == "boom"
    assert succeeded.refresh().finished


def test_cancel_of_a_running_job_only_requests_it(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    job = task.enqueue()
    set_row(dsn, job.id, "status = 'running', attempts = 1, worker_id = 'w', "
                         "lease_expires_at = now() + interval '30 seconds'")
    job.cancel()
    assert (job.status, job.cancel_requested) == ("running", True)
    stored = row(dsn, job.id)
    assert stored is not None
    assert (stored["status"], stored["cancel_requested"]) == ("running", True)


def test_cancel_of_a_finished_job_changes_nothing(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def task() -> None: ...

    job = task.enqueue()
    set_row(dsn, job.id, "status = 'succeeded', attempts = 1, finished_at = now(), "
                         "result = '42'")
    job.cancel()
    assert (job.status, job.result) == ("succeeded", 42)


# -- wait ------------------------------------------------------------------------------------


async def test_wait_returns_the_result_and_refreshes_the_job(aq: Queue) -> None:
    @aq.task(name="add")
    async def add(a: int, b: int) -> dict[str, int]:
        await asyncio.sleep(0.2)
        return {"sum": a + b}

    job = await add.enqueue_async(2, 3)
    async with background_worker(aq):
        result = await asyncio.to_thread(job.wait, 10)
        assert result == {"sum": 5}
        assert (job.status, job.result, job.attempts) == ("succeeded", {"sum": 5}, 1)
        assert job.finished_at is not None
        other = await add.enqueue_async(1, 1)
        assert await other.wait_async(timeout=10) == {"sum": 2}
        assert other.status == "succeeded"


async def test_wait_raises_job_failed_for_a_dead_job(aq: Queue) -> None:
    @aq.task(name="reports.build")
    async def build() -> None:
        raise Discard("the report was deleted")

    job = await build.enqueue_async()
    async with background_worker(aq):
        with pytest.raises(JobFailed) as failure:
            await asyncio.to_thread(job.wait, 10)
        assert failure.value.job_id == job.id
        assert failure.value.task == "reports.build"
        assert failure.value.error is not None
        assert "the report was deleted" in failure.value.error
        assert "the report was deleted" in str(failure.value)
        assert job.status == "dead"
        again = await aq.get_job_async(job.id)
        assert again is not None
        with pytest.raises(JobFailed):
            await again.wait_async(timeout=1)


def test_wait_raises_timeout_error_when_the_job_does_not_finish(q: Queue) -> None:
    @q.task(name="t")
    def task() -> None: ...

    job = task.enqueue()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        job.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert job.status == "queued"


def test_wait_on_a_cancelled_job_returns_none(q: Queue) -> None:
    @q.task(name="t")
    def task() -> None: ...

    job = task.enqueue()
    job.cancel()
    assert job.wait(timeout=1) is None
    assert job.status == "cancelled"


def test_cancelling_an_unknown_job_raises_job_not_found(q: Queue) -> None:
    from pgqueue import JobNotFound

    with pytest.raises(JobNotFound, match="no job with id 424242"):
        q.cancel_job(424242)


def test_refresh_of_a_pruned_job_raises_job_not_found(q: Queue, dsn: str) -> None:
    from pgqueue import JobNotFound

    @q.task(name="t")
    def task() -> None: ...

    job = task.enqueue()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgqueue.jobs WHERE id = %s", (job.id,))
    with pytest.raises(JobNotFound, match=str(job.id)):
        job.refresh()
    with pytest.raises(JobNotFound):
        job.wait(timeout=1)
