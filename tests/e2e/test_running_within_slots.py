"""What SQL shows is true: a worker's ``running`` rows never exceed its slots plus its
prefetch allowance (issue 18.2).

A job holds its place from its claim until its outcome is committed, so a job that ended
but whose outcome still waits in the completer's batch counts. A sampler reads
``count(*) … WHERE status = 'running'`` every 10 ms (each read is one snapshot, so the
count is what an operator's query would have seen at that instant) while a real
``pgq worker`` drains thousands of no-op jobs, the case where outcomes pile up fastest.
Before the fix, ``--concurrency 2`` showed 14 running rows.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pgqueue.worker.prefetch import CEILING, FLOOR
from tests._polling import wait_until
from tests.e2e._chaos import Processes, chaos_app, scalar

JOBS = 10_000  # a drain of several hundred ms: enough samples at 10 ms apart


class RunningSampler(threading.Thread):
    """Reads the number of running rows every 10 ms until stopped; keeps the maximum."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.highest = 0
        self.samples = 0
        self.nonzero = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop_event.wait(0.01):
                row = conn.execute(
                    "SELECT count(*) FROM pgqueue.jobs WHERE status = 'running'").fetchone()
                running = int(row[0]) if row else 0
                self.samples += 1
                self.nonzero += running > 0
                self.highest = max(self.highest, running)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


@pytest.mark.parametrize(("concurrency", "prefetch", "task"), [
    (2, 0, "noop"),
    (4, 4, "noop_sync"),
    (8, None, "noop"),  # the default: measured, at most prefetch.CEILING
])
def test_running_rows_never_exceed_slots_plus_prefetch(
    chaos_dsn: str, processes: Processes, concurrency: int, prefetch: int | None, task: str,
) -> None:
    extra = [] if prefetch is None else ["--prefetch", str(prefetch)]
    allowance = CEILING if prefetch is None else prefetch
    highest = _drain(chaos_dsn, processes, concurrency, extra, task,
                     [(n,) for n in range(JOBS)])
    assert highest <= concurrency + allowance, (
        f"SQL showed {highest} running rows for {concurrency} slots and a "
        f"prefetch of {allowance}")


def test_the_measured_prefetch_holds_one_job_ahead_of_slow_jobs(
    chaos_dsn: str, processes: Processes,
) -> None:
    """Jobs of a fifth of a second end a few times a second: the measured allowance stays
    at its floor of one, so two slots never show more than three running rows (a fixed
    prefetch of 8, the old default, held ten)."""
    highest = _drain(chaos_dsn, processes, 2, [], "hold", [(0.2,)] * 12)
    assert highest <= 2 + FLOOR, f"SQL showed {highest} running rows for 2 slots"


def _drain(chaos_dsn: str, processes: Processes, concurrency: int, extra: list[str],
           task: str, items: list[tuple[Any, ...]]) -> int:
    """Run ``items`` of ``task`` through a real ``pgq worker``; the most running rows SQL
    showed meanwhile."""
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
    return sampler.highest
