"""A worker on its own host is cut off from the database in the middle of a job.

The test builds two hosts out of network namespaces — a database host running a
PostgreSQL owned by the test, and a worker host — joined by a veth pair. Worker A runs
on the worker host and reaches PostgreSQL over that link; worker B runs beside the test
and uses the server's Unix socket. The link is cut while A runs a job (packets vanish
silently, as in a real partition); B's rescuer recovers the job once A's lease has run
out and B runs it; A notices it cannot heartbeat and stops claiming; when the link comes
back, A's stale completion is refused and A carries on with new work.
See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import pytest

from tests._polling import wait_until
from tests.e2e._chaos import (
    REFUSED,
    NetworkLab,
    PrivateServer,
    Processes,
    chaos_app,
    query,
    scalar,
)

# Its servers are its own: see tests/conftest.py.
pytestmark = pytest.mark.own_server
LEASE = 6.0


def test_partitioned_worker_loses_its_job_to_another_and_its_late_completion_is_refused(
    network_lab: NetworkLab, private_server: Callable[..., PrivateServer], processes: Processes
) -> None:
    lab = network_lab
    server = private_server(listen=lab.db_address, netns=lab.db_ns,
                            trusted_networks=[lab.network])
    dsn = server.create_migrated_database()  # Unix socket: the test and worker B
    remote_dsn = server.dsn("chaos", host=lab.db_address)  # worker A, over the link
    a = processes.start_worker(remote_dsn, record_dsn=dsn, name="remote", netns=lab.worker_ns,
                               lease=LEASE, concurrency=2)
    a_id = a.worker_id(dsn)
    assert query(dsn, "SELECT host(client_addr) FROM pg_stat_activity "
                      "WHERE application_name LIKE %s LIMIT 1",
                 (f"pgqueue worker {a_id}%",)) == [(lab.worker_address,)]
    with chaos_app(dsn) as app:
        job_id = app.hold.enqueue(3.0).id
        wait_until(lambda: query(dsn, "SELECT 1 FROM chaos_runs WHERE job_id = %s "
                                      "AND worker_pid = %s", (job_id, a.pid)),
                   timeout=20, message="A starting the job")

        lab.cut()
        cut_at = time.monotonic()
        cut_db = scalar(dsn, "SELECT clock_timestamp()")
        b = processes.start_worker(dsn, name="local", lease=LEASE, concurrency=2)
        b_id = b.worker_id(dsn)

        # B recovers the job after A's lease and finishes it (attempt 2).
        wait_until(lambda: scalar(dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                                  (job_id,)) == "succeeded", timeout=LEASE + 20,
                   message=f"B finishing the job\n{processes.logs()}")
        taken_over = float(scalar(
            dsn, "SELECT extract(epoch FROM min(started_at) - %s) FROM chaos_runs "
                 "WHERE job_id = %s AND worker_pid = %s", (cut_db, job_id, b.pid)))
        assert taken_over <= LEASE + 5, taken_over
        settled = query(dsn, "SELECT status, result, attempts, worker_id FROM pgqueue.jobs "
                             "WHERE id = %s", (job_id,))[0]
        assert settled == ("succeeded", {"pid": b.pid, "attempt": 2}, 2, b_id)

        # A, cut off, knows it: its heartbeat fails and it stops claiming. Its finished
        # job's outcome waits in its completer, which cannot reach the database either.
        a.wait_for_log(r"Heartbeat failed \(.*\); retrying in [\d.]+ s\. Not claiming new "
                       r"jobs until it works\.", timeout=30)
        a.wait_for_log(r"Could not record 1 job outcome\(s\)", timeout=30)
        assert a.alive(), a.log()

        lab.restore()
        restored_at = time.monotonic()
        restore_db = scalar(dsn, "SELECT clock_timestamp()")
        a.wait_for_log(
            rf"Job {job_id} \(chaos\.hold\): the succeeded outcome of attempt 1 "
            rf"{re.escape(REFUSED)}", timeout=30)
        refused_after = time.monotonic() - restored_at
        a.wait_for_log("Heartbeats work again", timeout=30)

        # B's result stands.
        assert query(dsn, "SELECT status, result, attempts, worker_id FROM pgqueue.jobs "
                          "WHERE id = %s", (job_id,))[0] == settled
        assert query(dsn, "SELECT worker_pid, attempt FROM chaos_runs WHERE job_id = %s "
                          "ORDER BY seq", (job_id,)) == [(a.pid, 1), (b.pid, 2)]
        # A started nothing while it was cut off.
        assert scalar(dsn, "SELECT count(*) FROM chaos_runs WHERE worker_pid = %s AND "
                           "started_at BETWEEN %s AND %s", (a.pid, cut_db, restore_db)) == 0

        # A carries on: the same process, registered under the same id, takes new work.
        more = [job.id for job in app.hold.enqueue_many([(0.3,)] * 20)]
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id = ANY(%s) "
                                       "AND status = 'succeeded'", (more,)) == len(more),
                   timeout=30, message=f"the new jobs done\n{processes.logs()}")
    ran_new = {row[0] for row in query(
        dsn, "SELECT DISTINCT worker_pid FROM chaos_runs WHERE job_id = ANY(%s)", (more,))}
    assert a.pid in ran_new, processes.logs()
    assert a.worker_id(dsn) == a_id
    assert "Traceback" not in a.log() + b.log(), processes.logs()

    for worker in (a, b):
        worker.signal(signal.SIGTERM)
    for worker in (a, b):
        assert worker.wait(20) == 0, worker.log()
    print(f"\nB took the job over {taken_over:.1f}s after the cut (lease {LEASE:g}s); link "
          f"down {restored_at - cut_at:.1f}s; A's stale completion refused "
          f"{refused_after:.1f}s after the link came back")
