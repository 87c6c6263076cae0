"""A worker whose clock is five minutes off takes every time decision by the database's.

Real ``pgq worker`` processes run under ``faketime -f ±5m`` (Debian's ``faketime``:
``time.time()`` and ``datetime.now()`` in the worker are five minutes ahead or behind;
its monotonic clock, which only measures intervals, is left alone). Against the
database's clock they must:

* set and renew leases that run out when the database says so: a job held longer than
  its lease is not rescued while its worker heartbeats, and is rescued by another skewed
  worker within lease + 5 s once its worker is stopped (SIGSTOP), never before;
* claim a job neither before its ``run_at`` nor a poll interval after it (the producer's
  sleep until the next ``run_at``), and not spin while it waits;
* admit a rate-limited task at its rate (4 a second), not a burst and not a crawl;
* give a code schedule its first tick after the database's now (``* * * * *``: the
  next minute), and a run-time one added from a skewed ``pgq periodic add`` too;
* be reported ``alive`` by ``pgq workers`` run under the same skew.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
from datetime import timedelta
from typing import Any

import pytest

from tests._polling import wait_until
from tests.e2e._chaos import APPS, Processes, query, scalar, task_app
from tests.e2e._pgq import clean_environment, pgq_executable

LEASE = 3.0
POLL = 10.0  # a claim that waited for the poll instead of the run_at would be seconds late


def _faketime(offset: str) -> list[str]:
    """The command line that runs a program ``offset`` away (``+5m``) from the real time:
    ``env`` with libfaketime preloaded, so the program keeps the pid that was started
    (the ``faketime`` wrapper would run it as a child)."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        message = "faketime is not installed: apt-get install faketime (see .ci/run)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    # The monotonic clock measures intervals (heartbeat periods, backoff): left real.
    return ["env", f"LD_PRELOAD={found[0]}", f"FAKETIME={offset}",
            "FAKETIME_DONT_FAKE_MONOTONIC=1"]


def _transactions(dsn: str) -> int:
    """Commits in this database so far (the statistics lag by up to a second)."""
    return int(scalar(dsn, "SELECT xact_commit FROM pg_stat_database "
                           "WHERE datname = current_database()"))


