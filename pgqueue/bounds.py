"""The bounds of every value that reaches the database, and the checks that enforce them.

Each limit exists because PostgreSQL (or Python, reading a row back) would otherwise
fail later, far from the call that passed the value: an idempotency key too large for
its unique index, a delay that overflows ``interval``, a ``run_at`` that PostgreSQL
stores but Python's ``datetime`` cannot read back (which would make every worker that
claims the row fail), a NUL character that a ``text`` column refuses, a newline in a
name that forges log lines. A value outside a limit raises, at the call site, a
one-line error that names the field and the accepted range. ``docs/reference/python-api.md``
lists them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = [
    "MAX_DELAY_SECONDS",
    "MAX_IDEMPOTENCY_KEY_BYTES",
    "MAX_INTEGER",
    "MAX_QUEUE_NAME_LENGTH",
    "MAX_RESULT_TTL_SECONDS",
    "MAX_SCHEMA_NAME_LENGTH",
    "MAX_STEP_NAME_LENGTH",
    "MAX_TASK_NAME_LENGTH",
    "check_delay",
    "check_run_at",
    "name_problem",
    "short_repr",
    "text_problem",
]

# PostgreSQL identifiers (and NOTIFY channel names) are at most 63 bytes. The wake-up
# channel is "<schema>_jobs": five more than the schema name.
CHANNEL_SUFFIX: Final = "_jobs"
MAX_SCHEMA_NAME_LENGTH: Final = 63 - len(CHANNEL_SUFFIX)

# The largest delay pgqueue stores: run_in, timeout, retry intervals, Retry(delay=...),
# Snooze(seconds), worker durations. 100 years keeps now() + delay far inside both
# PostgreSQL's interval/timestamp range and Python's datetime (year 9999), so every
# row stays readable; anything longer is a mistake (an infinity, a unit error).
MAX_DELAY_SECONDS: Final = 100 * 365 * 86400

# Columns of type integer: max_attempts, result_ttl.
MAX_INTEGER: Final = 2**31 - 1
MAX_RESULT_TTL_SECONDS: Final = MAX_INTEGER

# A btree entry holds at most about a third of an 8 kB page (2,704 bytes); an
# incompressible key above that cannot enter jobs_idempotency_key_idx. 1 KiB leaves
# room and is far more than a key needs (hash anything longer).
MAX_IDEMPOTENCY_KEY_BYTES: Final = 1024

MAX_QUEUE_NAME_LENGTH: Final = 200
MAX_TASK_NAME_LENGTH: Final = 255
# ctx.step() names (job_steps.name, checked by job_steps_name_check): a label, not data;
# a name built from data (an id per item) stays far below it.
MAX_STEP_NAME_LENGTH: Final = 200


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for one-line error messages.

    Never raises: an int too long for ``repr`` (Python's 4,300-digit limit) is named by
    its type and size instead.
    """
    try:
        text = repr(value)
    except ValueError:
        size = f" of {value.bit_length()} bits" if isinstance(value, int) else ""
        return f"<{type(value).__name__}{size}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored in a ``text`` column, or None.

    PostgreSQL text never holds NUL, and a lone surrogate (half of a UTF-16 pair, which
    Python strings may hold) has no UTF-8 form.
    """
    if "\x00" in value:
        return "contains the NUL character (\\x00), which PostgreSQL text cannot hold"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"contains a lone surrogate ({value[exc.start]!r}), which has no UTF-8 form"
    return None


def name_problem(value: object, *, max_length: int, forbidden: str = "") -> str | None:
    """Why ``value`` is not a valid name (queue, task), or None.

    Names appear in log lines, in NOTIFY payloads and on command lines: printable
    characters only (no newline, tab or other control character that could forge or
    garble a log line), no leading or trailing whitespace, nothing in ``forbidden``.
    """
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not value or not value.strip():
        return "must not be empty"
    if len(value) > max_length:
        return f"is {len(value)} characters long; the limit is {max_length}"
    if value != value.strip():
        return "must not start or end with whitespace"
    if not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        return f"contains {bad!r}: use printable characters only (no newline or control character)"
    for character in forbidden:
        if character in value:
            return f"must not contain {character!r}"
    return None


def check_delay(seconds: float, what: str) -> float:
    """``seconds`` as a float if it is a finite delay from 0 to :data:`MAX_DELAY_SECONDS`.

    Raises ValueError naming ``what`` and the range otherwise.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(
            f"{what} must be a number of seconds, got {type(seconds).__name__} "
            f"{short_repr(seconds)}"
        )
    try:
        value = float(seconds)
    except OverflowError:  # an int beyond float's range
        value = math.inf
    if not math.isfinite(value) or not 0 <= value <= MAX_DELAY_SECONDS:
        raise ValueError(
            f"{what} must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS} "
            f"(100 years), got {short_repr(seconds)}"
        )
    return value


def check_run_at(value: datetime) -> str | None:
    """Why the aware datetime ``value`` cannot be a job's ``run_at``, or None.

    It must convert to UTC within Python's datetime range (or the row could not be read
    back) and lie at most :data:`MAX_DELAY_SECONDS` in the future.
    """
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        return "is out of range once converted to UTC"
    if utc - datetime.now(UTC) > timedelta(seconds=MAX_DELAY_SECONDS):
        return "is more than 100 years in the future"
    return None
