"""Hostile and out-of-range input at the API boundary, against a real database.

Each test reproduces a failure found by probing the API with hostile input: what used
to reach PostgreSQL (and fail there with a raw error, or be stored and
break later) is now refused where it is given, in one line, or stored as the caller
gave it.
"""

from __future__ import annotations

import asyncio
import math
import random
import string
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from pydantic import BaseModel

from pgqueue import (
    ArgumentError,
    ConfigurationError,
    JobContext,
    Queue,
    Retry,
    SchemaOutOfDate,
    Snooze,
)
from pgqueue.bounds import MAX_IDEMPOTENCY_KEY_BYTES, MAX_SCHEMA_NAME_LENGTH
from pgqueue.cli.errors import one_line_error
from pgqueue.db.migrate import upgrade
from pgqueue.db.names import notify_channel
from tests._polling import async_wait_until
from tests.integration._worker_helpers import background_worker, row, run_burst


def _job_count(dsn: str, schema: str = "pgqueue") -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema))
        ).fetchone()
    assert found is not None
    return int(found[0])


def _incompressible(length: int) -> str:
    rng = random.Random(length)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=length))


# -- 10.6: schema names ------------------------------------------------------------------


def test_the_longest_accepted_schema_name_migrates_enqueues_and_notifies(
    empty_dsn: str,
) -> None:
    """58 characters: the channel ``<schema>_jobs`` is exactly PostgreSQL's 63."""
    schema = "s" * MAX_SCHEMA_NAME_LENGTH
    upgrade(empty_dsn, schema)
    q = Queue(dsn=empty_dsn, schema=schema)
    try:
        with psycopg.connect(empty_dsn, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(
                sql.Identifier(notify_channel(schema))))
            q.enqueue_by_name("t", args=[1], queue="edge")
            received = list(listener.notifies(timeout=5, stop_after=1))
        assert [(n.channel, n.payload) for n in received] == [(notify_channel(schema), "edge")]
    finally:
        q.close()


def test_a_schema_name_whose_channel_cannot_fit_is_refused_before_migrating(
    empty_dsn: str,
) -> None:
    # Accepted until now: migrate worked, then every enqueue failed in the trigger with
    # "channel name too long".
    with pytest.raises(ConfigurationError, match=f"at most {MAX_SCHEMA_NAME_LENGTH}"):
        upgrade(empty_dsn, "s" * (MAX_SCHEMA_NAME_LENGTH + 1))
    with psycopg.connect(empty_dsn) as conn:
        schemas = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'ss%'")
        assert schemas.fetchall() == []


# -- 10.7: idempotency keys --------------------------------------------------------------


def test_the_longest_accepted_idempotency_key_fits_its_index(q: Queue, dsn: str) -> None:
    key = _incompressible(MAX_IDEMPOTENCY_KEY_BYTES)
    first = q.enqueue_by_name("t", idempotency_key=key)
    assert q.enqueue_by_name("t", idempotency_key=key).id == first.id
    with pytest.raises(ConfigurationError, match="idempotency_key") as raised:
        q.enqueue_by_name("t", idempotency_key=key + "x")
    assert f"at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes" in str(raised.value)
    assert _job_count(dsn) == 1


def test_a_statement_error_is_not_reported_as_an_unreachable_database(dsn: str) -> None:
    """What a too-long key did before: an index-size error, an OperationalError, which
    the CLI called "cannot reach the database"."""
    with psycopg.connect(dsn) as conn, pytest.raises(errors.ProgramLimitExceeded) as raised:
        conn.execute(
            "INSERT INTO pgqueue.jobs (task, idempotency_key) VALUES ('t', %s)",
            (_incompressible(3000),),
        )
    assert isinstance(raised.value, psycopg.OperationalError)
    message = one_line_error(raised.value)
    assert message is not None and message.startswith("database error: index row size")
    with pytest.raises(psycopg.OperationalError) as unreachable:
        psycopg.connect("postgresql://postgres@127.0.0.1:1/none", connect_timeout=2)
    assert str(one_line_error(unreachable.value)).startswith("cannot reach the database")


