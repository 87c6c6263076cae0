"""Queues as objects with real processes: ``pgq queues pause|resume`` take effect
within a second across three ``pgq worker`` processes, and the ``pgq queues`` commands
print what they changed and refuse bad input in one line.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg

from tests._database import find_psql
from tests._polling import wait_until
from tests.e2e._chaos import APPS, Processes, chaos_app, query, scalar
from tests.e2e._pgq import APP, clean_environment, json_of, ok, pgq

WORKERS = 3
# One enqueue per GAP seconds into the queue under test, from a thread, throughout.
GAP = 0.02
BOUND = timedelta(seconds=1)


@contextlib.contextmanager
def _in_background(target: Callable[[str, threading.Event], None], dsn: str) -> Iterator[None]:
    """Run ``target(dsn, stop)`` in a thread for the block; its error fails the test."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            target(dsn, stop)
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
    assert failures == []


def _stream(dsn: str, stop: threading.Event) -> None:
    with chaos_app(dsn) as app:
        task = app.noop.using(queue="stream")
        n = 0
        while not stop.wait(GAP):
            task.enqueue(n)
            n += 1


def _changed_at(dsn: str) -> datetime:
    """When the last pause or resume of 'stream' committed (its transaction's now())."""
    changed = scalar(dsn, "SELECT updated_at FROM pgqueue.queues WHERE name = 'stream'")
    assert isinstance(changed, datetime)
    return changed


def test_pause_and_resume_take_effect_within_a_second_across_three_workers(
    chaos_dsn: str, processes: Processes
) -> None:
    # A poll interval no test waits for: after resume, only the NOTIFY can wake them.
    workers = [processes.start_worker(chaos_dsn, poll_interval=600) for _ in range(WORKERS)]
    with _in_background(_stream, chaos_dsn):
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                             "status = 'succeeded'") >= 30,
                   timeout=30, message="the stream to run")
        ok("queues", "pause", "stream", "--dsn", chaos_dsn)
        paused_at = _changed_at(chaos_dsn)
        # Enqueueing goes on: 40 jobs more than a second after the pause committed.
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                             "created_at > %s", (paused_at + BOUND,)) >= 40,
                   timeout=30, message="enqueues during the pause")
        # Nothing started more than a second after the pause committed (a claim that was
        # already running then may still take jobs: its start is before the pause).
        late = scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE started_at > %s",
                      (paused_at + BOUND,))
        assert late == 0
        held = scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'queued'")
        assert held >= 40
        resumed = json_of("queues", "resume", "stream", "--dsn", chaos_dsn)
        assert resumed["paused"] is False and resumed["name"] == "stream"
        resumed_at = _changed_at(chaos_dsn)
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                             "created_at < %s AND status <> 'succeeded'",
                                  (resumed_at,)) == 0,
                   timeout=30, message="the jobs held by the pause to run")
        first_start = scalar(chaos_dsn, "SELECT min(started_at) FROM pgqueue.jobs WHERE "
                                        "started_at > %s", (resumed_at,))
        assert first_start is not None and first_start - resumed_at <= BOUND
    # Every worker took part, none died.
    assert all(worker.alive() for worker in workers), processes.logs()
    pids = scalar(chaos_dsn, "SELECT count(DISTINCT worker_id) FROM pgqueue.jobs")
    assert pids == WORKERS


def test_queue_commands_print_the_state_they_leave(dsn: str) -> None:
    assert "No queues yet" in ok("queues", "list", "--dsn", dsn).stdout
    paused = ok("queues", "pause", "email", "--dsn", dsn).stdout
    assert paused.startswith("Paused queue 'email': no worker claims its jobs until "
                             "pgq queues resume email")
    bounded = json_of("queues", "set", "email", "--max-queued", "500", "--dsn", dsn)
    no_limits = {"concurrency": None, "key_concurrency": None, "rate_limit": None,
                 "fair": False}
    assert bounded["settings"] == {"max_queued": 500, "priority_aging": None} | no_limits
    assert bounded["paused"] is True
    aged = ok("queues", "set", "email", "--priority-aging", "2m", "--dsn", dsn).stdout
    assert aged.strip() == ("Queue 'email': max queued 500; priority aging one step per "
                            "120s waited; limits none.")
    listed = json_of("queues", "list", "--dsn", dsn)
    assert [(q["name"], q["paused"], q["settings"]) for q in listed] == [
        ("email", True, {"max_queued": 500, "priority_aging": 120} | no_limits)]
    limited = ok("queues", "set", "email", "--concurrency", "5", "--key-concurrency", "1",
                 "--rate", "100 / m", "--fair", "--dsn", dsn).stdout
    assert limited.strip().endswith("limits 5 running, 1 per key, 100/m, fair.")
    assert "5 running, 1 per key, 100/m, fair" in ok("queues", "list", "--dsn", dsn).stdout
    cleared = json_of("queues", "set", "email", "--concurrency", "none", "--rate", "none",
                      "--no-fair", "--dsn", dsn)
    assert cleared["settings"] == {"max_queued": 500, "priority_aging": 120,
                                   "concurrency": None, "key_concurrency": 1,
                                   "rate_limit": None, "fair": False}
    assert set(listed[0]["counts"]) == {"queued", "scheduled", "retrying", "waiting",
                                        "running", "succeeded", "cancelled", "dead"}
    table = ok("queues", "list", "--dsn", dsn).stdout
    assert "email" in table and "paused" in table and "500" in table
    assert "max queued none (unbounded)" in ok(
        "queues", "set", "email", "--max-queued", "none", "--dsn", dsn).stdout
    assert "Resumed queue 'email'" in ok("queues", "resume", "email", "--dsn", dsn).stdout


