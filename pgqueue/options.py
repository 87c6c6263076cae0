"""Validated job options: what ``@q.task(...)`` and ``.using(...)`` accept.

Each option is checked once, where the user gives it, so a bad value fails in one line
at the call site rather than as a database error later.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pgqueue.bounds import (
    MAX_IDEMPOTENCY_KEY_BYTES,
    MAX_INTEGER,
    MAX_QUEUE_NAME_LENGTH,
    MAX_RESULT_TTL_SECONDS,
    MAX_TASK_NAME_LENGTH,
    check_run_at,
    name_problem,
    short_repr,
    text_problem,
)
from pgqueue.errors import ConfigurationError
from pgqueue.serialization import dumps
from pgqueue.settings import parse_duration
from pgqueue.tracing import ENABLED as TRACING
from pgqueue.tracing import with_trace_context

TASK_OPTIONS = frozenset(
    {"queue", "priority", "max_attempts", "timeout", "retry_intervals", "result_ttl"}
)
ENQUEUE_OPTIONS = TASK_OPTIONS - {"retry_intervals"} | {
    "run_in", "run_at", "idempotency_key", "meta", "conn",
}
_SMALLINT = (-32768, 32767)


@dataclass(frozen=True)
class JobOptions:
    """Everything that shapes one job row besides its task and arguments."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    result_ttl: int = 86400
    run_in: float = 0.0
    run_at: datetime | None = None
    idempotency_key: str | None = None
    meta: str = "{}"

    def with_options(self, options: Mapping[str, Any], allowed: frozenset[str]) -> JobOptions:
        """A copy with ``options`` applied; unknown names and bad values raise."""
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ConfigurationError(
                f"unknown option(s) {', '.join(unknown)}; expected some of "
                f"{', '.join(sorted(allowed))}"
            )
        changes: dict[str, Any] = {}
        for name, value in options.items():
            if name in ("conn", "retry_intervals"):
                continue
            changes[name] = _VALIDATORS[name](value)
        if "run_at" in changes and "run_in" in changes:
            raise ConfigurationError("give run_at or run_in, not both")
        return replace(self, **changes)

    def as_params(self) -> dict[str, Any]:
        """Bind parameters shared by insert_job and insert_jobs (``meta`` with the current
        span's trace context, when OpenTelemetry is installed: ``pgqueue/tracing.py``)."""
        meta = with_trace_context(self.meta) if TRACING else self.meta
        return {
            "queue": self.queue,
            "priority": self.priority,
            "run_at": self.run_at,
            "run_in": self.run_in,
            "max_attempts": self.max_attempts,
            "idempotency_key": self.idempotency_key,
            "meta": meta,
            "timeout": self.timeout,
            "result_ttl": self.result_ttl,
        }


def _queue(value: Any) -> str:
    return queue_name(value)


def queue_name(value: Any) -> str:
    """A valid queue name, or ConfigurationError.

    No comma: the wake-up NOTIFY's payload and ``pgq worker --queues`` separate queue
    names with commas.
    """
    return _checked_name(value, "queue", MAX_QUEUE_NAME_LENGTH, ",",
                         "a queue name is 1 to {max} printable characters without commas")


def task_name(value: Any) -> str:
    """A valid task name, or ConfigurationError.

    Task names are written into log lines and error messages: a newline in one could
    forge a log line, so only printable characters are allowed.
    """
    return _checked_name(value, "task name", MAX_TASK_NAME_LENGTH, "",
                         "a task name is 1 to {max} printable characters, "
                         "e.g. myapp.tasks.send_email")


def _checked_name(value: Any, what: str, max_length: int, forbidden: str, rule: str) -> str:
    problem = name_problem(value, max_length=max_length, forbidden=forbidden)
    if problem:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)}: {problem} ({rule.format(max=max_length)})"
        )
    return value  # type: ignore[no-any-return]


def _priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
        _SMALLINT[0] <= value <= _SMALLINT[1]
    ):
        raise ConfigurationError(
            f"invalid priority {short_repr(value)}: use an integer from {_SMALLINT[0]} to "
            f"{_SMALLINT[1]} (higher runs first)"
        )
    return value


def _max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INTEGER:
        raise ConfigurationError(
            f"invalid max_attempts {short_repr(value)}: use an integer from 1 to {MAX_INTEGER}"
        )
    return value


def _timeout(value: Any) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value, what="timeout")
    if seconds <= 0:
        raise ConfigurationError(
            f"invalid timeout {short_repr(value)}: must be more than 0 seconds (or None for none)"
        )
    return seconds


def _result_ttl(value: Any) -> int:
    return int(parse_duration(value, what="result_ttl", maximum=MAX_RESULT_TTL_SECONDS))


def _run_in(value: Any) -> float:
    return parse_duration(value, what="run_in")


def _run_at(value: Any) -> datetime:
    if not isinstance(value, datetime):
        raise ConfigurationError(
            f"invalid run_at {short_repr(value)}: use a timezone-aware datetime"
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(
            f"invalid run_at {value.isoformat()}: naive datetime; give a timezone "
            "(e.g. datetime.now(timezone.utc))"
        )
    problem = check_run_at(value)
    if problem:
        raise ConfigurationError(
            f"invalid run_at {value.isoformat()}: {problem}; use a time at most 100 years ahead"
        )
    return value


def _idempotency_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigurationError(
            f"invalid idempotency_key {short_repr(value)}: use a non-empty string"
        )
    problem = text_problem(value)
    if problem is None and len(value) * 4 > MAX_IDEMPOTENCY_KEY_BYTES:
        size = len(value.encode())
        if size > MAX_IDEMPOTENCY_KEY_BYTES:
            problem = f"is {size} bytes long in UTF-8"
    if problem:
        raise ConfigurationError(
            f"invalid idempotency_key {short_repr(value)}: {problem}; use a string of at most "
            f"{MAX_IDEMPOTENCY_KEY_BYTES} bytes without NUL (hash a longer key)"
        )
    return value


def _meta(value: Any) -> str:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"invalid meta {short_repr(value)}: use a dict of JSON values"
        )
    try:
        return dumps(dict(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"invalid meta: not JSON-serialisable ({exc})") from None


def retry_intervals(value: Any) -> tuple[float, ...] | None:
    """Validate ``retry_intervals``: delays in seconds for the 1st, 2nd... retry."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"invalid retry_intervals {short_repr(value)}: use a list of delays, "
            "e.g. [10, 30, 60]"
        )
    delays = tuple(parse_duration(v, what="retry interval") for v in value)
    if not delays:
        raise ConfigurationError("invalid retry_intervals []: give at least one delay")
    return delays


_VALIDATORS: dict[str, Any] = {
    "queue": _queue,
    "priority": _priority,
    "max_attempts": _max_attempts,
    "timeout": _timeout,
    "result_ttl": _result_ttl,
    "run_in": _run_in,
    "run_at": _run_at,
    "idempotency_key": _idempotency_key,
    "meta": _meta,
}

__all__ = [
    "ENQUEUE_OPTIONS", "TASK_OPTIONS", "JobOptions", "queue_name", "retry_intervals",
    "task_name", "timedelta",
]