# -- 10.8: out-of-range values -----------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 10**10}, {"run_in": math.inf}, {"queue": "nul\x00queue"},
     {"idempotency_key": "nul\x00key"}, {"result_ttl": 10**12}, {"timeout": math.nan},
     {"run_at": datetime(9999, 12, 31, 23, 59, tzinfo=UTC)}],
    ids=lambda options: next(iter(options)),
)
def test_out_of_range_values_never_reach_the_database(
    q: Queue, dsn: str, options: dict[str, Any]
) -> None:
    @q.task(name="t")
    def t() -> None: ...

    with pytest.raises(ConfigurationError) as raised:
        t.using(**options).enqueue()
    assert next(iter(options)) in str(raised.value) and "\n" not in str(raised.value)
    assert _job_count(dsn) == 0


async def test_a_task_raising_an_absurd_retry_or_snooze_fails_that_attempt_clearly(
    aq: Queue, dsn: str
) -> None:
    """Retry(delay=inf) or Snooze(1e12) used to reach the completer (interval out of
    range, timestamp too large); now the constructor refuses it inside the task, and
    the attempt fails with that message like any error."""

    @aq.task(name="absurd", max_attempts=1)
    async def absurd(how: str) -> None:
        if how == "retry":
            raise Retry(delay=math.inf)
        raise Snooze(1e12)

    retry = await absurd.enqueue_async("retry")
    snooze = await absurd.enqueue_async("snooze")
    await run_burst(aq, concurrency=2)
    for job, words in ((retry, "Retry delay"), (snooze, "Snooze seconds")):
        dead = await asyncio.to_thread(row, dsn, job.id, "dead_jobs")
        assert dead is not None
        assert dead["error"].splitlines()[-1] == (
            f"ValueError: {words} must be a finite number of seconds from 0 to 3153600000 "
            f"(100 years), got {'inf' if words == 'Retry delay' else '1000000000000.0'}"
        )


async def test_a_lone_surrogate_in_what_a_task_raises_or_returns_fails_only_that_attempt(
    aq: Queue, dsn: str
) -> None:
    """An exception text holding a lone surrogate (which PostgreSQL text cannot hold) used
    to fail the completer's whole batch with UnicodeEncodeError and exit the worker (issue
    10.2): every co-running job lost its attempt to lease expiry. The text is now stored
    with the surrogate escaped; a returned one fails the attempt, saying why."""

    @aq.task(name="surrogates", max_attempts=1)
    async def surrogates(how: str) -> str:
        if how == "raise":
            raise ValueError("bad \ud800 text")
        if how == "return":
            return "\udfff"
        return "fine"

    raised = await surrogates.enqueue_async("raise")
    returned = await surrogates.enqueue_async("return")
    fine = await surrogates.enqueue_async("ok")
    await run_burst(aq, concurrency=3)  # returns only if the worker exited 0
    dead = await asyncio.to_thread(row, dsn, raised.id, "dead_jobs")
    assert dead is not None
    assert dead["error"].splitlines()[-1] == "ValueError: bad \\ud800 text"
    dead = await asyncio.to_thread(row, dsn, returned.id, "dead_jobs")
    assert dead is not None and "lone surrogate" in dead["error"]
    assert (await asyncio.to_thread(row, dsn, fine.id) or {})["status"] == "succeeded"


# -- arguments: NUL, lone surrogates, big floats ------------------------------------------


def test_arguments_that_text_cannot_hold_are_refused_at_enqueue(q: Queue, dsn: str) -> None:
    @q.task(name="t")
    def t(value: Any) -> None: ...

    # A lone surrogate used to pass json.dumps and fail in psycopg's encoder
    # (UnicodeEncodeError) inside the caller's transaction.
    for value in ("\ud800", {"k": ["\udfff"]}, "nul\x00"):
        with pytest.raises(ArgumentError) as raised:
            t.enqueue(value)
        assert "\n" not in str(raised.value)
    with pytest.raises(ArgumentError, match="surrogate"):
        t.enqueue_many([("ok",), ("\ud800",)])
    assert _job_count(dsn) == 0


def test_big_floats_come_back_as_the_same_floats(q: Queue) -> None:
    """jsonb prints 1e+300 back as a 301-digit integer: the job received an int that was
    not even equal to the float it was given."""

    @q.task(name="t")
    def t(value: Any, typed: float) -> None: ...

    values = [1e16, 1.5e17, -1.2345678901234567e300, 1.7976931348623157e308, 2.0, 5e-324]
    job = t.enqueue(values, typed=1e300)
    stored = q.get_job(job.id)
    assert stored is not None
    assert stored.args == [values] and stored.kwargs == {"typed": 1e300}
    assert all(type(value) is float for value in stored.args[0])
    many = t.enqueue_many([(1e20, 3e30)] * 3)
    assert [job.args for job in map(q.get_job, many.ids)] == [[1e20, 3e30]] * 3  # type: ignore[union-attr]


