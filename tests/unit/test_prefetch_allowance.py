"""The measured prefetch allowance (pgqueue/worker/prefetch.py), on a clock we move."""

from __future__ import annotations

from pgqueue.worker.prefetch import CEILING, FLOOR, HORIZON, Prefetch


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_at(prefetch: Prefetch, clock: Clock, rate: float, seconds: float) -> None:
    """Jobs ending at ``rate`` per second for ``seconds``, the allowance read every ms
    (as a busy producer does)."""
    for _ in range(round(seconds * 1000)):
        clock.now += 0.001
        for _ in range(round(rate / 1000)):
            prefetch.ended()
        _ = prefetch.allowance


def test_a_fixed_prefetch_is_what_was_given() -> None:
    clock = Clock()
    prefetch = Prefetch(0, clock=clock)
    run_at(prefetch, clock, 20_000, 1.0)
    assert prefetch.allowance == 0
    assert prefetch.claim_batch == 1
    assert Prefetch(32, clock=clock).allowance == 32


def test_an_idle_worker_holds_one_job_ahead() -> None:
    assert Prefetch(None, clock=Clock()).allowance == FLOOR


def test_the_allowance_covers_the_horizon_at_the_measured_rate() -> None:
    clock = Clock()
    prefetch = Prefetch(None, clock=clock)
    run_at(prefetch, clock, 10_000, 1.0)  # ten time constants: the rate is known
    expected = 10_000 * HORIZON
    assert expected * 0.9 <= prefetch.allowance <= expected * 1.1
    assert prefetch.claim_batch == prefetch.allowance // 2


def test_it_grows_within_the_first_tenth_of_a_second_of_a_burst() -> None:
    clock = Clock()
    prefetch = Prefetch(None, clock=clock)
    run_at(prefetch, clock, 20_000, 0.1)
    assert prefetch.allowance >= 100


def test_it_never_exceeds_the_ceiling() -> None:
    clock = Clock()
    prefetch = Prefetch(None, clock=clock)
    run_at(prefetch, clock, 1_000_000, 1.0)
    assert prefetch.allowance == CEILING


def test_it_falls_back_when_jobs_slow_down() -> None:
    clock = Clock()
    prefetch = Prefetch(None, clock=clock)
    run_at(prefetch, clock, 20_000, 0.5)
    assert prefetch.allowance > 100
    run_at(prefetch, clock, 5, 2.0)  # jobs of about a second on five slots
    assert prefetch.allowance == FLOOR
