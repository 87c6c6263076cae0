"""``pgq worker --processes N``: real supervisors, real children, real signals.

The supervisor (pgqueue/worker/supervisor.py) starts N ``pgq worker`` children. These
tests kill a child with SIGKILL (restarted; its jobs back in the queue long before their
lease would expire; nothing lost, effects exactly once), stop the supervisor with SIGTERM
(every child drains its running jobs, exit 0, no ``workers`` row left), interrupt it
twice (exit 130 at once), and drain with ``--burst``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
import urllib.request

from tests._polling import wait_until
from tests.e2e._chaos import Processes, WorkerProcess, chaos_app, query, scalar

PROCESSES = ["--processes", "2"]
# Long enough that a job back in the queue within a few seconds of its worker's death
# was released by the supervisor, not recovered by the lease's expiry.
LEASE = 60.0


def _children(dsn: str) -> dict[int, str]:
    """pid → worker id of every registered worker."""
    return {pid: worker_id for pid, worker_id in query(dsn, "SELECT pid, id FROM pgqueue.workers")}


def _wait_for_children(dsn: str, supervisor: WorkerProcess, count: int = 2,
                       *, without: frozenset[int] = frozenset()) -> dict[int, str]:
    def registered() -> dict[int, str] | None:
        assert supervisor.alive(), supervisor.log()
        children = {pid: i for pid, i in _children(dsn).items() if pid not in without}
        return children if len(children) == count else None

    found = wait_until(registered, timeout=60, interval=0.1,
                       message=f"{count} worker processes registered\n{supervisor.log()}")
    assert found is not None
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _statuses(dsn: str) -> dict[str, int]:
    return dict(query(dsn, "SELECT status, count(*) FROM pgqueue.jobs GROUP BY status"))


def test_a_killed_child_is_restarted_and_its_jobs_come_back_at_once(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    supervisor = processes.start_worker(dsn, concurrency=4, lease=LEASE,
                                        extra=PROCESSES, wait_registered=False)
    children = _wait_for_children(dsn, supervisor)
    assert supervisor.pid not in children  # the supervisor runs no jobs itself
    jobs_total = 300
    with chaos_app(dsn) as app:
        jobs = app.chaos_job.enqueue_many([(n,) for n in range(jobs_total)])
    number_of = {job.id: n for n, job in enumerate(jobs)}

    # Kill the child that holds the most jobs, once it holds a few.
    def busy_child() -> tuple[int, str] | None:
        rows = query(dsn, "SELECT w.pid, w.id, count(j.id) FROM pgqueue.workers w "
                          "JOIN pgqueue.jobs j ON j.worker_id = w.id AND j.status = 'running' "
                          "GROUP BY w.pid, w.id ORDER BY 3 DESC LIMIT 1")
        return (rows[0][0], rows[0][1]) if rows and rows[0][2] >= 2 else None

    found = wait_until(busy_child, timeout=30, message=f"a busy child\n{supervisor.log()}")
    assert found is not None
    victim_pid, victim_id = found
    os.kill(victim_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: not _alive(victim_pid), timeout=10)
    held = {row[0] for row in query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE worker_id = %s AND status = 'running'",
        (victim_id,))}

    # Released by the supervisor within seconds, not after the 60 s lease; the dead
    # child's row is gone; a new child takes its place.
    wait_until(lambda: not query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE worker_id = %s AND status = 'running'",
        (victim_id,)), timeout=15, message=f"the killed child's jobs released\n{supervisor.log()}")
    assert time.monotonic() - killed_at < LEASE / 2
    replacement = _wait_for_children(dsn, supervisor, without=frozenset({victim_pid}))
    assert victim_pid not in replacement
    assert victim_id not in {worker_id for worker_id in _children(dsn).values()}
    supervisor.wait_for_log(rf"Worker process \d \(pid {victim_pid}\) was killed by SIGKILL "
                            r"after [\d.]+ s; \d+ job\(s\) it held went back to the queue at "
                            r"once .*; restarting it in [\d.]+ s\.")

    wait_until(lambda: _statuses(dsn).get("succeeded") == jobs_total, timeout=90,
               message=f"all jobs succeeded: {_statuses(dsn)}\n{supervisor.log()}")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.log()
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0

    # Nothing lost: every job succeeded with its own result and ran at least once.
    rows = query(dsn, "SELECT id, status, result, attempts, last_error FROM pgqueue.jobs")
    assert {row[1] for row in rows} == {"succeeded"} and len(rows) == jobs_total
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_jobs") == 0
    ran = {row[0] for row in query(dsn, "SELECT DISTINCT job_id FROM chaos_runs")}
    assert ran == set(number_of)
    # Rescued jobs name the dead worker; jobs that ran twice are only among them (plus a
    # claim the victim's connection committed as it died, which also names it).
    released = {row[0] for row in rows if row[4] and f"worker {victim_id} " in row[4]}
    assert released and held <= released, (released, held)
    twice = {row[0] for row in query(
        dsn, "SELECT job_id FROM chaos_runs GROUP BY job_id HAVING count(*) > 1")}
    assert twice <= released, twice - released
    assert all(row[3] == 1 for row in rows if row[0] not in released)
    # Effects exactly once per job (ctx.transaction()), and each result is the job's own
    # (a result may be missing only where the killed child committed the transaction
    # and died before storing the value).
    effects = query(dsn, "SELECT job_id, count(*) FROM chaos_effects GROUP BY job_id")
    assert {job_id for job_id, _ in effects} == set(number_of)
    assert all(count == 1 for _, count in effects)
    for job_id, _, result, *_ in rows:
        assert result == number_of[job_id] or (result is None and job_id in released)
    assert "Traceback" not in supervisor.log(), supervisor.log()


def test_sigterm_drains_every_child_and_exits_0(chaos_dsn: str, processes: Processes) -> None:
    dsn = chaos_dsn
    # No prefetch: each child holds only the jobs it runs (a prefetched job would be
    # released at the stop, not drained).
    supervisor = processes.start_worker(dsn, concurrency=2, shutdown_timeout=20,
                                        extra=[*PROCESSES, "--prefetch", "0"],
                                        wait_registered=False)
    children = _wait_for_children(dsn, supervisor)
    with chaos_app(dsn) as app:
        held = app.hold.enqueue_many([(2.0,)] * 4)
    # Both children run jobs (2 slots each, 4 jobs).
    wait_until(lambda: scalar(dsn, "SELECT count(DISTINCT worker_id) FROM pgqueue.jobs "
                                   "WHERE status = 'running'") == 2,
               timeout=30, message=f"both children running jobs\n{supervisor.log()}")
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.log()

    # The running jobs finished (drained, not released), every child exited, no row left.
    statuses = dict(query(dsn, "SELECT id, status FROM pgqueue.jobs"))
    assert {statuses[job.id] for job in held} == {"succeeded"}, statuses
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0
    assert not any(_alive(pid) for pid in children)
    log = supervisor.log()
    assert log.count("Shutting down: no new jobs") == 2, log
    assert "All 2 worker processes stopped." in log, log
    assert "Traceback" not in log, log


def test_a_second_sigint_exits_at_once(chaos_dsn: str, processes: Processes) -> None:
    dsn = chaos_dsn
    supervisor = processes.start_worker(dsn, concurrency=2, shutdown_timeout=60,
                                        extra=PROCESSES, wait_registered=False)
    children = _wait_for_children(dsn, supervisor)
    with chaos_app(dsn) as app:
        app.hold.enqueue_many([(60.0,)] * 2)
    wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs "
                                   "WHERE status = 'running'") == 2, timeout=30)
    supervisor.signal(signal.SIGINT)
    supervisor.wait_for_log("Stopping: 2 worker process")
    supervisor.signal(signal.SIGINT)
    assert supervisor.wait(10) == 130, supervisor.log()
    wait_until(lambda: not any(_alive(pid) for pid in children), timeout=10,
               message="the children killed")
    # Left to their leases, as after a single worker's second interrupt.
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running'") == 2


def test_burst_with_two_processes_drains_and_exits_0(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    with chaos_app(dsn) as app:
        app.noop.enqueue_many([(n,) for n in range(200)])
        app.noop_sync.enqueue_many([(n,) for n in range(200)])
    supervisor = processes.start_worker(dsn, concurrency=4, extra=[*PROCESSES, "--burst"],
                                        wait_registered=False)
    assert supervisor.wait(90) == 0, supervisor.log()
    assert _statuses(dsn) == {"succeeded": 400}
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.workers") == 0
    # Both children took part (each registered and stopped).
    assert supervisor.log().count("Worker process") == 0, supervisor.log()
    started = re.findall(r"Worker (\S+) started: concurrency 4", supervisor.log())
    assert len(set(started)) == 2, supervisor.log()


def _two_free_ports() -> int:
    """A port P such that P and P + 1 are free on loopback (for two children)."""
    for _ in range(50):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise AssertionError("no two consecutive free ports")


def test_each_child_serves_health_on_its_own_port(chaos_dsn: str, processes: Processes) -> None:
    dsn = chaos_dsn
    port = _two_free_ports()
    supervisor = processes.start_worker(dsn, extra=[*PROCESSES, "--metrics-port", str(port)],
                                        wait_registered=False)
    children = _wait_for_children(dsn, supervisor)

    def healthy(child_port: int) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{child_port}/healthz",
                                        timeout=5) as answer:
                return json.loads(answer.read()) if answer.status == 200 else None
        except OSError:
            return None

    ids = set()
    for child_port in (port, port + 1):
        body = wait_until(lambda: healthy(child_port), timeout=30,  # noqa: B023
                          message=f"/healthz on {child_port}\n{supervisor.log()}")
        assert body is not None
        ids.add(body["worker_id"])
    assert ids == set(children.values())
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(60) == 0, supervisor.log()
