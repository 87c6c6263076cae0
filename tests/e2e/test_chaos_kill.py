"""SIGKILL during a busy run: no committed job is lost; duplicates only where a worker died.

Three real ``pgq worker`` processes work through 3,000 jobs; one of them is killed with
SIGKILL twice (and replaced each time). Every task records each execution in
``chaos_runs`` (committed before it does anything else) and writes its one effect in
``chaos_effects`` inside ``ctx.transaction()``. See docs/explanation/delivery-guarantees.md.
"""

from __future__ import annotations

import functools
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


def _succeeded_at_least(dsn: str, count: int) -> bool:
    return _count(dsn, "succeeded") >= count


def _kill(dsn: str, worker: WorkerProcess) -> tuple[str, set[int], float]:
    """SIGKILL ``worker``; return its id, the jobs it held, and how long their rescue took."""
    worker_id = worker.worker_id(dsn)
    wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running' "
                                   "AND worker_id = %s", (worker_id,)) >= CONCURRENCY // 2,
               timeout=30, message=f"{worker.name} running several jobs ("
               f"{_count(dsn, 'succeeded')} succeeded, {_count(dsn, 'queued')} queued, "
               f"{_count(dsn, 'running')} running)\n{worker.log()}")
    worker.signal(signal.SIGKILL)
    assert worker.wait(10) == -signal.SIGKILL
    killed_at = time.monotonic()
    # The process is gone: these are the jobs it held (give or take a statement it sent
    # just before dying, which the server may still commit; see the rescuer's trace below).
    held = {row[0] for row in query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE status = 'running' AND worker_id = %s",
        (worker_id,))}
    assert held, "the killed worker held no job: the test would prove nothing"
    wait_until(lambda: not query(
        dsn, "SELECT id FROM pgqueue.jobs WHERE status = 'running' AND worker_id = %s",
        (worker_id,)), timeout=LEASE + 10,
        message="the rescuer recovering the killed worker's jobs")
    return worker_id, held, time.monotonic() - killed_at


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
    killed_ids: set[str] = set()
    in_killed_worker: set[int] = set()
    rescue_seconds: list[float] = []
    for threshold in (JOBS // 3, 2 * JOBS // 3):
        wait_until(functools.partial(_succeeded_at_least, dsn, threshold),
                   timeout=40, message=f"{threshold} jobs succeeded")
        worker_id, held, seconds = _kill(dsn, victim)
        killed_pids.add(victim.pid)
        killed_ids.add(worker_id)
        in_killed_worker |= held
        rescue_seconds.append(seconds)
        victim = processes.start_worker(dsn, name="victim", **start)

    wait_until(lambda: _count(dsn, "succeeded") == JOBS, timeout=60,
               message=f"all {JOBS} jobs succeeded\n{processes.logs()}")
    elapsed = time.monotonic() - started

    # The workers still running never hit anything worth a traceback, and stop cleanly;
    # stopping also flushes the outcomes they had not written yet (a ctx.transaction()
    # job is succeeded before its return value is stored).
    for worker in [*survivors, victim]:
        assert worker.alive(), worker.log()
        worker.signal(signal.SIGTERM)
    for worker in [*survivors, victim]:
        assert worker.wait(20) == 0, worker.log()
        assert "Traceback" not in worker.log(), worker.log()
        # Nobody took a job from a live worker: no lease was lost, no outcome refused.
        assert "lease lost" not in worker.log(), worker.log()

    # Every job succeeded, with its own return value; none is dead or elsewhere.
    rows = query(dsn, "SELECT id, status, result, attempts, last_error FROM pgqueue.jobs")
    assert len(rows) == JOBS
    assert {row[1] for row in rows} == {"succeeded"}
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.dead_jobs") == 0
    # The rescuer names the worker whose lease expired: every job it took from a killed
    # worker, including one claimed by a statement that committed after our snapshot.
    for job_id, *_, last_error in rows:
        if last_error and any(f"worker {worker_id} " in last_error for worker_id in killed_ids):
            in_killed_worker.add(job_id)
    attempts = {row[0]: row[3] for row in rows}
    effect_rows = query(dsn, "SELECT job_id, attempt, worker_pid FROM chaos_effects")
    committed_by = {job_id: pid for job_id, _, pid in effect_rows}

    # Each job's return value is its own. Exception: ctx.transaction() marks the job
    # succeeded when it commits and the return value is written just after; a worker
    # killed in between leaves a succeeded job without a result (only ever in a
    # worker that was killed).
    results = {row[0]: row[2] for row in rows}
    no_result = {job_id for job_id, result in results.items() if result is None}
    assert {job_id: results[job_id] for job_id in set(results) - no_result} == {
        job_id: n for job_id, n in number_of.items() if job_id not in no_result}
    assert {committed_by[job_id] for job_id in no_result} <= killed_pids, no_result

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
    assert all(attempts[job_id] == 1 for job_id in set(number_of) - in_killed_worker)

    # Exactly-once effects through ctx.transaction(): one effect row per job, written
    # by the attempt that succeeded, however many times the job ran.
    assert len(effect_rows) == JOBS
    assert {job_id: attempt for job_id, attempt, _ in effect_rows} == attempts

    print(f"\n{JOBS} jobs in {elapsed:.1f}s; held by the killed worker: "
          f"{len(in_killed_worker)}; executed twice: {len(duplicated)}; succeeded without "
          f"a result: {len(no_result)}; rescue after "
          f"SIGKILL (lease {LEASE:g}s): {', '.join(f'{s:.1f}s' for s in rescue_seconds)}")
    assert all(seconds <= LEASE + 5 for seconds in rescue_seconds), rescue_seconds
