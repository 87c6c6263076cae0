"""Properties of the API boundary against a real database: every input is accepted and
round-trips unchanged (as JSON), or is refused with a one-line error before anything is
written. Strategies: tests/_strategies.py (shared with the worker's hardening tests).

Each property runs a few dozen examples on one database (``max_examples`` below keeps
the file within its time budget); ``HYPOTHESIS_PROFILE=thorough`` runs many more.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from pgqueue import ArgumentError, ConfigurationError, Queue
from pgqueue.cli.app import app
from pgqueue.db.migrate import upgrade
from pgqueue.serialization import encode_result, loads, storable_text
from pgqueue.worker import BackgroundWorker, WorkerSettings
from tests import _strategies as s


def examples(count: int) -> settings:
    """``count`` examples in the default profile, scaled with the loaded one (thorough:
    20x). The database fixtures are per test and the examples share them."""
    loaded = settings.default
    scaled = max(1, count * (loaded.max_examples if loaded else 100) // 100)
    return settings(max_examples=scaled,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


ROUND_TRIPS = examples(40)


@pytest.fixture
def q(dsn: str) -> Iterator[Queue]:
    queue = Queue(dsn=dsn)

    @queue.task(name="anything")
    def anything(*args: Any, **kwargs: Any) -> None: ...

    try:
        yield queue
    finally:
        queue.close()


def _one_line(exc: BaseException) -> None:
    assert str(exc) and "\n" not in str(exc), repr(str(exc))


def _jobs(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT count(*) FROM pgqueue.jobs").fetchone()
    assert found is not None
    return int(found[0])


@ROUND_TRIPS
@given(s.task_arguments)
def test_task_arguments_round_trip_or_are_refused(
    q: Queue, dsn: str, arguments: tuple[list[Any], dict[str, Any]]
) -> None:
    positional, keywords = arguments
    before = _jobs(dsn)
    try:
        job = q.tasks["anything"].enqueue(*positional, **keywords)
    except ArgumentError as exc:
        _one_line(exc)
        assert _jobs(dsn) == before
        return
    stored = q.get_job(job.id)
    assert stored is not None
    assert s.same_json(stored.args, s.json_normalized(positional))
    assert s.same_json(stored.kwargs, s.json_normalized(keywords))
    for value in (*stored.args, *stored.kwargs.values()):
        assert type(value) is type(s.json_normalized(value))


@ROUND_TRIPS
@given(s.results)
def test_results_round_trip_or_are_refused(dsn: str, value: Any) -> None:
    try:
        encoded = encode_result(value)
    except TypeError as exc:
        _one_line(exc)
        return
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT %s::jsonb::text", (encoded,)).fetchone()
    assert found is not None
    expected = None if encoded is None else json.loads(encoded)
    assert s.same_json(None if found[0] is None else loads(found[0]), expected)


@ROUND_TRIPS
@given(s.error_texts)
def test_error_texts_are_storable(dsn: str, text: str) -> None:
    stored = storable_text(text)
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT %s::text", (stored,)).fetchone()
    assert found == (stored,)


@ROUND_TRIPS
@given(s.queue_names, s.idempotency_keys)
def test_queue_names_and_keys_round_trip_or_are_refused(
    q: Queue, dsn: str, queue: str, key: str
) -> None:
    with psycopg.connect(dsn) as conn:  # a key held by an earlier example would dedupe
        conn.execute("DELETE FROM pgqueue.jobs")
    before = _jobs(dsn)
    try:
        job = q.tasks["anything"].using(queue=queue, idempotency_key=key).enqueue()
    except ConfigurationError as exc:
        _one_line(exc)
        assert _jobs(dsn) == before
        return
    stored = q.get_job(job.id)
    assert stored is not None and (stored.queue, stored.idempotency_key) == (queue, key)


@examples(12)
@given(s.schema_names)
def test_schema_names_migrate_and_enqueue_or_are_refused(empty_dsn: str, name: str) -> None:
    try:
        upgrade(empty_dsn, name)
    except ConfigurationError as exc:
        _one_line(exc)
        return
    queue = Queue(dsn=empty_dsn, schema=name)
    try:
        job = queue.enqueue_by_name("t", args=[name])
        assert queue.get_job(job.id).args == [name]  # type: ignore[union-attr]
    finally:
        queue.close()


@examples(30)
@given(s.enqueue_json_texts, s.enqueue_json_texts)
def test_json_given_to_pgq_enqueue_round_trips_or_is_refused(
    dsn: str, args_text: str, kwargs_text: str
) -> None:
    result = CliRunner().invoke(
        app, ["enqueue", "t", "--args", args_text, "--kwargs", kwargs_text, "--dsn", dsn,
              "--json"],
    )
    if result.exit_code != 0:
        assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        return
    job = json.loads(result.stdout)
    assert s.same_json(job["args"], json.loads(args_text))
    assert s.same_json(job["kwargs"], json.loads(kwargs_text))


# -- the worker survives whatever a task returns or raises ---------------------------------

# Values handed to the task in this process (the worker runs in a thread of it), so that
# any Python value can be returned or raised, not only what JSON arguments can carry.
_HANDED: dict[str, Any] = {}


@pytest.fixture
def running(dsn: str) -> Iterator[tuple[Queue, BackgroundWorker]]:
    """A real worker in a thread, running the task ``echo``; stopped at the end."""
    queue = Queue(dsn=dsn)

    @queue.task(name="echo", max_attempts=1)
    def echo(how: str, key: str) -> Any:
        value = _HANDED.pop(key)
        if how == "raise":
            raise ValueError(value)
        return value

    worker = BackgroundWorker(queue, WorkerSettings(concurrency=2, poll_interval=0.2,
                                                    install_signal_handlers=False))
    try:
        with worker:
            yield queue, worker
    finally:
        queue.close()


@examples(40)
@given(st.one_of(st.tuples(st.just("raise"), s.error_texts),
                 st.tuples(st.just("return"), s.results)))
@example(("raise", "bad \ud800 text"))
@example(("raise", "nul \x00 in a message"))
@example(("return", "\udfff"))
@example(("return", float("nan")))
def test_the_worker_survives_whatever_a_task_returns_or_raises(
    running: tuple[Queue, BackgroundWorker], dsn: str, case: tuple[str, Any]
) -> None:
    # A lone surrogate in an exception's text used to fail the completer's batch and
    # exit the worker: the first explicit example fails without the fix.
    how, value = case
    queue, worker = running
    key = secrets.token_hex(8)
    _HANDED[key] = value
    job = queue.tasks["echo"].enqueue(how, key)
    deadline = time.monotonic() + 20
    while (found := queue.get_job(job.id)) is not None and found.status not in (
            "succeeded", "dead"):
        assert worker.running, f"the worker died: {worker.error!r}"
        assert time.monotonic() < deadline, f"job {job.id} is still {found.status}"
        time.sleep(0.01)
    assert found is not None and worker.running
    if how == "raise":
        assert found.status == "dead"
        assert found.error is not None and "ValueError" in found.error
        return
    try:
        encoded = encode_result(value)
    except TypeError:
        assert found.status == "dead", found  # refused, saying why
        assert found.error is not None and "cannot be stored as JSON" in found.error
        return
    assert found.status == "succeeded"
    expected = None if encoded is None else json.loads(encoded)
    assert s.same_json(found.result, expected)
