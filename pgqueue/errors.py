"""The exceptions users catch, and the control-flow signals tasks raise.

Every error pgqueue raises on purpose derives from :class:`PgQueueError`, so one
``except PgQueueError`` catches them all. :class:`Retry`, :class:`Snooze` and
:class:`Discard` are not errors: a task raises them to tell the worker what to do
with the job, so they sit outside the tree.
"""

from __future__ import annotations

import contextlib
import email.utils
from collections.abc import Mapping
from datetime import UTC, datetime

from pgqueue.bounds import check_delay

__all__ = [
    "ArgumentError",
    "ConfigurationError",
    "DatabaseUnavailable",
    "Discard",
    "DuplicateJob",
    "JobFailed",
    "JobNotFound",
    "LeaseLost",
    "PgQueueError",
    "Retry",
    "SchemaOutOfDate",
    "Snooze",
    "TaskNotFound",
]


class PgQueueError(Exception):
    """Base class of every error pgqueue raises on purpose."""

    __module__ = "pgqueue"


class ConfigurationError(PgQueueError, ValueError):
    """A setting is missing or malformed (DSN, schema name, option value)."""

    __module__ = "pgqueue"


class DatabaseUnavailable(PgQueueError):
    """The database could not be reached within the allowed time."""

    __module__ = "pgqueue"


class SchemaOutOfDate(PgQueueError):
    """The pgqueue schema in the database is older than this code: run ``pgq migrate``."""

    __module__ = "pgqueue"


class TaskNotFound(PgQueueError):
    """No task is registered under that name."""

    __module__ = "pgqueue"


class ArgumentError(PgQueueError, TypeError):
    """The arguments given to a task do not fit its signature or cannot be stored as JSON."""

    __module__ = "pgqueue"


class JobNotFound(PgQueueError, LookupError):
    """No job (live or dead) has that id."""

    __module__ = "pgqueue"


class ScheduleNotFound(PgQueueError, LookupError):
    """No periodic schedule has that name (``pgq periodic list`` shows them)."""

    __module__ = "pgqueue"


class DuplicateJob(PgQueueError):
    """Another live job already holds this idempotency key."""

    __module__ = "pgqueue"


class QueueFull(PgQueueError):
    """An enqueue would take a queue over its ``max_queued`` (``Queue.set_queue``).

    Nothing of the statement was written; on the caller's connection (``conn=``) its
    transaction is aborted, as by any error (enqueue in a savepoint to go on). Wait for
    workers to take jobs and enqueue again, or raise the bound.
    """

    __module__ = "pgqueue"

    def __init__(self, message: str, *, queue: str | None = None) -> None:
        super().__init__(message)
        self.queue = queue


class LeaseLost(PgQueueError):
    """This worker no longer holds the job: its lease expired and the job moved on."""

    __module__ = "pgqueue"


class JobFailed(PgQueueError):
    """The job ended in ``dead_jobs``: its attempts ran out or it was discarded."""

    __module__ = "pgqueue"

    def __init__(self, job_id: int, task: str, error: str | None) -> None:
        self.job_id = job_id
        self.task = task
        self.error = error
        last_line = (error or "no error recorded").strip().splitlines()[-1:] or [""]
        super().__init__(f"job {job_id} ({task}) is dead: {last_line[0]}")


class Retry(Exception):
    """Raise inside a task to retry the job after ``delay`` seconds; consumes the attempt.

    ``delay`` is checked here, when the task creates the exception: a negative, infinite
    or NaN delay, or one beyond 100 years, raises ValueError instead, and that attempt
    fails with it like any other error.
    """

    __module__ = "pgqueue"

    def __init__(self, delay: float = 0.0, reason: str | None = None) -> None:
        self.delay = check_delay(delay, "Retry delay")
        self.reason = reason
        super().__init__(reason or f"retry requested in {self.delay:g}s")


class Snooze(Exception):
    """Raise inside a task to run the job again in ``seconds`` without using an attempt.

    ``seconds`` is checked as :class:`Retry` checks its delay (0 to 100 years, finite).
    """

    __module__ = "pgqueue"

    def __init__(self, seconds: float) -> None:
        self.seconds = check_delay(seconds, "Snooze seconds")
        super().__init__(f"snoozed for {self.seconds:g}s")


class RateLimited(Exception):
    """Raise inside a task when a rate-limited service says "too many requests" (HTTP 429):
    the job goes back to the queue without using an attempt, and no worker starts a job of
    the same scope for ``retry_after`` seconds; then they resume on their own.

    The scope is ``key`` if given (jobs whose ``concurrency_key`` or ``rate_limit_key``
    is that key), else the job's rate bucket (its rate limit, per ``rate_limit_key``),
    else its task. ``retry_after`` is checked as :class:`Snooze` checks its seconds
    (0 to 100 years, finite). :meth:`from_headers` reads an HTTP ``Retry-After``.
    """

    __module__ = "pgqueue"

    def __init__(self, retry_after: float, *, key: str | None = None) -> None:
        from pgqueue.limits import limit_key

        self.retry_after = check_delay(retry_after, "RateLimited retry_after")
        self.key = limit_key(key, what="RateLimited key")
        scope = f"key {key!r}" if key is not None else "its rate limit or task"
        super().__init__(f"rate limited: {scope} paused for {self.retry_after:g}s")

    @classmethod
    def from_headers(cls, headers: Mapping[str, str], *, key: str | None = None,
                     default: float = 1.0) -> RateLimited:
        """From a response's headers: ``Retry-After`` in seconds or as an HTTP date (its
        time left), ``default`` seconds when it is missing or unreadable."""
        value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
        seconds = default
        if value is not None:
            text = value.strip()
            if text.isdigit():
                seconds = float(text)
            else:
                with contextlib.suppress(TypeError, ValueError, IndexError):
                    when = email.utils.parsedate_to_datetime(text)
                    seconds = max(0.0, (when - datetime.now(UTC)).total_seconds())
        return cls(seconds, key=key)


class Discard(Exception):
    """Raise inside a task to send the job to ``dead_jobs`` at once, without retrying."""

    __module__ = "pgqueue"

    def __init__(self, reason: str = "discarded by the task") -> None:
        self.reason = reason
        super().__init__(reason)


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (libpq's run to several), or
    the exception's type when it has no message: how a log line or a one-line error
    names what went wrong."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def a_type(value: object) -> str:
    """``value``'s type with its article, for error messages: "a list", "an Engine"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
