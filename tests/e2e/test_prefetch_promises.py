"""A busy worker's prefetch changes nothing a user can observe, seen from outside: real
``pgq worker`` processes, the real ``pgq`` commands, and SQL.

A worker holds jobs claimed ahead of its slots (``claimed`` in SQL); each promise below
was broken while those jobs read ``running``: a later job of higher priority started
after them, cancelling one only asked it to stop, a rescued job read ``running`` under a
busy worker that could not run it, and ``pgq stats`` counted them as running.
"""

from __future__ import annotations

import json
import signal

from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, query, scalar
from tests.e2e._pgq import ok


def _held(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'claimed'"))


def _started(dsn: str) -> list[int]:
    return [row[0] for row in query(dsn, "SELECT job_id FROM chaos_runs ORDER BY seq")]


def test_a_later_job_of_higher_priority_starts_before_the_held_ones(
    chaos_dsn: str, processes: Processes,
) -> None:
    processes.start_worker(chaos_dsn, concurrency=1, extra=["--prefetch", "3"])
    with chaos_app(chaos_dsn) as app:
        long = app.hold.enqueue(4)
        wait_until(lambda: _started(chaos_dsn) == [long.id], timeout=20,
                   message="the long job started")
        low = [app.hold.enqueue(0) for _ in range(3)]
        wait_until(lambda: _held(chaos_dsn) == 3, timeout=20, message="three jobs held")
        high = app.hold.using(priority=100).enqueue(0)
    wait_until(lambda: len(_started(chaos_dsn)) == 5, timeout=20, message="every job")
    assert _started(chaos_dsn) == [long.id, high.id, *[job.id for job in low]]


def test_cancelling_a_held_job_ends_it_at_once_and_it_never_starts(
    chaos_dsn: str, processes: Processes,
) -> None:
    processes.start_worker(chaos_dsn, concurrency=1, extra=["--prefetch", "2"])
    with chaos_app(chaos_dsn) as app:
        busy = app.hold.enqueue(120)
        wait_until(lambda: _started(chaos_dsn) == [busy.id], timeout=20)
        waiting = app.hold.enqueue(0)
        wait_until(lambda: _held(chaos_dsn) == 1, timeout=20, message="the job held")
        shown = json.loads(ok("jobs", "cancel", str(waiting.id), "--dsn", chaos_dsn,
                              "--json").stdout)
        assert shown["status"] == "cancelled"
        # Free the slot (the running job is cancelled at the worker's next heartbeat),
        # then show that the worker goes on with a later job, not the cancelled one.
        ok("jobs", "cancel", str(busy.id), "--dsn", chaos_dsn)
        later = app.hold.enqueue(0)
    wait_until(lambda: later.id in _started(chaos_dsn), timeout=30,
               message="the job enqueued after the cancellations")
    assert _started(chaos_dsn) == [busy.id, later.id]
    row = query(chaos_dsn, "SELECT status, attempts, worker_id FROM pgqueue.jobs "
                           "WHERE id = %s", (waiting.id,))
    assert row == [("cancelled", 0, None)]


def test_a_rescued_job_reads_queued_until_a_worker_starts_it(
    chaos_dsn: str, processes: Processes,
) -> None:
    """A job whose worker was killed is rescued while another worker is busy: that worker
    may claim it ahead of its slots, but until it starts it the job is queued."""
    doomed = processes.start_worker(chaos_dsn, name="doomed", concurrency=1, lease=1,
                                    extra=["--queues", "victims"])
    with chaos_app(chaos_dsn) as app:
        victim = app.hold_first_attempt.using(queue="victims").enqueue(60)
        wait_until(lambda: _started(chaos_dsn) == [victim.id], timeout=20)
        processes.start_worker(chaos_dsn, name="busy", concurrency=1, lease=5,
                               extra=["--prefetch", "2"])
        blocker = app.hold.enqueue(120)
        wait_until(lambda: blocker.id in _started(chaos_dsn), timeout=20)
    doomed.signal(signal.SIGKILL)
    # The rescue (lease 1 s) puts the victim back; the busy worker holds it, but cannot
    # start it while its blocker runs.
    wait_until(lambda: _held(chaos_dsn) == 1, timeout=20, message="the rescued job held")
    shown = json.loads(ok("jobs", "show", str(victim.id), "--dsn", chaos_dsn,
                          "--json").stdout)
    assert (shown["status"], shown["attempts"]) == ("queued", 1)
    assert "lease expired" in shown["last_error"]
    stats = {entry["queue"]: entry for entry in json.loads(
        ok("stats", "--dsn", chaos_dsn, "--json").stdout)}
    assert (stats["default"]["running"], stats["victims"]["running"]) == (1, 0)
    assert stats["victims"]["queued"] == 1
    ok("jobs", "cancel", str(blocker.id), "--dsn", chaos_dsn)
    wait_until(lambda: _started(chaos_dsn).count(victim.id) == 2, timeout=30,
               message="the rescued job run again")
    assert scalar(chaos_dsn, "SELECT attempts FROM pgqueue.jobs WHERE id = %s",
                  (victim.id,)) == 2
