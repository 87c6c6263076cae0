"""Delays: capped exponential backoff with jitter, for retries and for reconnecting.

Jitter spreads the herd: many workers that lost the database at the same moment must not
all come back in the same millisecond, and many jobs failing together must not retry
together.
"""

from __future__ import annotations

import random
import re

import psycopg
from psycopg import errors

RETRY_BASE_SECONDS = 2.0
RETRY_CAP_SECONDS = 3600.0


def retry_delay(attempt: int, intervals: tuple[float, ...] | None = None) -> float:
    """Seconds before retrying after failed ``attempt`` (1-based).

    With ``intervals`` the n-th retry waits ``intervals[n-1]`` (the last one repeats);
    otherwise "equal jitter": half of ``min(cap, base * 2**(attempt-1))`` plus a random
    share of the other half.
    """
    if intervals:
        return float(intervals[min(attempt, len(intervals)) - 1])
    ceiling = min(RETRY_CAP_SECONDS, RETRY_BASE_SECONDS * 2.0 ** max(0, attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


class Backoff:
    """Reconnect delays: full jitter over ``min(cap, base * 2**n)``; reset on success."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next try; each call counts one more failure."""
        ceiling = min(self.cap, self.base * 2.0**self.failures)
        self.failures += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        """Forget past failures after a success."""
        self.failures = 0


# Connection errors that name a configuration mistake rather than a passing outage. libpq
# reports them without a SQLSTATE, so they are recognised by the server's FATAL message.
_PERMANENT = re.compile(
    r"password authentication failed|role \".*\" does not exist|"
    r"database \".*\" does not exist|no pg_hba\.conf entry|"
    r"password is required|SSL required|does not support SSL",
    re.IGNORECASE,
)


def is_retryable(exc: BaseException) -> bool:
    """Database errors worth retrying: lost connections, restarts, serialization clashes.

    The one place that classifies them, so every service reconnects on the same terms.
    """
    if isinstance(exc, psycopg.OperationalError) and _PERMANENT.search(str(exc)):
        return False  # waiting will not fix a wrong password, role or database name
    if isinstance(exc, errors.SerializationFailure | errors.DeadlockDetected):
        return True
    if isinstance(exc, errors.QueryCanceled | errors.LockNotAvailable):
        return True
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | OSError)
