"""Workflows run by real ``pgq worker`` processes: chain, group, chord and a
diamond at concurrency 8 on three workers, with retries inside members; and a worker
killed with SIGKILL in the middle of a chord, after which the callback still runs exactly
once, with every member's result in order.

Each execution of a task commits a ``chaos_runs`` row first (``apps/chaos_tasks.py``), so
the tests count how often each step ran.
"""

from __future__ import annotations

import signal

from pgqueue import Workflow, chain, chord, group
from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, query, scalar

LEASE = 3.0


def _runs(dsn: str, job_id: int) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM chaos_runs WHERE job_id = %s", (job_id,)))


def test_canvas_and_a_diamond_on_three_workers_with_retries_inside(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    for n in range(3):
        processes.start_worker(dsn, name=f"worker{n}", concurrency=8, lease=LEASE)
    with chaos_app(dsn) as app:
        member, collect = app.member, app.collect
        chained = chain(member.s(2), member.s(), member.s()).enqueue()
        grouped = group(*(member.s(n) for n in range(20))).enqueue()
        chorded = chord([member.s(n) for n in range(100)], collect.s()).enqueue()
        wf = Workflow()
        top = wf.add(member.s(2))
        left = wf.add(member.s(), after=[top], inputs="result")
        right = wf.add(member.s(), after=[top], inputs="result")
        wf.add(collect.s(), after=[left, right], inputs="results")
        diamond = wf.enqueue()

        assert chained.wait(timeout=60) == 256
        assert grouped.wait(timeout=60) == [n * n for n in range(20)]
        assert chorded.wait(timeout=60) == {"count": 100,
                                            "results": [n * n for n in range(100)]}
        assert diamond.wait(timeout=60) == {"count": 2, "results": [16, 16]}
    # Multiples of 5 failed once and ran twice; the callbacks ran once each.
    assert _runs(dsn, chorded.job_ids[5]) == 2 and _runs(dsn, chorded.job_ids[6]) == 1
    assert _runs(dsn, chorded.outputs[0]) == 1 and _runs(dsn, diamond.outputs[0]) == 1
    workers = {row[0] for row in query(
        dsn, "SELECT DISTINCT worker_id FROM pgqueue.jobs WHERE workflow_id = %s",
        (chorded.id,))}
    assert len(workers) >= 2, f"one worker ran the whole chord: {workers}"
    logs = processes.logs()
    assert " ERROR " not in logs and "Traceback" not in logs, logs


def test_a_worker_killed_mid_chord_leaves_the_callback_running_once(
    chaos_dsn: str, processes: Processes
) -> None:
    dsn = chaos_dsn
    victim = processes.start_worker(dsn, name="victim", concurrency=8, lease=LEASE)
    with chaos_app(dsn) as app:
        handle = chord([app.slow_member.s(n, 0.5) for n in range(40)],
                       app.collect.s()).enqueue()
        victim_id = victim.worker_id(dsn)
        wait_until(lambda: scalar(
            dsn, "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running' "
                 "AND worker_id = %s", (victim_id,)) >= 4,
            timeout=30, message=f"the victim running chord members\n{victim.log()}")
        victim.signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        held = [row[0] for row in query(
            dsn, "SELECT id FROM pgqueue.jobs WHERE status = 'running' AND worker_id = %s",
            (victim_id,))]
        assert held, "the victim held no member when it died: the test proves nothing"
        survivor = processes.start_worker(dsn, name="survivor", concurrency=8, lease=LEASE)
        result = handle.wait(timeout=60)
    assert result == {"count": 40, "results": list(range(40))}
    callback = handle.outputs[0]
    assert _runs(dsn, callback) == 1, processes.logs()
    # A member the victim held ran again after the rescue (its first run is counted
    # only if it had started; a prefetched one had not); every other member ran once.
    members = handle.job_ids[:-1]
    assert {job_id: _runs(dsn, job_id) for job_id in members if job_id not in held} == {
        job_id: 1 for job_id in members if job_id not in held}
    assert all(_runs(dsn, job_id) in (1, 2) for job_id in held)
    assert survivor.alive()