def test_bad_queue_commands_say_what_is_wrong(dsn: str) -> None:
    for args, fragment in [
        (["set", "email", "--max-queued", "0"], "'0' is not a bound"),
        (["set", "email", "--max-queued", "-3"], "'-3' is not a bound"),
        (["set", "email", "--max-queued", "lots"], "'lots' is not a bound"),
        (["set", "email"], "give a setting to change"),
        (["set", "email", "--slots", "2"], "No such option: --slots"),
        (["set", "email", "--concurrency", "0"], "'0' is not a concurrency limit"),
        (["set", "email", "--key-concurrency", "-1"], "'-1' is not a concurrency limit"),
    ]:
        result = pgq("queues", *args, "--dsn", dsn)
        assert result.returncode == 2, (args, result.stderr)
        errors = [line for line in result.stderr.splitlines() if "Error" in line]
        assert len(errors) == 1 and fragment in errors[0], (args, result.stderr)
    result = pgq("queues", "set", "email", "--priority-aging", "50ms", "--dsn", dsn)
    assert result.returncode == 1
    assert result.stderr.startswith("error: invalid priority_aging '50ms': seconds per "
                                    "priority step from 0.1")
    for rate in ("10/x", "-1/s", "1e99/s"):
        result = pgq("queues", "set", "email", "--rate", rate, "--dsn", dsn)
        assert result.returncode == 1
        assert result.stderr.strip().startswith(f"error: invalid rate_limit {rate!r}")
        assert "N/s, N/m, N/h" in result.stderr and len(result.stderr.splitlines()) == 1
    result = pgq("queues", "pause", "a,b", "--dsn", dsn)
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: invalid queue 'a,b': must not contain ',' (a "
                                     "queue name is 1 to 200 printable characters without "
                                     "commas)")


