"""The measured prefetch allowance (pgqueue/worker/prefetch.py)."""

from __future__ import annotations

from pgqueue.worker.prefetch import CEILING, FLOOR, HORIZON, Prefetch


def ended(prefetch: Prefetch, seconds: float, times: int = 100) -> None:
    for _ in range(times):
        prefetch.ended(seconds)


def test_a_fixed_prefetch_is_what_was_given() -> None:
    prefetch = Prefetch(0, concurrency=8)
    ended(prefetch, 0.00001)
    assert prefetch.allowance == 0
    assert prefetch.claim_batch == 1
    assert Prefetch(32, concurrency=8).allowance == 32


def test_before_any_job_ended_one_job_is_held_ahead() -> None:
    assert Prefetch(None, concurrency=8).allowance == FLOOR


def test_the_allowance_keeps_every_slot_busy_for_the_horizon() -> None:
    prefetch = Prefetch(None, concurrency=8)
    ended(prefetch, 0.005)  # jobs of 5 ms on 8 slots: 1,600 jobs/s
    assert prefetch.allowance == round(8 * HORIZON / 0.005)
    assert prefetch.claim_batch == prefetch.allowance // 2


def test_short_jobs_get_the_ceiling_from_the_first_one_that_ends() -> None:
    prefetch = Prefetch(None, concurrency=8)
    prefetch.ended(0.00002)
    assert prefetch.allowance == CEILING
    prefetch.ended(0.0)
    assert prefetch.allowance == CEILING


def test_slow_jobs_get_one_however_many_end_together() -> None:
    prefetch = Prefetch(None, concurrency=2)
    ended(prefetch, 0.2, times=2)
    assert prefetch.allowance == FLOOR


def test_it_follows_the_jobs_when_they_slow_down() -> None:
    prefetch = Prefetch(None, concurrency=8)
    ended(prefetch, 0.00002)
    assert prefetch.allowance == CEILING
    ended(prefetch, 1.0)  # a hundred jobs of a second
    assert prefetch.allowance == FLOOR


def test_slots_stuck_in_a_slow_job_shrink_the_allowance() -> None:
    prefetch = Prefetch(None, concurrency=8)
    ended(prefetch, 0.00002)
    prefetch.stalled(running_for=1.0)
    assert prefetch.allowance == FLOOR
    fixed = Prefetch(64, concurrency=8)
    fixed.stalled(running_for=1.0)
    assert fixed.allowance == 64