@pytest.mark.parametrize("offset", ["+5m", "-5m"])
def test_a_worker_with_a_skewed_clock_decides_by_the_databases(
    dsn: str, processes: Processes, offset: str
) -> None:
    skewed = _faketime(offset)
    worker = processes.start_worker(dsn, name="skewed", app="clock_tasks:q", lease=LEASE,
                                    poll_interval=POLL, concurrency=4, wrapper=skewed)
    worker_id = worker.worker_id(dsn)

    # The worker's own row: a lease set by the database's clock, and alive by it too for
    # a reader whose clock is just as wrong.
    ahead = scalar(dsn, "SELECT extract(epoch FROM lease_expires_at - now()) "
                        "FROM pgqueue.workers WHERE id = %s", (worker_id,))
    assert 0 < ahead <= LEASE + 0.5, ahead
    done = _run_skewed(skewed, "workers", "--dsn", dsn, "--json")
    assert [w["status"] for w in done if w["id"] == worker_id] == ["alive"], done

    # The code schedule's first tick: the minute after the database's now when it was
    # declared. Either it is still to come, or it is the first tick enqueued (the
    # scheduler may have fired it by now); a tick from before the schedule existed (a
    # clock behind) or one past that minute (a clock ahead) is the worker's clock.
    declared = query(dsn, "SELECT next_run_at, date_trunc('minute', created_at) "
                          "+ interval '1 minute' FROM pgqueue.schedules "
                          "WHERE name = 'clock.every_minute'")
    assert declared, "the worker declared no schedule"
    next_run_at, first_tick = declared[0]
    ticks = [row[0] for row in query(
        dsn, "SELECT run_at FROM pgqueue.jobs WHERE task = 'clock.every_minute' "
             "ORDER BY run_at")]
    assert (ticks[0] if ticks else next_run_at) == first_tick, (offset, ticks, next_run_at)
    assert next_run_at > max(ticks, default=first_tick - timedelta(minutes=1)), ticks

    # A run-time schedule added by a skewed client starts at the database's next minute.
    _run_skewed(skewed, "periodic", "add", "skewed-add", "* * * * *", "clock.noop",
                "--args", "[1]", "--dsn", dsn, "--json")
    assert scalar(dsn, "SELECT next_run_at = date_trunc('minute', now()) + interval '1 minute'"
                       " OR next_run_at = date_trunc('minute', now()) "
                       "FROM pgqueue.schedules WHERE name = 'skewed-add'"), query(
        dsn, "SELECT next_run_at, now() FROM pgqueue.schedules WHERE name = 'skewed-add'")

    with task_app(dsn, "clock_tasks") as app:
        # run_at: two seconds from now by the database's clock; claimed then, without a
        # busy loop meanwhile.
        commits_before = _transactions(dsn)
        job = app.noop.using(run_in=2).enqueue(1)
        started = wait_until(lambda: scalar(
            dsn, "SELECT started_at FROM pgqueue.jobs WHERE id = %s AND started_at IS NOT NULL",
            (job.id,)), timeout=POLL + 5, message="the job due in 2 s started")
        run_at = scalar(dsn, "SELECT run_at FROM pgqueue.jobs WHERE id = %s", (job.id,))
        assert run_at <= started < run_at + timedelta(seconds=1.5), (offset, run_at, started)
        wait_until(lambda: _transactions(dsn) > commits_before, timeout=5)
        commits = _transactions(dsn) - commits_before
        # Heartbeats, rescues and a few claims: tens of commits in the 2 s, not thousands.
        assert commits < 300, f"{commits} commits while the worker waited 2 s for a job"

        # Rate windows: 12 jobs at 4 a second take about 2.75 s, spread evenly.
        ids = [j.id for j in app.limited.enqueue_many([(n,) for n in range(12)])]
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                                       "AND status = 'succeeded'", (ids,)) == len(ids),
                   timeout=POLL + 10, message="the rate-limited jobs done")
        spread = query(dsn, "SELECT extract(epoch FROM max(started_at) - min(started_at)) "
                            "FROM pgqueue.jobs WHERE id = ANY(%s)", (ids,))[0][0]
        assert 2.0 <= spread <= 5.0, (offset, spread)

        # Leases: a job held for a minute is not rescued while its worker heartbeats...
        held = app.hold.enqueue(60)
        wait_until(lambda: scalar(dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                                  (held.id,)) == "running", timeout=10)
        wait_until(lambda: scalar(dsn, "SELECT now() - started_at > %s FROM pgqueue.jobs "
                                       "WHERE id = %s", (timedelta(seconds=2 * LEASE),
                                                         held.id)),
                   timeout=3 * LEASE, interval=0.1, message="two leases into the job")
        assert query(dsn, "SELECT status, attempts FROM pgqueue.jobs WHERE id = %s",
                     (held.id,)) == [("running", 1)]
        # ...and, once its worker stops, is rescued by another skewed worker after its
        # lease ran out by the database's clock, within lease + 5 s.
        rescuer = processes.start_worker(dsn, name="rescuer", app="clock_tasks:q",
                                         lease=LEASE, poll_interval=POLL, wrapper=skewed)
        worker.signal(signal.SIGSTOP)
        try:
            assert query(dsn, "SELECT status, attempts FROM pgqueue.jobs WHERE id = %s",
                         (held.id,)) == [("running", 1)]
            stopped_lease = scalar(dsn, "SELECT lease_expires_at FROM pgqueue.jobs "
                                        "WHERE id = %s", (held.id,))
            wait_until(lambda: scalar(dsn, "SELECT attempts FROM pgqueue.jobs WHERE id = %s",
                                      (held.id,)) == 2, timeout=LEASE + 10, interval=0.1,
                       message="the held job rescued and claimed again")
            error, restarted = query(dsn, "SELECT last_error, started_at FROM pgqueue.jobs "
                                          "WHERE id = %s", (held.id,))[0]
            assert error.startswith("lease expired"), error
            assert stopped_lease <= restarted <= stopped_lease + timedelta(seconds=5), (
                offset, stopped_lease, restarted)
        finally:
            worker.signal(signal.SIGCONT)
        assert rescuer.alive() and worker.alive(), processes.logs()


def _run_skewed(skewed: list[str], *args: str) -> Any:
    """Run ``pgq ARGS`` under ``skewed``; its JSON output."""
    done = subprocess.run([*skewed, pgq_executable(), *args], capture_output=True, text=True,
                          timeout=60, env=clean_environment(APPS), check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
