"""Fencing: a worker frozen past its lease cannot overwrite the job's real outcome.

Worker A starts a job and is frozen with SIGSTOP. Its lease runs out, worker B's
rescuer re-queues the job and B runs it to completion. When A is resumed, its task
finishes and A tries to record success for attempt 1: the completion statement is
fenced on (id, attempt, worker, status), changes nothing, and A logs the refusal.
See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import json
import re
import signal
import time

from tests._polling import wait_until
from tests.e2e._chaos import REFUSED, Processes, chaos_app, query, scalar

LEASE = 3.0


def test_sigstop_past_the_lease_late_completion_is_refused_and_logged(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    a = processes.start_worker(dsn, name="frozen", lease=LEASE, concurrency=2)
    with chaos_app(dsn) as app:
        job_id = app.hold.enqueue(2.0).id

    wait_until(lambda: query(dsn, "SELECT 1 FROM chaos_runs WHERE job_id = %s AND worker_pid = %s",
                             (job_id, a.pid)), timeout=20, message="A starting the job")
    a.signal(signal.SIGSTOP)
    frozen_at = time.monotonic()
    frozen_at_db = scalar(dsn, "SELECT clock_timestamp()")
    b = processes.start_worker(dsn, name="rescuer", lease=LEASE, concurrency=2)
    b_id = b.worker_id(dsn)

    # B rescues the job once A's lease has expired, runs it (attempt 2) and records it.
    wait_until(lambda: scalar(dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                              (job_id,)) == "succeeded", timeout=LEASE + 15,
               message=f"B finishing the job\n{processes.logs()}")
    took_over_after = scalar(
        dsn, "SELECT extract(epoch FROM min(started_at) - %s) FROM chaos_runs "
             "WHERE worker_pid = %s", (frozen_at_db, b.pid))
    # Within lease + rescue interval (+ the time B took to start up).
    assert float(took_over_after) <= LEASE + 5, took_over_after
    settled = query(dsn, "SELECT result, attempts, worker_id, last_error FROM pgqueue.jobs "
                         "WHERE id = %s", (job_id,))[0]
    assert settled[0] == {"pid": b.pid, "attempt": 2}
    assert settled[1] == 2
    assert settled[2] == b_id
    assert settled[3].startswith("lease expired"), settled[3]

    # Resume A: its task's timer is long overdue, so it completes at once and A's
    # completer tries to record success for attempt 1.
    a.signal(signal.SIGCONT)
    resumed_at = time.monotonic()
    refusal = a.wait_for_log(
        rf"Job {job_id} \(chaos\.hold\): the succeeded outcome of attempt 1 {re.escape(REFUSED)}",
        timeout=15,
    )
    assert refusal

    # B's result stands: nothing about the job changed.
    after = query(dsn, "SELECT status, result, attempts, worker_id, last_error "
                       "FROM pgqueue.jobs WHERE id = %s", (job_id,))[0]
    assert after == ("succeeded", *settled), after
    runs = query(dsn, "SELECT worker_pid, attempt FROM chaos_runs WHERE job_id = %s ORDER BY seq",
                 (job_id,))
    assert runs == [(a.pid, 1), (b.pid, 2)]

    # A is not broken by having been frozen: it keeps running and stops cleanly.
    assert a.alive(), a.log()
    assert "Traceback" not in a.log() + b.log(), processes.logs()
    for worker in (a, b):
        worker.signal(signal.SIGTERM)
    for worker in (a, b):
        assert worker.wait(20) == 0, worker.log()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0
    print(f"\nB took the job over {float(took_over_after):.1f}s after A froze; A frozen "
          f"{resumed_at - frozen_at:.1f}s; refused in A's log: "
          f"{json.dumps(refusal.group(0))}")


def test_a_transaction_longer_than_the_lease_costs_the_worker_none_of_its_jobs(
    chaos_dsn: str, processes: Processes
) -> None:
    """Fencing must not misfire: a live worker keeps every lease while one of its tasks
    holds ctx.transaction() — and so its job's row lock — open for twice the lease."""
    dsn = chaos_dsn
    worker = processes.start_worker(dsn, lease=LEASE, concurrency=4)
    with chaos_app(dsn) as app:
        # The long transaction's row comes first, so a heartbeat that waited for its
        # lock would hold up the leases of all the others.
        jobs = [app.long_transaction.enqueue(2 * LEASE).id,
                *(app.hold.enqueue(2 * LEASE).id for _ in range(3))]
    wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = "
                                   "'succeeded'") == len(jobs), timeout=4 * LEASE + 10,
               message=f"the jobs finishing\n{worker.log()}")
    worker.signal(signal.SIGTERM)
    assert worker.wait(20) == 0, worker.log()

    # Each ran once, in this worker, at attempt 1: nothing was rescued or refused.
    assert query(dsn, "SELECT job_id, worker_pid, attempt FROM chaos_runs ORDER BY job_id") == [
        (job_id, worker.pid, 1) for job_id in jobs]
    assert query(dsn, "SELECT id, attempts, result FROM pgqueue.jobs ORDER BY id") == [
        (job_id, 1, {"pid": worker.pid, "attempt": 1}) for job_id in jobs]
    assert scalar(dsn, "SELECT count(*) FROM chaos_effects") == 1
    log = worker.log()
    assert "lease lost" not in log and "Rescued" not in log, log
