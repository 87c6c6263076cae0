"""SIGTERM drains and releases; a second SIGINT exits at once.

A ``pgq worker`` running a mix of short and long jobs (async and sync) gets SIGTERM:
the short ones finish within ``--shutdown-timeout``; the long ones go back to
``queued`` the moment the timeout runs out, with ``attempts`` back to its value before
the claim; the process exits 0 and removes its row from ``pgqueue.workers``. A second
SIGINT skips all that: the process exits at once and the lease recovers the job.
See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import signal
import time

import psycopg

from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, query, scalar

SHUTDOWN_TIMEOUT = 3.0


def _runs(dsn: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM chaos_runs"))


def test_sigterm_finishes_short_jobs_and_releases_the_rest_without_using_the_attempt(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    worker = processes.start_worker(dsn, concurrency=5, lease=10,
                                    shutdown_timeout=SHUTDOWN_TIMEOUT)
    worker_id = worker.worker_id(dsn)
    with chaos_app(dsn) as app:
        short = [app.hold.enqueue(1.5).id, app.hold.enqueue(1.5).id]
        long_async = app.hold.enqueue(60).id
        long_sync = app.hold_sync.enqueue(60).id
        # A job that already used an attempt: committed with attempts = 1, so this claim
        # is its attempt 2, and the release must put it back to 1.
        with psycopg.connect(dsn) as conn:
            retried = app.hold.using(conn=conn).enqueue(60).id
            conn.execute("UPDATE pgqueue.jobs SET attempts = 1 WHERE id = %s", (retried,))
        wait_until(lambda: _runs(dsn) == 5, timeout=20, message="all five jobs running")
        assert query(dsn, "SELECT attempt FROM chaos_runs WHERE job_id = %s",
                     (retried,)) == [(2,)]
        # With every slot taken this one stays queued, never claimed.
        waiting = app.hold.enqueue(1).id
        released = {long_async, long_sync, retried}
        before_claim = {long_async: 0, long_sync: 0, retried: 1}

        worker.signal(signal.SIGTERM)
        signalled = time.monotonic()

        # Running jobs get the shutdown timeout to finish...
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                                       "AND status = 'succeeded'", (short,)) == 2,
                   timeout=SHUTDOWN_TIMEOUT, message="the short jobs finishing during the drain")
        # ...and the others go back to the queue as soon as it has run out.
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                                       "AND status = 'queued'", (list(released),)) == 3,
                   timeout=SHUTDOWN_TIMEOUT + 5, message=f"the long jobs released\n{worker.log()}")
        released_after = time.monotonic() - signalled
        assert worker.wait(10) == 0, worker.log()
        exited_after = time.monotonic() - signalled

        rows = query(dsn, "SELECT id, status, attempts, worker_id, lease_expires_at, "
                          "run_at <= now() FROM pgqueue.jobs WHERE id = ANY(%s) ORDER BY id",
                     (list(released),))
        # Back to queued at once, the attempt given back (attempts as before the claim),
        # no holder, no lease.
        assert rows == [(job_id, "queued", before_claim[job_id], None, None, True)
                        for job_id in sorted(released)]
        for job_id in released:
            job = app.q.get_job(job_id)
            assert job is not None
            assert (job.status, job.attempts) == ("queued", before_claim[job_id])
        assert query(dsn, "SELECT status, attempts FROM pgqueue.jobs WHERE id = %s",
                     (waiting,)) == [("queued", 0)]
        assert query(dsn, "SELECT status, attempts FROM pgqueue.jobs WHERE id = ANY(%s)",
                     (short,)) == [("succeeded", 1), ("succeeded", 1)]

    # The worker's row is gone, and the log says what happened.
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers WHERE id = %s", (worker_id,)) == 0
    log = worker.log()
    assert "Shutting down" in log, log
    assert "releasing 3 unfinished job(s)" in log, log
    assert "Traceback" not in log, log
    assert SHUTDOWN_TIMEOUT - 0.5 <= released_after <= SHUTDOWN_TIMEOUT + 3, released_after
    print(f"\nreleased {released_after:.1f}s and exited {exited_after:.1f}s after SIGTERM "
          f"(--shutdown-timeout {SHUTDOWN_TIMEOUT:g})")


def test_second_sigint_exits_at_once_and_the_lease_recovers_the_job(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    lease = 3.0
    first = processes.start_worker(dsn, name="interrupted", concurrency=2, lease=lease,
                                   shutdown_timeout=30)
    first_id = first.worker_id(dsn)
    with chaos_app(dsn) as app:
        job_id = app.hold_first_attempt.enqueue(60).id
    wait_until(lambda: _runs(dsn) == 1, timeout=20, message="the job running")

    first.signal(signal.SIGINT)
    first.wait_for_log("Shutting down", timeout=5)
    first.signal(signal.SIGINT)
    interrupted = time.monotonic()
    assert first.wait(5) == 130, first.log()
    exited_after = time.monotonic() - interrupted
    assert exited_after < 2, exited_after  # not the 30 s shutdown timeout
    assert "Second interrupt: exiting now" in first.log(), first.log()

    # Nothing was released: the job is still held under the dead worker's lease...
    assert query(dsn, "SELECT status, worker_id, attempts FROM pgqueue.jobs WHERE id = %s",
                 (job_id,)) == [("running", first_id, 1)]
    # ...until it expires and another worker's rescuer hands the job on (attempt 2).
    second = processes.start_worker(dsn, name="rescuer", concurrency=2, lease=lease)
    wait_until(lambda: scalar(dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                              (job_id,)) == "succeeded", timeout=lease + 15,
               message=f"the job recovered\n{processes.logs()}")
    assert query(dsn, "SELECT result, attempts FROM pgqueue.jobs WHERE id = %s", (job_id,)) == [
        ({"pid": second.pid, "attempt": 2}, 2)]
    print(f"\nexited {exited_after:.2f}s after the second SIGINT")
