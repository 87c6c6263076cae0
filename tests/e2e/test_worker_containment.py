"""No task can take a worker down or stall it, in real processes.

* ``sys.exit(3)`` and ``KeyboardInterrupt`` inside a task (sync or async) fail that
  attempt with a last line that says so; the worker and the jobs beside it carry on.
* A sync task that ignores its timeout fails as timed out, and its thread keeps its slot
  (logged) until the call returns: the next job does not start before then.
* An async task that swallows its cancellation fails as timed out within its timeout plus
  ``ABANDON_AFTER``.
* SIGTERM ends the process within ``--shutdown-timeout`` plus ``SHUTDOWN_GRACE`` even
  when a task ignores cancellation, and releases its job.
"""

from __future__ import annotations

import functools
import signal
import time

from pgqueue.worker import timings
from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, scalar


def _dead_error(dsn: str, job_id: int) -> str:
    """The job's dead-job error, or "" while it is not dead."""
    value = scalar(dsn, "SELECT error FROM pgqueue.dead_jobs WHERE id = %s", (job_id,))
    return "" if value is None else str(value)


def test_sys_exit_and_keyboard_interrupt_in_tasks_fail_the_attempt_not_the_worker(
    chaos_dsn: str, processes: Processes
) -> None:
    worker = processes.start_worker(chaos_dsn, concurrency=4)
    with chaos_app(chaos_dsn) as app:
        beside = app.hold.enqueue(1.0).id
        exits = {app.exit_async.enqueue(3).id: "SystemExit(3)",
                 app.exit_sync.enqueue(4).id: "SystemExit(4)",
                 app.interrupt.enqueue().id: "KeyboardInterrupt()"}
        for job_id, what in exits.items():
            error = wait_until(functools.partial(_dead_error, chaos_dsn, job_id),
                               timeout=20, message=f"job {job_id} dead")
            assert error.splitlines()[-1].startswith(f"{what} raised by task"), error
            assert "a task cannot stop the worker" in error.splitlines()[-1]
        after = app.hold.enqueue(0).id
    wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs WHERE id IN "
                                         "(%s, %s) AND status = 'succeeded'",
                              (beside, after)) == 2, timeout=20,
               message=f"the jobs beside and after succeeded\n{worker.log()}")
    assert worker.alive(), worker.log()
    assert "Traceback" not in worker.log().split("started: concurrency")[0]


def test_a_sync_task_ignoring_its_timeout_keeps_its_slot_until_its_thread_returns(
    chaos_dsn: str, processes: Processes
) -> None:
    worker = processes.start_worker(chaos_dsn, concurrency=1, extra=["--prefetch", "0"])
    with chaos_app(chaos_dsn) as app:
        stuck = app.busy_sync.enqueue(4.0).id
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM chaos_runs") == 1,
                   timeout=20, message="the stuck task started")
        started = time.monotonic()
        follower = app.hold.enqueue(0).id
    error = wait_until(lambda: _dead_error(chaos_dsn, stuck), timeout=20)
    assert "timed out after 0.5s" in error, error
    worker.wait_for_log(r"its thread is still running .* slot stays taken")
    # The heartbeat (every lease/3) reports it: pgq workers and SQL show the stuck thread.
    wait_until(lambda: scalar(chaos_dsn, "SELECT stuck FROM pgqueue.workers") == 1,
               timeout=10, message="workers.stuck = 1")
    wait_until(lambda: scalar(chaos_dsn, "SELECT status FROM pgqueue.jobs WHERE id = %s",
                              (follower,)) == "succeeded", timeout=20)
    # The follower waited for the thread (4 s from the stuck task's start), not just for
    # the timeout (0.5 s): its run was recorded after the call returned.
    waited = scalar(chaos_dsn, "SELECT extract(epoch FROM max(started_at) - min(started_at)) "
                               "FROM chaos_runs")
    assert float(waited) >= 3.9, (waited, worker.log())
    assert time.monotonic() - started < 15
    assert worker.alive()


def test_an_async_task_swallowing_cancellation_still_times_out(
    chaos_dsn: str, processes: Processes
) -> None:
    worker = processes.start_worker(chaos_dsn, concurrency=2)
    with chaos_app(chaos_dsn) as app:
        job = app.deaf.enqueue(60.0).id
    wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM chaos_runs") == 1, timeout=20)
    started = time.monotonic()
    error = wait_until(lambda: _dead_error(chaos_dsn, job), timeout=20)
    assert "timed out after 0.5s" in error, error
    assert time.monotonic() - started < 0.5 + timings.ABANDON_AFTER + 2
    worker.wait_for_log(r"ignored its cancellation")
    assert worker.alive()


def test_sigterm_exits_within_the_bound_even_when_tasks_ignore_cancellation(
    chaos_dsn: str, processes: Processes
) -> None:
    shutdown_timeout = 1.0
    worker = processes.start_worker(chaos_dsn, concurrency=4, shutdown_timeout=shutdown_timeout,
                                    lease=30)
    with chaos_app(chaos_dsn) as app:
        deaf = app.deaf_forever.enqueue().id
        busy = app.busy_sync.using(timeout=None).enqueue(120.0).id
    wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM chaos_runs") == 2, timeout=20)
    stopping = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.log()
    took = time.monotonic() - stopping
    bound = shutdown_timeout + timings.SHUTDOWN_GRACE
    assert took <= bound, f"exited {took:.2f} s after SIGTERM; bound {bound} s\n{worker.log()}"
    rows = scalar(chaos_dsn, "SELECT array_agg(status || ':' || attempts ORDER BY id) "
                             "FROM pgqueue.jobs WHERE id IN (%s, %s)", (deaf, busy))
    assert rows == ["queued:0", "queued:0"], (rows, worker.log())
    print(f"\nSIGTERM to exit: {took:.2f} s (shutdown-timeout {shutdown_timeout:g} s, "
          f"bound {bound:g} s)")
