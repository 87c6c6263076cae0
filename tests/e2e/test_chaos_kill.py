"""SIGKILL during a busy run: no committed job is lost; duplicates only where a worker died.

Three real ``pgq worker`` processes work through 3,000 jobs; one of them is killed with
SIGKILL twice (and replaced each time). Every task records each execution in
``chaos_runs`` (committed before it does anything else) and writes its one effect in
``chaos_effects`` inside ``ctx.transaction()``. See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from tests._polling import wait_until
from tests.e2e._chaos import Processes, WorkerProcess, chaos_app, query, scalar

JOBS = 3000
LEASE = 3.0
CONCURRENCY = 8


def _count(dsn: str, status: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = %s", (status,)))


def _kill(dsn: str, worker: WorkerProcess) -> tuple[set[int], float]:
    """SIGKILL ``worker``; return the jobs it held at that moment and when it died."""
    worker_id = worker.worker_id(dsn)
    wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running' "
                                   "AND worker_id = %s", (worker_id,)) >= CONCURRENCY // 2,
               timeout=30, message=f"{worker.name} running several jobs ("
               f"{_count(dsn, 'succeeded')} succeeded, {_count(dsn, 'queued')} queued, "
               f"{_count(dsn, 'running')} running)\n{worker.log()}")
    worker.signal(signal.SIGKILL)
    assert worker.wait(10) == -signal.SIGKILL
    killed_at = time.monotonic()
    # The process is gone, so this is exactly what it held: nothing can change it now
    # except the rescuer.
    held = {row[0] for row in query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE status = 'running' AND worker_id = %s",
        (worker_id,))}
    assert held, "the killed worker held no job: the test would prove nothing"
    wait_until(lambda: not query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE status = 'running' AND worker_id = %s",
        (worker_id,)), timeout=LEASE + 10,
        message="the rescuer recovering the killed worker's jobs")
    return held, time.monotonic() - killed_at


def test_sigkill_twice_loses_no_job_and_duplicates_only_killed_ones(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    started = time.monotonic()
    start: dict[str, Any] = {"record_dsn": dsn, "concurrency": CONCURRENCY, "lease": LEASE}
    victim = processes.start_worker(dsn, name="victim", **start)
    survivors = [processes.start_worker(dsn, name=f"survivor{n}", **start) for n in (1, 2)]
    with chaos_app(dsn) as app:
        jobs = app.chaos_job.enqueue_many([(n,) for n in range(JOBS)])
    number_of = {job.id: n for n, job in enumerate(jobs)}

    killed_pids: set[int] = set()
    in_killed_worker: set[int] = set()
    rescue_seconds: list[float] = []
    for threshold in (JOBS // 3, 2 * JOBS // 3):
        wait_until(lambda threshold=threshold: _count(dsn, "succeeded") >= threshold,
                   timeout=40, message=f"{threshold} jobs succeeded")
        held, seconds = _kill(dsn, victim)
        killed_pids.add(victim.pid)
        in_killed_worker |= held
        rescue_seconds.append(seconds)
        victim = processes.start_worker(dsn, name="victim", **start)

    wait_until(lambda: _count(dsn, "succeeded") == JOBS, timeout=60,
               message=f"all {JOBS} jobs succeeded\n{processes.logs()}")
    elapsed = time.monotonic() - started

    # Every job succeeded, with its own return value; none is dead or elsewhere.
    rows = query(dsn, "SELECT id, status, result, attempts FROM pgqueue.jobs")
    assert len(rows) == JOBS
    assert {row[1] for row in rows} == {"succeeded"}
    results = {row[0]: row[2] for row in rows}
    # ctx.transaction() marks the job succeeded when it commits; the return value is
    # written just after. A worker killed in between leaves a succeeded job without a
    # result — only ever a job the killed worker held.
    no_result = {job_id for job_id, result in results.items() if result is None}
    assert {job_id: results[job_id] for job_id in set(results) - no_result} == {
        job_id: n for job_id, n in number_of.items() if job_id not in no_result}
    assert no_result <= in_killed_worker, no_result - in_killed_worker
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_jobs") == 0

    # None lost: every job ran at least once.
    runs: dict[int, list[tuple[int, int]]] = {}
    for job_id, pid, attempt in query(
        dsn, "SELECT job_id, worker_pid, attempt FROM chaos_runs ORDER BY seq"
    ):
        runs.setdefault(job_id, []).append((pid, attempt))
    assert set(runs) == set(number_of)

    # Duplicates only for jobs that were running in the killed worker, and every run but
    # the last happened in a killed process.
    duplicated = {job_id for job_id, executions in runs.items() if len(executions) > 1}
    assert duplicated <= in_killed_worker, duplicated - in_killed_worker
    for job_id in duplicated:
        assert {pid for pid, _ in runs[job_id][:-1]} <= killed_pids, runs[job_id]
    # A job the killed worker did not hold was claimed exactly once.
    attempts = {row[0]: row[3] for row in rows}
    assert all(attempts[job_id] == 1 for job_id in set(number_of) - in_killed_worker)
    assert all(attempts[job_id] >= 2 for job_id in in_killed_worker)

    # Exactly-once effects through ctx.transaction(): one effect row per job, written
    # by the attempt that succeeded, however many times the job ran.
    effects = query(dsn, "SELECT job_id, attempt FROM chaos_effects")
    assert len(effects) == JOBS
    assert dict(effects) == attempts

    # The surviving workers never noticed anything worth a traceback, and stop cleanly.
    for worker in [*survivors, victim]:
        assert worker.alive(), worker.log()
        assert "Traceback" not in worker.log(), worker.log()
        worker.signal(signal.SIGTERM)
    for worker in [*survivors, victim]:
        assert worker.wait(20) == 0, worker.log()

    print(f"\n{JOBS} jobs in {elapsed:.1f}s; held by the killed worker: "
          f"{len(in_killed_worker)}; executed twice: {len(duplicated)}; succeeded without "
          f"a result: {len(no_result)}; rescue after "
          f"SIGKILL (lease {LEASE:g}s): {', '.join(f'{s:.1f}s' for s in rescue_seconds)}")
    assert all(seconds <= LEASE + 5 for seconds in rescue_seconds), rescue_seconds
