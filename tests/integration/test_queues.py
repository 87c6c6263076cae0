"""Queues as objects (revision 0006_queues): pause and resume, bounded queues,
and their settings through the Python API and SQL, against a real database and an
in-process worker. ``tests/e2e/test_queues_cli.py`` drives real worker processes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

from pgqueue import ConfigurationError, JobContext, Queue, QueueFull
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.maintenance import Maintenance
from tests._polling import async_wait_until
from tests.integration._worker_helpers import background_worker, row, until_sleeping


def _statuses(dsn: str, ids: list[int]) -> list[str]:
    return [(row(dsn, job_id) or {}).get("status", "gone") for job_id in ids]


# -- pause and resume ---------------------------------------------------------------------


async def test_a_paused_queue_is_not_claimed_and_resume_wakes_an_idle_worker(
    aq: Queue, dsn: str
) -> None:
    ran: list[str] = []

    @aq.task(name="note")
    async def note(where: str, ctx: JobContext) -> None:
        ran.append(where)

    await asyncio.to_thread(aq.pause_queue, "email")  # before it has any job: allowed
    paused_ids = [(await note.using(queue="email").enqueue_async("email")).id
                  for _ in range(3)]
    # A poll interval no test waits for: what starts after resume() was woken by it.
    async with background_worker(aq, poll_interval=600) as worker:
        other = await note.using(queue="other").enqueue_async("other")
        await async_wait_until(lambda: (row(dsn, other.id) or {}).get("status") ==
                               "succeeded", timeout=10, message="the other queue's job")
        await until_sleeping(worker)
        # Enqueueing into a paused queue works; its jobs stay queued.
        paused_ids.append((await note.using(queue="email").enqueue_async("email")).id)
        await asyncio.sleep(0.3)  # several claims' worth: none may take them
        assert _statuses(dsn, paused_ids) == ["queued"] * 4
        assert ran == ["other"]
        info = await asyncio.to_thread(aq.resume_queue, "email")
        assert not info.paused
        await async_wait_until(lambda: _statuses(dsn, paused_ids) == ["succeeded"] * 4,
                               timeout=5, message="the resumed queue's jobs to run")


async def test_a_pause_written_in_sql_holds_too(aq: Queue, dsn: str) -> None:
    @aq.task(name="noop")
    async def noop() -> None: ...

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("INSERT INTO pgqueue.queues (name, paused) VALUES ('sql', true)")
        job = await noop.using(queue="sql").enqueue_async()
        async with background_worker(aq, poll_interval=600) as worker:
            await until_sleeping(worker)
            assert (row(dsn, job.id) or {})["status"] == "queued"
            await conn.execute("UPDATE pgqueue.queues SET paused = false WHERE name = 'sql'")
            await async_wait_until(lambda: (row(dsn, job.id) or {})["status"] ==
                                   "succeeded", timeout=5, message="woken by the UPDATE")


def test_pause_resume_and_settings_show_in_queues(q: Queue) -> None:
    @q.task(name="noop", queue="email")
    def noop() -> None: ...

    assert q.queues() == []
    noop.enqueue()
    (email,) = q.queues()
    assert (email.name, email.paused, email.max_queued) == ("email", False, None)
    assert email.counts["queued"] == 1 and set(email.counts) == {
        "queued", "scheduled", "retrying", "waiting", "running", "succeeded", "cancelled",
        "dead"}
    assert q.pause_queue("email").paused
    assert q.pause_queue("email").paused  # again: no error, no change
    no_limits = {"concurrency": None, "key_concurrency": None, "rate_limit": None,
                 "fair": False}
    assert q.set_queue("bulk", max_queued=10).settings == {"max_queued": 10,
                                                            "priority_aging": None} | no_limits
    assert [(i.name, i.paused, i.max_queued) for i in q.queues()] == [
        ("bulk", False, 10), ("email", True, None)]
    assert q.set_queue("bulk").max_queued == 10  # nothing given: nothing changes
    assert q.set_queue("bulk", max_queued=None).max_queued is None  # None clears
    assert not q.resume_queue("email").paused
    assert q.queues()[1].to_dict()["settings"] == {"max_queued": None,
                                                   "priority_aging": None} | no_limits
    assert q.set_queue("bulk", priority_aging="5m").priority_aging == 300
    assert q.set_queue("bulk", priority_aging=None, max_queued=7).settings == {
        "max_queued": 7, "priority_aging": None} | no_limits


@pytest.mark.parametrize(("call", "message"), [
    (lambda q: q.pause_queue("a,b"), "invalid queue 'a,b'"),
    (lambda q: q.pause_queue(""), "invalid queue"),
    (lambda q: q.set_queue("x", max_queued=0), "invalid max_queued 0"),
    (lambda q: q.set_queue("x", max_queued=-5), "invalid max_queued -5"),
    (lambda q: q.set_queue("x", max_queued=True), "invalid max_queued True"),
    (lambda q: q.set_queue("x", max_queued=2**31), "invalid max_queued 2147483648"),
    (lambda q: q.set_queue("x", max_queued="10"), "invalid max_queued '10'"),
    (lambda q: q.set_queue("x", priority_aging=0.05), "invalid priority_aging 0.05"),
    (lambda q: q.set_queue("x", priority_aging="2y"), "priority_aging"),
    (lambda q: q.set_queue("x", priority_aging=10**9), "invalid priority_aging"),
    (lambda q: q.set_queue("x", priority_aging=1, max_queued=0), "invalid max_queued 0"),
])
def test_bad_queue_names_and_settings_are_refused_in_one_line(
    q: Queue, call: Any, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        call(q)
    assert "\n" not in str(raised.value)


def test_an_unknown_setting_is_a_type_error(q: Queue) -> None:
    with pytest.raises(TypeError, match="bogus"):
        q.set_queue("x", bogus=1)  # type: ignore[call-arg]


# -- bounded queues ----------------------------------------------------------------------


def test_a_bounded_queue_refuses_the_job_beyond_its_bound_on_every_path(
    q: Queue, dsn: str
) -> None:
    @q.task(name="noop", queue="bounded")
    def noop(n: int) -> None: ...

    q.set_queue("bounded", max_queued=3)
    ids = [noop.enqueue(n).id for n in range(3)]
    with pytest.raises(QueueFull, match=r"queue 'bounded' is full: 3 queued jobs at most") as full:
        noop.enqueue(4)
    assert full.value.queue == "bounded" and "\n" not in str(full.value)
    # All or nothing: a batch (also one loaded with COPY) that would cross the bound.
    with pytest.raises(QueueFull):
        noop.enqueue_many([(n,) for n in range(2)])
    with pytest.raises(QueueFull):
        noop.enqueue_many([(n,) for n in range(2500)])
    # Scheduled jobs count; another queue does not.
    assert noop.using(queue="free").enqueue(5).id
    with pytest.raises(QueueFull):
        noop.using(run_in=3600).enqueue(6)
    # SQL written by hand meets the same bound, with the same SQLSTATE.
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as raised:
        conn.execute("INSERT INTO pgqueue.jobs (queue, task) VALUES ('bounded', 'noop')")
    assert raised.value.sqlstate == "PQ001"
    # On the caller's connection: QueueFull, and its transaction is aborted like by any
    # error; a savepoint keeps the rest of the transaction.
    with psycopg.connect(dsn) as conn:
        with conn.transaction():
            conn.execute("CREATE TABLE kept (n int)")
            with pytest.raises(QueueFull), conn.transaction():
                noop.using(conn=conn).enqueue(7)
            conn.execute("INSERT INTO kept VALUES (1)")
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (1,)
    counts = {info.name: info.counts["queued"] for info in q.queues()}
    assert counts == {"bounded": 3, "free": 1}
    # Raising the bound lets the next one in; clearing it removes the bound.
    q.set_queue("bounded", max_queued=4)
    ids.append(noop.enqueue(8).id)
    q.set_queue("bounded", max_queued=None)
    assert len(noop.enqueue_many([(n,) for n in range(10)])) == 10


def test_concurrent_enqueuers_never_take_a_bounded_queue_past_its_bound(
    q: Queue, dsn: str
) -> None:
    bound, threads, tries = 25, 8, 10

    @q.task(name="noop", queue="race")
    def noop(n: int) -> None: ...

    q.set_queue("race", max_queued=bound)
    accepted: list[int] = []
    refused: list[QueueFull] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def enqueue(offset: int) -> None:
        # Each thread on its own connection, in transactions that hold the lock a while.
        try:
            with psycopg.connect(dsn) as conn:
                start.wait()
                for n in range(tries):
                    try:
                        with conn.transaction():
                            job = noop.using(conn=conn).enqueue(offset + n)
                            time.sleep(0.002)
                        with lock:
                            accepted.append(job.id)
                    except QueueFull as exc:
                        with lock:
                            refused.append(exc)
        except BaseException as exc:  # reported below
            failures.append(exc)

    workers = [threading.Thread(target=enqueue, args=(i * 100,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(60)
    assert failures == []
    assert len(accepted) == bound and len(refused) == threads * tries - bound
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pgqueue.jobs WHERE queue = 'race'").fetchone()
    assert found == (bound,)


def test_an_unbounded_queue_is_not_slowed_by_a_bounded_one(q: Queue, dsn: str) -> None:
    # The trigger looks at bounded queues only when the statement enqueues into one:
    # a batch into an unbounded queue is not counted, even while a bounded queue is full.
    @q.task(name="noop")
    def noop(n: int) -> None: ...

    q.set_queue("tiny", max_queued=1)
    noop.using(queue="tiny").enqueue(0)
    assert len(noop.enqueue_many([(n,) for n in range(5000)])) == 5000


# -- enqueue from SQL ----------------------------------------------------------------------


async def test_the_sql_function_enqueues_dedupes_respects_bounds_and_wakes_a_worker(
    aq: Queue, dsn: str
) -> None:
    ran: list[tuple[int, int]] = []

    @aq.task(name="add")
    async def add(a: int, b: int = 0) -> int:
        ran.append((a, b))
        return a + b

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:

        async def call(statement: str, *params: Any) -> Any:
            found = await (await conn.execute(statement, params)).fetchone()
            assert found is not None
            return found[0]

        async with background_worker(aq, poll_interval=600) as worker:
            await until_sleeping(worker)
            # Positional arguments, keyword arguments: a real worker runs it, woken by the
            # insert trigger's NOTIFY (the poll interval is far away).
            job_id = await call("SELECT pgqueue.enqueue('add', '[20]', '{\"b\": 22}')")
            await async_wait_until(lambda: (row(dsn, job_id) or {}).get("status") ==
                                   "succeeded", timeout=5, message="the SQL-enqueued job")
            assert (row(dsn, job_id) or {})["result"] == 42
        # An idempotency key returns the holder's id.
        first = await call("SELECT pgqueue.enqueue('add', '[1]', idempotency_key => 'k')")
        again = await call("SELECT pgqueue.enqueue('add', '[2]', idempotency_key => 'k')")
        assert first == again
        # Every option lands in the row as enqueue() would write it.
        later = await call(
            "SELECT pgqueue.enqueue('add', '[1, 2]', queue => 'sql', priority => 7, "
            "run_at => now() + interval '1 hour', max_attempts => 5, "
            "meta => '{\"from\": \"sql\"}', timeout => 2.5, result_ttl => 60)")
        job = await aq.get_job_async(later)
        assert job is not None
        assert (job.queue, job.priority, job.max_attempts, job.meta, job.timeout,
                job.result_ttl, job.status) == ("sql", 7, 5, {"from": "sql"}, 2.5, 60,
                                                "scheduled")
        # The queue's bound holds for it too.
        await asyncio.to_thread(aq.set_queue, "capped", max_queued=1)
        await call("SELECT pgqueue.enqueue('add', '[1]', queue => 'capped')")
        with pytest.raises(psycopg.Error) as full:
            await call("SELECT pgqueue.enqueue('add', '[1]', queue => 'capped')")
        assert full.value.sqlstate == "PQ001"


@pytest.mark.parametrize(("call", "message"), [
    ("SELECT pgqueue.enqueue('')", 'invalid task "": a task name is 1 to 255 printable'),
    ("SELECT pgqueue.enqueue(NULL)", "invalid task NULL"),
    ("SELECT pgqueue.enqueue(E'a\\nb')", 'invalid task "a\\nb"'),
    ("SELECT pgqueue.enqueue('t', queue => 'a,b')", 'invalid queue "a,b"'),
    ("SELECT pgqueue.enqueue('t', priority => 40000)", "invalid priority 40000"),
    ("SELECT pgqueue.enqueue('t', args => '{}')", "args must be a JSON array"),
    ("SELECT pgqueue.enqueue('t', kwargs => '[]')", "kwargs a JSON object"),
    ("SELECT pgqueue.enqueue('t', run_at => 'infinity')", "jobs_times_in_range"),
    ("SELECT pgqueue.enqueue('t', max_attempts => 0)", "jobs_max_attempts_check"),
])
def test_the_sql_function_refuses_bad_input_naming_the_field(
    dsn: str, call: str, message: str
) -> None:
    with psycopg.connect(dsn) as conn, pytest.raises(psycopg.Error) as raised:
        conn.execute(call)
    assert message in str(raised.value).splitlines()[0]



# -- priority aging ------------------------------------------------------------------------


async def test_maintenance_raises_waiting_priorities_by_the_steps_they_waited(
    aq: Queue, dsn: str
) -> None:
    @aq.task(name="noop")
    async def noop() -> None: ...

    await asyncio.to_thread(aq.set_queue, "aged", priority_aging=60)
    waited = await noop.using(queue="aged").enqueue_async()
    fresh = await noop.using(queue="aged", priority=3).enqueue_async()
    plain = await noop.using(queue="plain").enqueue_async()
    later = await noop.using(queue="aged", run_in=3600).enqueue_async()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        # The first two have waited two steps; the scheduled one is not ready.
        await conn.execute("UPDATE pgqueue.jobs SET run_at = now() - interval '121 seconds' "
                           "WHERE id = ANY(%s)", ([waited.id, plain.id],))
        maintenance = Maintenance(connect=WorkerConnections(dsn, "aging").link(),
                                  queries=aq.queries)
        try:
            # Only the one that waited: two steps, so two more priority at once.
            assert await maintenance.age_priorities() == 1
            assert (row(dsn, waited.id) or {})["priority"] == 2
            assert await maintenance.age_priorities() == 0  # the step has not passed
            # One step since the queue was last aged: one more, however long it waited.
            await conn.execute("UPDATE pgqueue.queues SET aged_at = now() - "
                               "interval '61 seconds' WHERE name = 'aged'")
            assert await maintenance.age_priorities() == 1
        finally:
            await maintenance.close()
    priorities = {job.id: (row(dsn, job.id) or {})["priority"]
                  for job in (waited, fresh, plain, later)}
    assert priorities == {waited.id: 3, fresh.id: 3, plain.id: 0, later.id: 0}
