"""A job with three ``ctx.step``s whose worker is SIGKILLed after the second step: once
its lease is recovered, another worker process runs only the third step.

Each step's function commits a ``chaos_runs`` row named after the step (see
``apps/chaos_tasks.py``), so counting rows counts executions across processes.
"""

from __future__ import annotations

import signal

from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, query, scalar

LEASE = 2.0


def test_a_killed_job_resumes_after_its_last_completed_step(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    victim = processes.start_worker(dsn, name="victim", lease=LEASE, concurrency=2)
    with chaos_app(dsn) as app:
        job = app.three_steps.enqueue(60.0)
        wait_until(lambda: scalar(dsn, "SELECT count(*) FROM pgqueue.job_steps "
                                       "WHERE job_id = %s", (job.id,)) == 2,
                   timeout=30, message=f"two steps recorded\n{victim.log()}")
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL

        survivor = processes.start_worker(dsn, name="survivor", lease=LEASE, concurrency=2)
        result = job.wait(timeout=LEASE + 20)
        assert survivor.alive(), survivor.log()

    runs = query(dsn, "SELECT task, worker_pid, attempt FROM chaos_runs WHERE job_id = %s "
                      "ORDER BY seq", (job.id,))
    assert runs == [
        ("chaos.three_steps", victim.pid, 1),
        ("chaos.three_steps:first", victim.pid, 1),
        ("chaos.three_steps:second", victim.pid, 1),
        ("chaos.three_steps", survivor.pid, 2),  # the lease expiry counted as attempt 1
        ("chaos.three_steps:third", survivor.pid, 2),
    ]
    # The first two results are the ones the killed worker stored; only the third is new.
    assert result == [f"first@{victim.pid}", f"second@{victim.pid}", f"third@{survivor.pid}"]
    stored = query(dsn, "SELECT name, result FROM pgqueue.job_steps WHERE job_id = %s "
                        "ORDER BY name", (job.id,))
    assert stored == [("first", f"first@{victim.pid}"), ("second", f"second@{victim.pid}"),
                      ("third", f"third@{survivor.pid}")]
