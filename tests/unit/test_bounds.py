"""Every value that can reach the database is checked where the user gives it.

Each refusal is one line that names the field and the accepted range. The database-side
consequences (what these values did before: raw psycopg errors, a worker that cannot
read a row back) are in tests/integration/test_input_bounds.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pgqueue import ArgumentError, ConfigurationError, Queue, Retry, Snooze
from pgqueue.bounds import (
    MAX_DELAY_SECONDS,
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_INTEGER,
    MAX_SCHEMA_NAME_LENGTH,
)
from pgqueue.options import ENQUEUE_OPTIONS, JobOptions
from pgqueue.settings import parse_duration, validate_schema_name


def refused(options: dict[str, Any]) -> str:
    with pytest.raises(ConfigurationError) as raised:
        JobOptions().with_options(options, ENQUEUE_OPTIONS)
    message = str(raised.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ({"max_attempts": 10**10}, ["max_attempts", f"from 1 to {MAX_INTEGER}"]),
        ({"max_attempts": 0}, ["max_attempts", "from 1"]),
        ({"run_in": math.inf}, ["run_in", "finite", str(MAX_DELAY_SECONDS)]),
        ({"run_in": math.nan}, ["run_in", "finite"]),
        ({"run_in": 10**400}, ["run_in", "finite"]),
        ({"run_in": MAX_DELAY_SECONDS + 1}, ["run_in", str(MAX_DELAY_SECONDS)]),
        ({"run_in": timedelta.max}, ["run_in", str(MAX_DELAY_SECONDS)]),
        ({"run_in": "99999999999999d"}, ["run_in", str(MAX_DELAY_SECONDS)]),
        ({"timeout": math.nan}, ["timeout", "finite"]),
        ({"timeout": math.inf}, ["timeout", "finite"]),
        ({"timeout": 0}, ["timeout", "more than 0"]),
        ({"result_ttl": 10**12}, ["result_ttl", str(MAX_INTEGER)]),
        ({"result_ttl": math.inf}, ["result_ttl", "finite"]),
        ({"queue": "a\x00b"}, ["queue", "printable"]),
        ({"queue": "evil\nqueue"}, ["queue", "printable"]),
        ({"queue": "a,b"}, ["queue", "','"]),
        ({"queue": " padded"}, ["queue", "whitespace"]),
        ({"queue": "q" * 201}, ["queue", "200"]),
        ({"queue": "\ud800"}, ["queue", "printable"]),
        ({"idempotency_key": "k\x00"}, ["idempotency_key", "NUL"]),
        ({"idempotency_key": "\udfff"}, ["idempotency_key", "surrogate"]),
        ({"idempotency_key": "k" * (MAX_IDEMPOTENCY_KEY_BYTES + 1)},
         ["idempotency_key", f"{MAX_IDEMPOTENCY_KEY_BYTES} bytes"]),
        ({"idempotency_key": "é" * (MAX_IDEMPOTENCY_KEY_BYTES // 2 + 1)},
         ["idempotency_key", "bytes long in UTF-8"]),
        ({"run_at": datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=5)))},
         ["run_at", "out of range"]),
        ({"run_at": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))},
         ["run_at", "out of range"]),
        ({"run_at": datetime(2400, 1, 1, tzinfo=UTC)}, ["run_at", "100 years"]),
        ({"meta": {"k": "\x00"}}, ["meta", "NUL"]),
        ({"meta": {"k": "\ud800"}}, ["meta", "surrogate"]),
        ({"meta": {"k": math.nan}}, ["meta"]),
        ({"priority": 2**15}, ["priority", "-32768 to 32767"]),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_out_of_range_options_are_refused_in_one_line(
    options: dict[str, Any], fragments: list[str]
) -> None:
    message = refused(options)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": MAX_INTEGER}, {"run_in": MAX_DELAY_SECONDS}, {"timeout": 1e-3},
        {"result_ttl": MAX_INTEGER}, {"result_ttl": 0}, {"queue": "tenant:42 / high"},
        {"queue": "q" * 200}, {"idempotency_key": "k" * MAX_IDEMPOTENCY_KEY_BYTES},
        {"idempotency_key": "line\nbreaks and ünïcode are fine"},
        {"run_at": datetime(1, 1, 2, tzinfo=UTC)},
        {"run_at": datetime.now(UTC) + timedelta(days=365 * 99)},
    ],
    ids=lambda value: repr(value)[:40],
)
def test_values_at_the_limits_are_accepted(options: dict[str, Any]) -> None:
    JobOptions().with_options(options, ENQUEUE_OPTIONS)


def test_task_options_are_checked_at_registration() -> None:
    q = Queue(dsn="postgresql://nowhere/db")
    with pytest.raises(ConfigurationError, match="timeout"):
        q.task(timeout=math.nan)
    with pytest.raises(ConfigurationError, match="retry interval"):
        q.task(retry_intervals=[1, math.inf])
    with pytest.raises(ConfigurationError, match="max_attempts"):
        q.task(max_attempts=10**10)


@pytest.mark.parametrize(
    "name",
    ["evil\n2025-01-01 00:00:00,000 INFO pgqueue.worker: Worker x stopped.", "tab\there",
     "\x1b[31mred", " padded", "x" * 256, "line\u2028separator"],
    ids=repr,
)
def test_task_names_must_be_printable_at_registration_and_enqueue_by_name(name: str) -> None:
    q = Queue(dsn="postgresql://nowhere/db")
    with pytest.raises(ConfigurationError, match="invalid task name") as raised:
        q.task(name=name)(lambda: None)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigurationError, match="invalid task name"):
        q.enqueue_by_name(name)
    assert q.tasks == {}


def test_module_qualname_task_names_are_accepted() -> None:
    q = Queue(dsn="postgresql://nowhere/db")
    with pytest.raises(ConfigurationError, match="must not be empty"):
        q.enqueue_by_name("")

    def local() -> None: ...

    task = q.task(local)
    assert task.name.endswith("<locals>.local")
    assert q.task(name="emails.welcome / v2")(lambda: None).name == "emails.welcome / v2"


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [("abc", None, "args must be a list or tuple"), (None, {1: 2}, "string keys"),
     (None, [("a", 1)], "kwargs must be a dict")],
)
def test_enqueue_by_name_checks_the_shape_of_args_and_kwargs(
    args: Any, kwargs: Any, fragment: str
) -> None:
    q = Queue(dsn="postgresql://nowhere/db")
    with pytest.raises(ArgumentError, match=fragment):
        q.enqueue_by_name("t", args=args, kwargs=kwargs)


@pytest.mark.parametrize("length", [MAX_SCHEMA_NAME_LENGTH + 1, 63])
def test_schema_names_whose_channel_would_not_fit_are_refused(length: int) -> None:
    name = "s" * length
    with pytest.raises(ConfigurationError) as raised:
        validate_schema_name(name)
    assert f"at most {MAX_SCHEMA_NAME_LENGTH}" in str(raised.value)
    assert "_jobs" in str(raised.value)
    with pytest.raises(ConfigurationError):
        Queue(dsn="postgresql://nowhere/db", schema=name)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1, MAX_DELAY_SECONDS * 2,
                                   1e300, "5", None, True])
def test_retry_and_snooze_refuse_absurd_delays_when_created(value: Any) -> None:
    with pytest.raises(ValueError, match="Retry delay") as raised:
        Retry(delay=value)
    assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="Snooze seconds"):
        Snooze(value)


def test_retry_and_snooze_accept_the_documented_range() -> None:
    assert Retry(delay=MAX_DELAY_SECONDS).delay == MAX_DELAY_SECONDS
    assert Retry().delay == 0.0
    assert Snooze(0.5).seconds == 0.5
    assert Snooze(10).seconds == 10.0


def test_durations_are_finite_and_bounded_everywhere() -> None:
    for bad in (math.nan, math.inf, 10**400, "1" * 400):
        with pytest.raises(ConfigurationError, match="finite"):
            parse_duration(bad, what="lease")
    assert parse_duration(MAX_DELAY_SECONDS) == MAX_DELAY_SECONDS
