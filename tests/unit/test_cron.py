"""Cron expressions and time zones (pgqueue/cron.py), and what @q.periodic refuses.

The daylight-saving tests compute ticks across the real Europe/Paris transitions of
2026: clocks go forward on 29 March at 02:00 CET (to 03:00 CEST, 01:00 UTC) and back on
25 October at 03:00 CEST (to 02:00 CET, 01:00 UTC). docs/guides/periodic.md documents
what they check.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from pgqueue import ConfigurationError, JobContext, Queue
from pgqueue.cron import ALIASES, parse_cron

PARIS = ZoneInfo("Europe/Paris")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc,arg-type]


def paris_wall(ticks: list[datetime]) -> list[str]:
    """Ticks as Paris wall-clock times with their offset (what a user reads)."""
    return [tick.astimezone(PARIS).strftime("%m-%d %H:%M%z") for tick in ticks]


# -- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(("alias", "after", "expected"), [
    ("@hourly", utc(2026, 5, 1, 10, 30), utc(2026, 5, 1, 11)),
    ("@daily", utc(2026, 5, 1, 10, 30), utc(2026, 5, 2)),
    ("@midnight", utc(2026, 5, 1, 10, 30), utc(2026, 5, 2)),
    ("@weekly", utc(2026, 5, 1, 10, 30), utc(2026, 5, 3)),  # the next Sunday
    ("@monthly", utc(2026, 5, 1, 10, 30), utc(2026, 6, 1)),
    ("@yearly", utc(2026, 5, 1, 10, 30), utc(2027, 1, 1)),
    ("@annually", utc(2026, 5, 1, 10, 30), utc(2027, 1, 1)),
])
def test_aliases(alias: str, after: datetime, expected: datetime) -> None:
    assert alias in ALIASES
    assert parse_cron(alias).next_after(after) == expected
    assert parse_cron(alias.upper()).next_after(after) == expected


def test_five_fields_in_utc_by_default() -> None:
    cron = parse_cron("*/5  *  * * *")
    assert (cron.expression, cron.tz) == ("*/5 * * * *", "UTC")
    assert cron.ticks(utc(2026, 5, 1, 10, 3, 59), 2) == [utc(2026, 5, 1, 10, 5),
                                                         utc(2026, 5, 1, 10, 10)]
    # Strictly after: a moment on a tick gives the next one.
    assert cron.next_after(utc(2026, 5, 1, 10, 5)) == utc(2026, 5, 1, 10, 10)
    assert parse_cron("0 9 * * MON-FRI", "America/New_York").next_after(
        utc(2026, 5, 2)) == utc(2026, 5, 4, 13)  # Monday 09:00 EDT


@pytest.mark.parametrize(("expression", "fragment"), [
    ("* * * *", "invalid cron expression '* * * *' (4 fields)"),
    ("* * * * * *", "(6 fields)"),
    ("", "(0 fields)"),
    ("61 * * * *", "invalid cron expression '61 * * * *' (Bad minute)"),
    ("* 24 * * *", "(Bad hour)"),
    ("*/0 * * * *", "invalid cron expression '*/0 * * * *'"),
    ("0 0 31 2 *", "'0 0 31 2 *'"),
    ("@often", "unknown cron alias '@often'"),
    (None, "invalid cron expression None"),
    (5, "invalid cron expression 5"),
])
def test_bad_cron_expressions_are_one_line(expression: object, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_cron(expression)
    message = str(caught.value)
    assert fragment in message and "\n" not in message
    assert "5 fields 'minute hour day-of-month month day-of-week'" in message
    assert "@hourly" in message


@pytest.mark.parametrize("tz", ["Paris", "Europe/Nowhere", "", " UTC", 3, "../etc/passwd"])
def test_bad_time_zones_are_one_line(tz: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_cron("* * * * *", tz)
    message = str(caught.value)
    assert "time zone" in message and "'Europe/Paris'" in message and "\n" not in message


# -- daylight saving time, Europe/Paris 2026 ----------------------------------------------


def test_spring_forward_fixed_time_in_the_skipped_hour_runs_at_three() -> None:
    """02:30 does not exist on 29 March: the tick runs at 03:00 CEST, once."""
    ticks = parse_cron("30 2 * * *", "Europe/Paris").ticks(utc(2026, 3, 27), 3)
    assert paris_wall(ticks) == ["03-27 02:30+0100", "03-28 02:30+0100", "03-29 03:00+0200"]
    assert ticks[2] == utc(2026, 3, 29, 1)
    assert paris_wall(parse_cron("30 2 * * *", "Europe/Paris").ticks(ticks[2], 1)) == \
        ["03-30 02:30+0200"]


def test_spring_forward_interval_has_no_tick_in_the_skipped_hour() -> None:
    ticks = parse_cron("*/30 * * * *", "Europe/Paris").ticks(utc(2026, 3, 29, 0, 15), 4)
    assert paris_wall(ticks) == ["03-29 01:30+0100", "03-29 03:00+0200",
                                 "03-29 03:30+0200", "03-29 04:00+0200"]
    # Real elapsed time: 30 minutes between every two ticks, across the jump.
    assert {(b - a).total_seconds() for a, b in itertools.pairwise(ticks)} == {1800}


def test_fall_back_fixed_time_in_the_repeated_hour_runs_once() -> None:
    """02:30 happens twice on 25 October: the tick runs at the first one only."""
    ticks = parse_cron("30 2 * * *", "Europe/Paris").ticks(utc(2026, 10, 24), 3)
    assert paris_wall(ticks) == ["10-24 02:30+0200", "10-25 02:30+0200", "10-26 02:30+0100"]
    assert ticks[1] == utc(2026, 10, 25, 0, 30)


def test_fall_back_interval_ticks_in_both_passes_of_the_repeated_hour() -> None:
    ticks = parse_cron("*/30 * * * *", "Europe/Paris").ticks(utc(2026, 10, 24, 23, 45), 5)
    assert paris_wall(ticks) == ["10-25 02:00+0200", "10-25 02:30+0200", "10-25 02:00+0100",
                                 "10-25 02:30+0100", "10-25 03:00+0100"]
    assert {(b - a).total_seconds() for a, b in itertools.pairwise(ticks)} == {1800}


def test_a_fixed_hour_range_across_both_transitions() -> None:
    """``0 1-3 * * *``: 02:00 is skipped in March (03:00 runs once, not twice) and runs
    once in October."""
    cron = parse_cron("0 1-3 * * *", "Europe/Paris")
    assert paris_wall(cron.ticks(utc(2026, 3, 28, 23), 3)) == \
        ["03-29 01:00+0100", "03-29 03:00+0200", "03-30 01:00+0200"]
    assert paris_wall(cron.ticks(utc(2026, 10, 24, 22), 3)) == \
        ["10-25 01:00+0200", "10-25 02:00+0200", "10-25 03:00+0100"]


def test_utc_schedules_never_meet_a_transition() -> None:
    ticks = parse_cron("30 1 * * *").ticks(utc(2026, 3, 28), 3)
    assert ticks == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 1, 30)]


# -- @q.periodic refuses at decoration time -----------------------------------------------


def test_periodic_refuses_a_task_with_arguments() -> None:
    q = Queue(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigurationError) as caught:
        @q.periodic("@hourly")
        @q.task(name="resize")
        def resize(image_id: int, ctx: JobContext) -> None: ...
    message = str(caught.value)
    assert message.startswith("periodic task 'resize' takes arguments")
    assert "'image_id'" in message and "q.schedule(" in message and "\n" not in message
    assert q.periodic_tasks == {}


def test_periodic_accepts_ctx_and_defaults_only() -> None:
    q = Queue(dsn="postgresql://nobody@127.0.0.1:1/none")

    @q.periodic("@daily", name="poll-daily")  # a second schedule for the same task
    @q.periodic("*/5 * * * *", tz="Europe/Paris", queue="cron", priority=3)
    @q.task(name="poll")
    def poll(ctx: JobContext, limit: int = 10) -> None: ...

    spec = q.periodic_tasks["poll"]
    assert (spec.task, spec.cron.tz, spec.options.queue, spec.options.priority) == \
        ("poll", "Europe/Paris", "cron", 3)
    assert set(q.periodic_tasks) == {"poll", "poll-daily"}


@pytest.mark.parametrize(("args", "kwargs", "fragment"), [
    (("0 3 * *",), {}, "invalid cron expression '0 3 * *'"),
    (("@daily",), {"tz": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    (("@daily",), {"priority": "high"}, "invalid priority 'high'"),
    (("@daily",), {"run_in": 5}, "unknown option(s) run_in"),
    (("@daily",), {"name": "bad\nname"}, "invalid schedule name"),
])
def test_periodic_refuses_bad_values_in_one_line(
    args: tuple[str], kwargs: dict[str, object], fragment: str
) -> None:
    q = Queue(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigurationError) as caught:
        q.periodic(*args, **kwargs)  # type: ignore[arg-type]
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_periodic_goes_above_task() -> None:
    q = Queue(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigurationError, match=r"place it above @q\.task"):
        @q.task(name="upside_down")  # type: ignore[type-var]
        @q.periodic("@daily")
        def upside_down() -> None: ...