def test_a_job_enqueued_by_psql_from_a_shell_runs_in_a_real_worker(dsn: str) -> None:
    """Any language that can run SQL can enqueue: here plain psql in a shell script."""
    script = (
        'set -eu\n'
        'psql "$DSN" -v ON_ERROR_STOP=1 -Atc "SELECT pgqueue.enqueue(\'add\', \'[20, 22]\')"\n'
        'psql "$DSN" -v ON_ERROR_STOP=1 -Atc "SELECT pgqueue.enqueue(\'add\', \'[1]\', '
        '\'{\\"b\\": 2}\', idempotency_key => \'once\')"\n'
        'psql "$DSN" -v ON_ERROR_STOP=1 -Atc "SELECT pgqueue.enqueue(\'add\', \'[5]\', '
        '\'{\\"b\\": 5}\', idempotency_key => \'once\')"\n'
    )
    env = clean_environment() | {"DSN": dsn, "PATH": f"{Path(find_psql()).parent}:"
                                                     f"{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    first, keyed, again = (int(line) for line in done.stdout.split())
    assert keyed == again != first  # the key deduped the third call
    ok("worker", "-A", APP, "--dsn", dsn, "--burst")
    assert json_of("jobs", "show", str(first), "--dsn", dsn)["result"] == 42
    assert json_of("jobs", "show", str(keyed), "--dsn", dsn)["result"] == 3


class RunningPerQueue(threading.Thread):
    """Reads the running rows per queue every 50 ms until stopped; keeps the maxima."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.highest: dict[str, int] = {}
        self.samples = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.wait(0.05):
                rows = conn.execute("SELECT queue, count(*) FROM pgqueue.jobs "
                                    "WHERE status = 'running' GROUP BY queue").fetchall()
                self.samples += 1
                for queue, running in rows:
                    self.highest[queue] = max(self.highest.get(queue, 0), int(running))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def test_per_queue_slots_are_never_exceeded(chaos_dsn: str, processes: Processes) -> None:
    # --concurrency defaults to the sum of the slots (10); prefetch on (the default).
    worker = processes.start_worker(chaos_dsn, concurrency=10,
                                    extra=["--queues", "email:2,default:8"])
    assert "queues email:2,default:8" in worker.wait_for_log(r"started: .*").group(0)
    sampler = RunningPerQueue(chaos_dsn)
    sampler.start()
    try:
        with chaos_app(chaos_dsn) as app:
            app.hold.using(queue="email").enqueue_many([(0.2,)] * 16)
            app.hold.enqueue_many([(0.2,)] * 48)  # queue default
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                             "status = 'succeeded'") == 64,
                   timeout=60, message=f"64 jobs\n{worker.log()}")
    finally:
        sampler.stop()
    # The sampler saw both queues at their slots (the bound is not met vacuously).
    assert sampler.highest == {"email": 2, "default": 8}, sampler.highest


def test_queues_are_claimed_in_the_order_given(chaos_dsn: str, processes: Processes) -> None:
    # Enqueued before the worker starts, with priorities that would reverse the order
    # if priority ruled across queues: each queue is emptied before the next is touched.
    with chaos_app(chaos_dsn) as app:
        app.noop.using(queue="low", priority=100).enqueue_many([(n,) for n in range(10)])
        app.noop.using(queue="default", priority=50).enqueue_many([(n,) for n in range(10)])
        app.noop.using(queue="high", priority=-10).enqueue_many([(n,) for n in range(10)])
        app.noop.using(queue="high", priority=0).enqueue_many([(n,) for n in range(5)])
        app.noop.using(queue="other").enqueue(0)  # not listed: never claimed
    ok("worker", "-A", "chaos_tasks:q", "--dsn", chaos_dsn, "--burst", "--concurrency", "1",
       "--prefetch", "0", "--queues", "high,default,low", env=clean_environment(APPS))
    started = [row[0] for row in query(
        chaos_dsn, "SELECT queue, priority FROM pgqueue.jobs WHERE started_at IS NOT NULL "
                   "ORDER BY started_at, id")]
    assert started == ["high"] * 15 + ["default"] * 10 + ["low"] * 10
    # Within a queue, priority first: high's priority-0 jobs before its priority -10 ones.
    priorities = [row[1] for row in query(
        chaos_dsn, "SELECT queue, priority FROM pgqueue.jobs WHERE queue = 'high' "
                   "ORDER BY started_at, id")]
    assert priorities == [0] * 5 + [-10] * 10
    assert scalar(chaos_dsn, "SELECT status FROM pgqueue.jobs WHERE queue = 'other'") == "queued"


def _saturate(dsn: str, stop: threading.Event) -> None:
    """Priority-10 jobs into 'aged' and 'plain', faster than one slot runs them."""
    with chaos_app(dsn) as app:
        tasks = [app.hold.using(queue="aged", priority=10),
                 app.hold.using(queue="plain", priority=10)]
        n = 0
        while not stop.wait(0.03):
            tasks[n % 2].enqueue(0.05)
            n += 1


def test_priority_aging_lets_a_low_priority_job_through_a_saturating_stream(
    chaos_dsn: str, processes: Processes
) -> None:
    # A priority -10 job under a stream of priority 10 ones: 21 steps of 0.1 s put it
    # ahead of every job that arrived after it.
    ok("queues", "set", "aged", "--priority-aging", "0.1s", "--dsn", chaos_dsn)
    worker = processes.start_worker(chaos_dsn, concurrency=1, extra=["--prefetch", "0"])
    with _in_background(_saturate, chaos_dsn):
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE "
                                             "status = 'queued'") >= 20,
                   timeout=30, message="a backlog to build up")
        with chaos_app(chaos_dsn) as app:
            aged = app.hold.using(queue="aged", priority=-10).enqueue(0.01)
            plain = app.hold.using(queue="plain", priority=-10).enqueue(0.01)
        # Then it waits only for the jobs in front of it: those that came before it, or
        # within its first 21 steps.
        wait_until(lambda: scalar(chaos_dsn, "SELECT started_at FROM pgqueue.jobs WHERE "
                                             "id = %s", (aged.id,)) is not None,
                   timeout=45, message=f"the aged low-priority job to start\n{worker.log()}")
        waited = scalar(chaos_dsn, "SELECT started_at - created_at FROM pgqueue.jobs "
                                   "WHERE id = %s", (aged.id,))
        print(f"the priority -10 job started after {waited}")
        backlog = scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = "
                                    "'queued' AND queue = 'plain'")
        # The same job in a queue without aging still waits behind the stream.
        assert scalar(chaos_dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                      (plain.id,)) == "queued"
        assert backlog > 5  # the stream was still saturating the worker
    assert worker.alive(), worker.log()