# -- 18.3: keyword arguments are stored as the caller gave them ---------------------------


class Address(BaseModel):
    city: str


async def test_keyword_arguments_are_stored_as_given_on_every_path(aq: Queue, dsn: str) -> None:
    seen: list[tuple[int, int, Address]] = []

    @aq.task(name="add")
    async def add(a: int, b: int = 0, *, where: Address | None = None,
                  ctx: JobContext) -> None:
        assert where is None or isinstance(where, Address)
        seen.append((a, b, where or Address(city="-")))

    where = {"city": "Oslo"}
    # A keyword-only ctx is, to type checkers, an argument (docs/guides/tasks.md,
    # "Typed enqueue"); the runtime knows better.
    jobs = [
        await add.enqueue_async(a=1, b=2),  # type: ignore[call-arg]
        await add.enqueue_async(3, b=4, where=where),  # type: ignore[call-arg, arg-type]
        await aq.tasks["add"].using(queue="q").enqueue_async(5, 6),
    ]
    jobs.append(await asyncio.to_thread(aq.enqueue_by_name, "add", [7], {"b": 8}))
    small = await add.enqueue_many_async([{"a": 9, "where": where}, (10,)])
    bulk = await add.enqueue_many_async([{"a": n, "b": n} for n in range(2000)])
    stored = {job.id: (job.args, job.kwargs) for job in jobs}
    with psycopg.connect(dsn) as conn:
        rows: dict[int, Any] = dict(conn.execute(
            "SELECT id, jsonb_build_array(args, kwargs) FROM pgqueue.jobs").fetchall())
    assert rows[jobs[0].id] == [[], {"a": 1, "b": 2}] == list(stored[jobs[0].id])
    assert rows[jobs[1].id] == [[3], {"b": 4, "where": where}]
    assert rows[jobs[2].id] == [[5, 6], {}]
    assert rows[jobs[3].id] == [[7], {"b": 8}]
    assert [rows[job_id] for job_id in small.ids] == [[[], {"a": 9, "where": where}], [[10], {}]]
    assert all(rows[job_id] == [[], {"a": n, "b": n}] for n, job_id in enumerate(bulk.ids))
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pgqueue.jobs WHERE kwargs->>'a' IS NOT NULL").fetchone()
    assert found == (2000 + 2,)

    # The worker rebuilds each call: annotated values, pydantic models from kwargs.
    await run_burst(aq, concurrency=4)
    assert len(seen) == 2000 + 6
    assert (3, 4, Address(city="Oslo")) in seen and (9, 0, Address(city="Oslo")) in seen
    assert (1, 2, Address(city="-")) in seen and (7, 8, Address(city="-")) in seen


# -- 18.4: a dead job's summary line names the cause ---------------------------------------


async def test_arguments_the_worker_cannot_rebuild_name_task_parameter_and_problem(
    aq: Queue, dsn: str
) -> None:
    @aq.task(name="myapp.tasks.send_welcome_email")
    def send_welcome_email(user_id: int, email: str) -> None: ...

    def insert(args: str, kwargs: str) -> int:
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "INSERT INTO pgqueue.jobs (task, args, kwargs) VALUES "
                "('myapp.tasks.send_welcome_email', %s, %s) RETURNING id", (args, kwargs),
            ).fetchone()
        assert found is not None
        return int(found[0])

    bad_value = await asyncio.to_thread(insert, '["u1", "a@example.com"]', "{}")
    bad_keyword = await asyncio.to_thread(insert, "[]", '{"user_id": "x", "email": "e"}')
    missing = await asyncio.to_thread(insert, "[1]", "{}")
    await run_burst(aq, concurrency=2)

    def summary(job_id: int) -> str:
        with psycopg.connect(dsn) as conn:
            found = conn.execute(  # the "group by last line" query of docs/reference/schema.md
                "SELECT substring(error FROM '[^\\n]*$') FROM pgqueue.dead_jobs WHERE id = %s",
                (job_id,)).fetchone()
        assert found is not None
        return str(found[0])

    prefix = "cannot rebuild the arguments of task 'myapp.tasks.send_welcome_email': "
    assert await asyncio.to_thread(summary, bad_value) == (
        prefix + "parameter 'user_id' (int) cannot take the stored value 'u1': Input should "
        "be a valid integer, unable to parse string as an integer"
    )
    assert "parameter 'user_id' (int) cannot take the stored value 'x'" in \
        await asyncio.to_thread(summary, bad_keyword)
    assert (await asyncio.to_thread(summary, missing)).startswith(prefix)
    assert "missing a required argument: 'email'" in await asyncio.to_thread(summary, missing)
    for job_id in (bad_value, bad_keyword, missing):
        assert "errors.pydantic.dev" not in await asyncio.to_thread(summary, job_id)


