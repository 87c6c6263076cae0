"""PostgreSQL restarted under two busy workers: they reconnect and every job completes.

The test owns its PostgreSQL server (never the shared one). Two ``pgq worker`` processes
work through 1,500 jobs over TCP; a third of the way in the server is stopped — ``fast``
(a clean shutdown that cuts every connection) or ``immediate`` (a crash: no shutdown
checkpoint, crash recovery on start) — kept down until the workers' reconnect backoff
has grown to its cap, and started again. The same two processes — no restart, no crash
loop — carry on and finish every job. See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import pytest

from tests._polling import wait_until
from tests.e2e._chaos import PrivateServer, Processes, WorkerProcess, chaos_app, query, scalar

# Its servers are its own: see tests/conftest.py.
pytestmark = pytest.mark.own_server

JOBS = 1500
LEASE = 20.0  # longer than the outage: no lease expires, so nothing needs rescuing
CONCURRENCY = 8
RECONNECT_CAP = 5.0  # Backoff cap of the producer, heartbeat, completer and listener
MAINTENANCE_CAP = 10.0

# "…; reconnecting in 1.23 s." / "…; retrying in 0.40 s."
DELAY = re.compile(r"WARNING pgqueue\.worker: (?P<what>Claiming jobs failed|Heartbeat failed|"
                   r"Could not record \d+ job outcome\(s\)|Listen connection lost|"
                   r"Maintenance failed) .*?(?:reconnecting|retrying) in (?P<delay>[\d.]+) s")


def _delays(worker: WorkerProcess) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for match in DELAY.finditer(worker.log()):
        what = match["what"]
        what = "Could not record outcomes" if what.startswith("Could not record") else what
        found.setdefault(what, []).append(float(match["delay"]))
    return found


_RECONNECTING = ("Claiming jobs failed", "Could not record outcomes", "Heartbeat failed")


def _backed_off(worker: WorkerProcess) -> list[float]:
    """The delays of whichever of the producer, completer and heartbeat backed off
    furthest (see the outage below for why it is not always the producer)."""
    delays = _delays(worker)
    return max((delays.get(what, []) for what in _RECONNECTING),
               key=lambda values: max(values, default=0.0))


def _longest_delay(worker: WorkerProcess) -> float:
    return max(_backed_off(worker), default=0.0)


def _count(dsn: str, status: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = %s", (status,)))


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgresql_restart_mid_run_workers_reconnect_and_finish_every_job(
    private_server: Callable[..., PrivateServer], processes: Processes, mode: str
) -> None:
    server = private_server(listen="127.0.0.1")
    dsn = server.create_migrated_database()  # Unix socket: the test's own connection
    worker_dsn = server.dsn("chaos", host="127.0.0.1")  # TCP, like a real deployment
    workers = [
        processes.start_worker(worker_dsn, record_dsn=dsn, name=f"worker{n}",
                               concurrency=CONCURRENCY, lease=LEASE)
        for n in (1, 2)
    ]
    ids_before = {w.pid: w.worker_id(dsn) for w in workers}
    with chaos_app(dsn) as app:
        jobs = [job.id for job in app.chaos_job.enqueue_many([(n,) for n in range(JOBS)])]

    wait_until(lambda: _count(dsn, "succeeded") >= JOBS // 3, timeout=30,
               message="a third of the jobs done")
    assert _count(dsn, "running") > 0
    server.stop(mode)
    stopped = time.monotonic()

    # Keep the server down until every worker has backed off to near its cap (a delay
    # of at least half the cap: the jitter draws from [cap/2, cap]). Which service backs
    # off depends on what it was doing: a producer whose places are all held by
    # outcomes the completer cannot write waits for a place and does not claim, while
    # the completer and the heartbeat retry.
    wait_until(lambda: all(_longest_delay(w) >= RECONNECT_CAP / 2 for w in workers),
               timeout=30, interval=0.2, message=f"backoff growing to its cap\n{processes.logs()}")
    outage = time.monotonic() - stopped
    assert all(w.alive() for w in workers), processes.logs()
    server.start()
    restarted = time.monotonic()
    restarted_db = scalar(dsn, "SELECT clock_timestamp()")

    # Back to work: new executions after the restart, then every job done.
    wait_until(lambda: scalar(dsn, "SELECT count(DISTINCT worker_pid) FROM chaos_runs "
                                   "WHERE started_at > %s", (restarted_db,)) == len(workers),
               timeout=RECONNECT_CAP + 15, message=f"both workers back at work\n{processes.logs()}")
    back_after = time.monotonic() - restarted
    wait_until(lambda: _count(dsn, "succeeded") == JOBS, timeout=60,
               message=f"all {JOBS} jobs succeeded\n{processes.logs()}")

    # Every committed job completed, its effect committed exactly once.
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_jobs") == 0
    ran = {row[0] for row in query(dsn, "SELECT DISTINCT job_id FROM chaos_runs")}
    assert ran == set(jobs)
    assert query(dsn, "SELECT count(*), count(DISTINCT job_id) FROM chaos_effects") == [
        (JOBS, JOBS)]
    # A job ran more than once only if it was in flight when the server went away.
    reruns = query(dsn, "SELECT job_id, min(started_at) FROM chaos_runs GROUP BY job_id "
                        "HAVING count(*) > 1")
    assert all(first_run < restarted_db for _, first_run in reruns), reruns

    # The same processes throughout: no exit, no restart, one registration each.
    for worker in workers:
        log = worker.log()
        assert worker.alive(), log
        assert log.count(" started: concurrency") == 1, log
        assert "Traceback" not in log, log
        assert "Heartbeats work again" in log, log
        delays = _delays(worker)
        # It logged the failures, and backed off exponentially up to a cap, with jitter.
        assert delays.get("Heartbeat failed"), log
        for what, values in delays.items():
            cap = MAINTENANCE_CAP if what == "Maintenance failed" else RECONNECT_CAP
            assert max(values) <= cap, (what, values)
        grown = _backed_off(worker)
        assert grown[-1] > grown[0] * 4, grown
    assert len({tuple(_backed_off(w)[:4]) for w in workers}) == 2
    assert {w.pid: w.worker_id(dsn) for w in workers} == ids_before

    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(20) == 0, worker.log()
    print(f"\n{mode} stop, outage {outage:.1f}s; both workers claiming again "
          f"{back_after:.1f}s after the server was back; jobs run twice: {len(reruns)}; "
          "backoff: "
          + "; ".join(", ".join(f"{d:.2f}" for d in _backed_off(w))
                      for w in workers))
