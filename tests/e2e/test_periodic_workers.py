"""Periodic jobs with real ``pgq worker`` processes and real minute boundaries.

The one slow test of the feature: three workers and an every-minute code schedule, over
two ticks → exactly one job per tick, enqueued by exactly one of the workers; and a
schedule added with ``pgq periodic add`` while they run is enqueued by them, without a
restart. The first tick is one the schedule missed while no worker ran (its row is left
due at the last minute boundary, as a stopped deployment leaves it): the three workers
race for it the moment they start. The second is the next real minute boundary. So the
test takes until that boundary (at most a minute) instead of two.
Everything else about periodic jobs is tested fast, in tests/integration/test_periodic.py
(by putting next_run_at in the past) and tests/unit/test_cron.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from tests._polling import wait_until
from tests.e2e._chaos import Processes, query
from tests.e2e._pgq import assert_one_line_error, clean_environment, json_of, ok, pgq

WORKERS = 3


def _ticks(dsn: str, task: str) -> list[tuple[datetime, str, datetime]]:
    return [(row[0], row[1], row[2]) for row in query(
        dsn, "SELECT run_at, status, created_at FROM pgqueue.jobs WHERE task = %s "
        "ORDER BY run_at", (task,))]


@pytest.mark.timeout(180)
def test_three_workers_enqueue_each_tick_exactly_once(dsn: str, processes: Processes) -> None:
    # The code schedule as a deployment stopped since the last boundary left it: due.
    missed = datetime.now(UTC).replace(second=0, microsecond=0)
    query(dsn, "INSERT INTO pgqueue.schedules (name, cron, tz, task, source, next_run_at) "
               "VALUES ('every_minute', '* * * * *', 'UTC', 'every_minute', 'code', %s) "
               "RETURNING name", (missed,))
    workers = [processes.start_worker(dsn, app="periodic_tasks:q", concurrency=2,
                                      lease=6, poll_interval=5) for _ in range(WORKERS)]
    added = datetime.now(UTC)
    ok("periodic", "add", "rt", "* * * * *", "runtime_tick", "--args", '["hello"]',
       "--dsn", dsn)
    wait_until(lambda: len([t for t in _ticks(dsn, "every_minute")
                            if t[1] == "succeeded"]) >= 2 and _ticks(dsn, "runtime_tick"),
               timeout=130, interval=0.5, message="two ticks of every_minute, one of rt")
    # Past the last tick enqueued so far: a duplicate of any of them would exist by now.
    last = max(t[0] for t in _ticks(dsn, "every_minute") + _ticks(dsn, "runtime_tick"))
    wait_until(lambda: datetime.now(UTC) >= last + timedelta(seconds=2), timeout=10)
    ticks = [t[0] for t in _ticks(dsn, "every_minute")]
    # The missed tick once, then every boundary once. Missed ticks are not backfilled: if
    # the workers took until past the next boundary to start, that one is skipped.
    assert ticks[0] == missed and len(ticks) >= 2, ticks
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(ticks)]
    assert gaps[0] in (60, 120) and set(gaps[1:]) <= {60}, ticks
    runtime = [t[0] for t in _ticks(dsn, "runtime_tick")]
    next_boundary = (added + timedelta(minutes=1)).replace(second=0, microsecond=0)
    assert runtime[0] in (next_boundary, next_boundary + timedelta(minutes=1)), runtime
    assert len(set(runtime)) == len(runtime)  # at most one job per tick
    # Exactly one worker's tick statement won each tick (the idempotency key is only a
    # second guard): one "enqueued" line per job across the three logs.
    logs = "".join(worker.log() for worker in workers)
    assert logs.count("Schedule 'every_minute': enqueued job") == len(ticks), logs
    assert logs.count("Schedule 'rt': enqueued job") == len(runtime), logs
    lags = [(created - run_at).total_seconds()
            for run_at, _, created in _ticks(dsn, "every_minute")[1:]]  # not the missed one
    print(f"tick to job inserted: {', '.join(f'{lag * 1000:.1f} ms' for lag in lags)}")
    assert all(0 <= lag < 1.0 for lag in lags), lags
    listed = {item["name"]: item for item in json_of("periodic", "list", "--dsn", dsn)}
    assert listed["every_minute"]["state"] == "active"
    assert listed["every_minute"]["source"] == "code"
    assert listed["rt"]["source"] == "runtime"
    assert listed["every_minute"]["last_run_at"] == ticks[-1].isoformat()


def test_periodic_commands(dsn: str) -> None:
    """add, list, pause, resume, remove, and one-line errors for bad input."""
    env = clean_environment()
    added = json_of("periodic", "add", "nightly", "0 3 * * *", "reports.build", "--args",
                    "[5]", "--tz", "Europe/Paris", "--queue", "reports", "--priority", "4",
                    "--dsn", dsn, env=env)
    assert (added["cron"], added["tz"], added["args"], added["queue"], added["priority"]) == \
        ("0 3 * * *", "Europe/Paris", [5], "reports", 4)
    assert added["state"] == "active" and added["source"] == "runtime"
    table = ok("periodic", "list", "--dsn", dsn).stdout
    assert "nightly" in table and "0 3 * * *" in table and "active" in table
    assert json_of("periodic", "pause", "nightly", "--dsn", dsn)["state"] == "paused"
    assert "paused" in ok("periodic", "list", "--dsn", dsn).stdout
    resumed = json_of("periodic", "resume", "nightly", "--dsn", dsn)
    assert resumed["state"] == "active"
    assert "Removed schedule 'nightly'" in ok("periodic", "remove", "nightly",
                                               "--dsn", dsn).stdout
    assert json_of("periodic", "list", "--dsn", dsn) == []
    assert_one_line_error(pgq("periodic", "remove", "nightly", "--dsn", dsn),
                          "no schedule named 'nightly'")
    assert_one_line_error(pgq("periodic", "add", "x", "0 3 * *", "t", "--dsn", dsn),
                          "invalid cron expression '0 3 * *'", "5 fields")
    assert_one_line_error(pgq("periodic", "add", "x", "@often", "t", "--dsn", dsn),
                          "unknown cron alias '@often'", "@hourly")
    assert_one_line_error(pgq("periodic", "add", "x", "@daily", "t", "--tz", "Paris",
                              "--dsn", dsn), "unknown time zone 'Paris'", "Europe/Paris")
    assert_one_line_error(pgq("periodic", "add", "x", "@daily", "t", "--args", "{",
                              "--dsn", dsn), "invalid --args")
