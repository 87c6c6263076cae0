"""What SQL shows is true: a worker's ``running`` rows never exceed its slots, whatever
it holds ahead of them.

A job takes a slot from its start until its outcome is committed, so a job that ended
but whose outcome still waits in the completer's batch counts; jobs claimed ahead of the
slots (the prefetch allowance) are ``claimed``, not running, until the statement that
records the outcome before them starts them. A sampler reads ``count(*) … WHERE status
= 'running'`` every 10 ms (each read is one snapshot, so the count is what an
operator's query would have seen at that instant) while a real ``pgq worker`` drains
20,000 no-op jobs, the case where outcomes pile up fastest, and jobs of 0.2 s. Before
prefetched jobs had a state of their own, ``--concurrency 2`` showed 388 running rows.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgqueue.worker.prefetch import CEILING, FLOOR
from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, scalar

JOBS = 20_000  # a drain of a second or more: enough samples at 10 ms apart


class RunningSampler(threading.Thread):
    """Reads the number of running and held rows every 10 ms until stopped; keeps the
    most of each."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.highest = 0
        self.most_held = 0
        self.samples = 0
        self.nonzero = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.wait(0.01):
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE status = 'running'),"
                    " count(*) FILTER (WHERE status = 'claimed') FROM pgqueue.jobs"
                    " WHERE status IN ('running', 'claimed')").fetchone()
                running, held = (int(row[0]), int(row[1])) if row else (0, 0)
                self.samples += 1
                self.nonzero += running > 0
                self.highest = max(self.highest, running)
                self.most_held = max(self.most_held, held)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


@pytest.mark.parametrize(("concurrency", "prefetch", "task"), [
    (2, 0, "noop"),
    (2, None, "noop"),  # the default: measured, at most prefetch.CEILING held
    (4, 4, "noop_sync"),
    (8, None, "noop"),
])
def test_running_rows_never_exceed_the_slots(
    chaos_dsn: str, processes: Processes, concurrency: int, prefetch: int | None, task: str,
) -> None:
    extra = [] if prefetch is None else ["--prefetch", str(prefetch)]
    allowance = CEILING if prefetch is None else prefetch
    # Without prefetch every two jobs cost two round trips (their outcome, then the next
    # claim): a fifth of the jobs drain in about the same time.
    jobs = JOBS if prefetch != 0 else JOBS // 5
    sampler = _drain(chaos_dsn, processes, concurrency, extra, task,
                     [(n,) for n in range(jobs)])
    assert sampler.highest <= concurrency, (
        f"SQL showed {sampler.highest} running rows for {concurrency} slots")
    assert sampler.most_held <= allowance, (
        f"SQL showed {sampler.most_held} held rows for a prefetch of {allowance}")
    if prefetch != 0:
        assert sampler.most_held > 0  # the worker did hold jobs ahead: the bound is real


def test_jobs_of_a_fifth_of_a_second_hold_one_ahead_and_run_within_the_slots(
    chaos_dsn: str, processes: Processes,
) -> None:
    """Jobs of a fifth of a second end a few times a second: the measured allowance stays
    at its floor of one, and two slots never show more than two running rows."""
    sampler = _drain(chaos_dsn, processes, 2, [], "hold", [(0.2,)] * 12)
    assert sampler.highest <= 2, f"SQL showed {sampler.highest} running rows for 2 slots"
    assert sampler.most_held <= FLOOR, sampler.most_held


def _drain(chaos_dsn: str, processes: Processes, concurrency: int, extra: list[str],
           task: str, items: list[tuple[Any, ...]]) -> RunningSampler:
    """Run ``items`` of ``task`` through a real ``pgq worker``; the sampler that watched
    the running and held rows meanwhile."""
    processes.start_worker(chaos_dsn, concurrency=concurrency, extra=extra)
    sampler = RunningSampler(chaos_dsn)
    sampler.start()
    try:
        with chaos_app(chaos_dsn) as app:
            getattr(app, task).enqueue_many(items)
        wait_until(lambda: scalar(chaos_dsn, "SELECT count(*) FROM pgqueue.jobs "
                                             "WHERE status = 'succeeded'") == len(items),
                   timeout=60, message=f"{len(items)} jobs succeeded")
    finally:
        sampler.stop()
    # The sampler saw the drain (else the bound would hold vacuously).
    assert sampler.nonzero >= 5, (sampler.samples, sampler.nonzero)
    return sampler
