"""Retry delays, reconnect backoff and the retryable-error classification (no database)."""

from __future__ import annotations

import random

import psycopg
import pytest
from psycopg import errors

from pgqueue.worker.backoff import (
    RETRY_BASE_SECONDS,
    RETRY_CAP_SECONDS,
    Backoff,
    is_retryable,
    retry_delay,
)


@pytest.mark.parametrize("attempt", [1, 2, 3, 5, 8, 11, 12, 13, 20, 50, 1000])
def test_retry_delay_is_jittered_exponential_within_bounds(attempt: int) -> None:
    ceiling = min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2 ** (attempt - 1))
    delays = [retry_delay(attempt) for _ in range(300)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len(set(delays)) > 1  # jittered


def test_retry_delay_grows_then_caps() -> None:
    random.seed(1)
    assert 1.0 <= retry_delay(1) <= 2.0
    assert 2.0 <= retry_delay(2) <= 4.0
    assert 4.0 <= retry_delay(3) <= 8.0
    assert RETRY_CAP_SECONDS / 2 <= retry_delay(40) <= RETRY_CAP_SECONDS
    assert retry_delay(0) <= RETRY_BASE_SECONDS  # never negative exponents


def test_retry_intervals_give_the_nth_retry_its_delay_and_repeat_the_last() -> None:
    intervals = (10.0, 30.0, 60.0)
    assert [retry_delay(n, intervals) for n in range(1, 7)] == [10, 30, 60, 60, 60, 60]
    assert retry_delay(1, (0.0,)) == 0.0
    assert retry_delay(9, (0.0,)) == 0.0


def test_empty_intervals_fall_back_to_backoff() -> None:
    assert 1.0 <= retry_delay(1, ()) <= 2.0


def test_backoff_grows_is_capped_and_resets() -> None:
    backoff = Backoff(base=0.1, cap=1.0)
    delays = [backoff.next_delay() for _ in range(10)]
    ceilings = [min(1.0, 0.1 * 2**n) for n in range(10)]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.failures == 10
    backoff.reset()
    assert backoff.failures == 0
    assert 0.05 <= backoff.next_delay() <= 0.1


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.InterfaceError("the connection is closed"),
        errors.SerializationFailure(),
        errors.DeadlockDetected(),
        errors.AdminShutdown(),
        errors.QueryCanceled(),
        ConnectionRefusedError(),
        OSError("network is unreachable"),
    ],
)
def test_connection_and_transient_errors_are_retryable(exc: BaseException) -> None:
    assert is_retryable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        errors.UndefinedTable(),
        errors.SyntaxError(),
        errors.UniqueViolation(),
        errors.InsufficientPrivilege(),
        ValueError("bug"),
        KeyError("bug"),
    ],
)
def test_programming_errors_are_not_retryable(exc: BaseException) -> None:
    assert not is_retryable(exc)
