"""Job options: validated where they are given, with a one-line message (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pgqueue import ConfigurationError, Queue
from pgqueue.options import ENQUEUE_OPTIONS, TASK_OPTIONS, JobOptions, retry_intervals


def test_defaults() -> None:
    options = JobOptions()
    assert (options.queue, options.priority, options.max_attempts) == ("default", 0, 3)
    assert (options.timeout, options.result_ttl, options.run_in, options.run_at) == (
        None, 86400, 0.0, None)
    assert (options.idempotency_key, options.meta) == (None, "{}")


def test_task_defaults_and_name(q: Queue) -> None:
    @q.task
    def plain() -> None: ...

    assert plain.name == f"{__name__}.test_task_defaults_and_name.<locals>.plain"
    assert plain.options == JobOptions()
    assert plain.retry_intervals is None
    assert q.get_task(plain.name) is plain

    @q.task(name="custom.name", queue="email", priority=3, max_attempts=5, timeout="30s",
            retry_intervals=["10s", 60], result_ttl="1d")
    def configured() -> None: ...

    assert configured.name == "custom.name"
    assert configured.options == JobOptions(queue="email", priority=3, max_attempts=5,
                                            timeout=30.0, result_ttl=86400)
    assert configured.retry_intervals == (10.0, 60.0)


def test_using_applies_options_over_the_task_defaults(q: Queue) -> None:
    @q.task(queue="email", priority=3)
    def task() -> None: ...

    when = datetime(2030, 1, 1, tzinfo=UTC)
    call = task.using(priority=-5, run_at=when, idempotency_key="k", meta={"a": [1, 2]},
                      max_attempts=1, timeout=timedelta(seconds=5), result_ttl=0)
    assert call.options == JobOptions(queue="email", priority=-5, run_at=when,
                                      idempotency_key="k", meta='{"a":[1,2]}', max_attempts=1,
                                      timeout=5.0, result_ttl=0)
    assert task.options.priority == 3  # unchanged
    assert task.using(run_in="15m").options.run_in == 900.0


def test_run_at_in_another_time_zone_is_kept_aware(q: Queue) -> None:
    @q.task
    def task() -> None: ...

    when = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
    assert task.using(run_at=when).options.run_at == when


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"colour": "blue"}, "unknown option(s) colour"),
        ({"retry_intervals": [1]}, "unknown option(s) retry_intervals"),
        ({"priority": 40_000}, "invalid priority 40000"),
        ({"priority": -40_000}, "invalid priority -40000"),
        ({"priority": 1.5}, "invalid priority 1.5"),
        ({"priority": True}, "invalid priority True"),
        ({"priority": "10"}, "invalid priority '10'"),
        ({"max_attempts": 0}, "invalid max_attempts 0"),
        ({"max_attempts": "3"}, "invalid max_attempts '3'"),
        ({"max_attempts": False}, "invalid max_attempts False"),
        ({"timeout": 0}, "invalid timeout 0"),
        ({"timeout": -1}, "invalid timeout -1"),
        ({"timeout": "fast"}, "invalid timeout 'fast'"),
        ({"run_at": datetime(2030, 1, 1)}, "naive datetime"),
        ({"run_at": "2030-01-01T00:00:00Z"}, "invalid run_at"),
        ({"run_in": "-5s"}, "invalid run_in"),
        ({"run_in": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "run_at or run_in"),
        ({"result_ttl": "forever"}, "invalid result_ttl"),
        ({"queue": ""}, "invalid queue"),
        ({"queue": 5}, "invalid queue"),
        ({"queue": "q" * 201}, "invalid queue"),
        ({"idempotency_key": ""}, "invalid idempotency_key"),
        ({"idempotency_key": 5}, "invalid idempotency_key"),
        ({"meta": ["a"]}, "invalid meta"),
        ({"meta": {"when": datetime(2030, 1, 1)}}, "not JSON-serialisable"),
        ({"meta": {"x": float("nan")}}, "not JSON-serialisable"),
    ],
)
def test_bad_enqueue_options_raise_a_clear_configuration_error(
    q: Queue, options: dict[str, Any], fragment: str
) -> None:
    @q.task
    def task() -> None: ...

    with pytest.raises(ConfigurationError) as raised:
        task.using(**options)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"priority": "high"}, "invalid priority"),
        ({"max_attempts": 0}, "invalid max_attempts"),
        ({"timeout": "never"}, "invalid timeout"),
        ({"run_in": 5}, "unknown option(s) run_in"),
        ({"idempotency_key": "k"}, "unknown option(s) idempotency_key"),
        ({"conn": object()}, "unknown option(s) conn"),
        ({"retry_intervals": "10s"}, "invalid retry_intervals"),
        ({"retry_intervals": []}, "invalid retry_intervals"),
        ({"retry_intervals": [10, "soon"]}, "invalid retry interval 'soon'"),
        ({"retry_intervals": [-1]}, "invalid retry interval -1"),
    ],
)
def test_bad_task_options_fail_at_decoration(
    q: Queue, options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        @q.task(**options)
        def task() -> None: ...
    assert fragment in str(raised.value)
    assert q.tasks == {}


def test_option_sets() -> None:
    assert sorted(TASK_OPTIONS) == ["max_attempts", "priority", "queue", "result_ttl",
                                    "retry_intervals", "timeout"]
    assert sorted(ENQUEUE_OPTIONS) == ["concurrency_key", "conn", "cost", "idempotency_key",
                                       "max_attempts", "meta", "priority", "queue",
                                       "rate_limit_key", "result_ttl", "run_at", "run_in",
                                       "timeout"]


def test_retry_intervals_accept_durations() -> None:
    assert retry_intervals(None) is None
    assert retry_intervals([0, "30s", timedelta(minutes=1), "1h"]) == (0.0, 30.0, 60.0, 3600.0)
    assert retry_intervals((5,)) == (5.0,)


def test_the_same_name_for_two_functions_is_refused(q: Queue) -> None:
    @q.task(name="dup")
    def one() -> None: ...

    with pytest.raises(ConfigurationError, match="already registered"):
        @q.task(name="dup")
        def two() -> None: ...

    assert q.tasks["dup"].func is one.func


def test_unknown_task_lookup_lists_the_known_ones(q: Queue) -> None:
    from pgqueue import TaskNotFound

    @q.task(name="a.known")
    def known() -> None: ...

    with pytest.raises(TaskNotFound, match=r"no task named 'b' \(registered: a.known\)"):
        q.get_task("b")