# -- 18.7: enqueue before pgq migrate -------------------------------------------------------


async def test_enqueue_before_migrate_says_run_pgq_migrate_in_one_line(empty_dsn: str) -> None:
    q = Queue(dsn=empty_dsn)

    @q.task(name="t")
    def t(n: int) -> None: ...

    expected = "schema 'pgqueue' of this database has no pgqueue tables"
    try:
        calls = [
            lambda: t.enqueue(1), lambda: t.enqueue_many([(1,), (2,)]),
            lambda: q.enqueue_by_name("t", args=[1]), lambda: q.get_job(1), q.stats,
        ]
        for call in calls:
            with pytest.raises(SchemaOutOfDate) as raised:
                await asyncio.to_thread(call)
            assert str(raised.value).startswith(expected)
            assert str(raised.value).endswith("run pgq migrate")
            assert "\n" not in str(raised.value)
            assert raised.value.__cause__ is None and raised.value.__suppress_context__
        with pytest.raises(SchemaOutOfDate, match=expected):
            await t.enqueue_async(1)
        with pytest.raises(SchemaOutOfDate, match=expected):
            await t.enqueue_many_async([(n,) for n in range(2500)])
        async with await psycopg.AsyncConnection.connect(empty_dsn) as conn:
            with pytest.raises(SchemaOutOfDate, match=expected):
                await t.using(conn=conn).enqueue_async(1)
    finally:
        await q.close_async()


# -- 10.1: times a row inserted by hand may hold -------------------------------------------

UNREADABLE_TIMES = ["infinity", "-infinity", "10000-01-01 00:00:00+00", "0001-01-01 00:00:00+00"]


@pytest.mark.parametrize("when", UNREADABLE_TIMES)
@pytest.mark.parametrize("column", ["run_at", "created_at"])
def test_a_time_python_cannot_read_is_refused_at_insert(dsn: str, column: str, when: str) -> None:
    # 'infinity' in run_at used to make every worker exit at start ("timestamp too
    # large", reading the next scheduled job's time) and pgq jobs list fail, forever.
    with psycopg.connect(dsn) as conn, pytest.raises(errors.CheckViolation,
                                                    match="jobs_times_in_range"):
        conn.execute(
            sql.SQL("INSERT INTO pgqueue.jobs (task, {}) VALUES ('t', %s)").format(
                sql.Identifier(column)), (when,))


async def test_rows_out_of_range_before_revision_0005_are_moved_to_dead_jobs(
    empty_dsn: str,
) -> None:
    upgrade(empty_dsn, "pgqueue", "0004_workers_stuck")
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        bad = [
            conn.execute("INSERT INTO pgqueue.jobs (task, args, run_at) VALUES "
                         "('add', '[1, 2]', %s) RETURNING id", (when,)).fetchone()[0]  # type: ignore[index]
            for when in UNREADABLE_TIMES
        ]
        bad.append(conn.execute("INSERT INTO pgqueue.jobs (task, args, created_at) VALUES "
                                "('add', '[1, 2]', 'infinity') RETURNING id").fetchone()[0])  # type: ignore[index]
        good = conn.execute("INSERT INTO pgqueue.jobs (task, args) VALUES ('add', '[2, 3]') "
                            "RETURNING id").fetchone()[0]  # type: ignore[index]
    assert upgrade(empty_dsn, "pgqueue").changed

    queue = Queue(dsn=empty_dsn)

    @queue.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    try:
        # Every moved row is readable, dead, and says why; pgq dead retry brings it back.
        for job_id in bad:
            job = await queue.get_job_async(job_id)
            assert job is not None and job.status == "dead", job_id
            assert job.error is not None and "revision 0005_times_in_range" in job.error
        assert {job.id for job in queue.dead_jobs()} == set(bad)
        # A worker (not a burst one: it looks for the next scheduled job) runs the rest.
        # Its exit status is checked on the way out (0: it never died).
        async with background_worker(queue):
            await async_wait_until(
                lambda: (row(empty_dsn, good) or {}).get("status") == "succeeded",
                timeout=15, message="the in-range job to run")
    finally:
        await queue.close_async()
