"""Limits across the cluster: concurrency, rate limits by count and by cost, pauses, fairness.

Where each limit lives (revision ``0010_limits``):

* a queue's: columns of ``queues`` (``Queue.set_queue``, ``pgq queues set``), changed at
  run time;
* a task's: ``task_limits``, declared by each worker when it starts from
  ``@q.task(global_concurrency=, key_concurrency=, rate_limit=)``;
* a job's keys and cost: ``jobs.concurrency_key``, ``rate_limit_key``, ``cost``
  (``task.using(...)``);
* rate buckets and pauses: ``limit_state``, one row per scope in use.

How they hold. Every limit is checked by the claim, in PostgreSQL, never in a worker's
memory. The plain claim skips limited queues and tasks; a worker then runs the limited
claim (``queries.lock_limits`` + ``queries.claim_limited_jobs_*``) in one transaction:
the first statement locks the limits' rows, so limited claims take turns for the few
milliseconds a claim lasts, and the second, whose snapshot starts after the lock, counts
the running jobs of each scope from ``jobs`` and admits what fits. Running jobs are the
truth, not a counter: a worker killed with jobs running frees their slots when their
leases are rescued, and nothing can leak. A queue or task without limits never takes
these locks. A job is subject to at most one rate limit: its task's if the task has one,
else its queue's; with ``rate_limit_key``, that limit applies to each key separately.

A job that raises :class:`~pgqueue.errors.RateLimited` goes back to the queue without
using an attempt, and its scope (the key it names, else its rate bucket, else its task)
is paused in ``limit_state`` until ``retry_after``: every worker's next claim sees it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from pgqueue.bounds import MAX_INTEGER, short_repr
from pgqueue.db.plans import Plan, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ConfigurationError, a_type
from pgqueue.serialization import dumps

__all__ = ["MAX_KEY_LENGTH", "RateLimit", "TaskLimits", "concurrency", "cost",
           "declare_task_limits", "limit_key", "list_task_limits", "rate_limit"]

MAX_KEY_LENGTH: Final = 200
# The most units a rate may allow per window, and the shortest and longest windows (the
# columns' CHECK says the same).
MAX_RATE_AMOUNT: Final = 1e9
MIN_WINDOW: Final = 0.001
MAX_WINDOW: Final = 7 * 86400
_UNIT_SECONDS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(
    r"\s*(?P<amount>\d+(?:\.\d+)?)(?:\s+(?P<unit>[A-Za-z_][A-Za-z0-9_-]*))?\s*/\s*"
    r"(?P<count>\d+(?:\.\d+)?)?\s*(?P<window>[smhd])\s*"
)
_RATE_FORMS = ("N/s, N/m, N/h or N/d (job starts), N/10s for another window, "
               "or 'N units/m' for a limit by cost")


@dataclass(frozen=True)
class RateLimit:
    """A rate limit: ``amount`` units per ``window`` seconds; ``unit`` None counts job
    starts, a name (``"tokens"``) makes it a limit by cost."""

    text: str  # the canonical form, as stored and shown: "10/s", "90000 tokens/m"
    amount: float
    window: float
    unit: str | None = None

    def as_params(self) -> dict[str, Any]:
        """The columns ``rate_limit``, ``rate_amount``, ``rate_window``, ``rate_unit``."""
        return {"rate_limit": self.text, "rate_amount": self.amount,
                "rate_window": self.window, "rate_unit": self.unit}


def rate_limit(value: Any, *, what: str = "rate_limit") -> RateLimit | None:
    """A valid rate limit from ``"10/s"``, ``"100/m"``, ``"5/10s"`` or ``"90000 tokens/m"``
    (None: no limit); anything else raises one line naming the value and the forms."""
    if value is None or isinstance(value, RateLimit):
        return value
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)} ({a_type(value)}): use {_RATE_FORMS}")
    amount = float(match["amount"])
    window = float(match["count"] or 1) * _UNIT_SECONDS[match["window"]]
    if not 0 < amount <= MAX_RATE_AMOUNT or not MIN_WINDOW <= window <= MAX_WINDOW:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)}: the amount must be more than 0 and at "
            f"most {MAX_RATE_AMOUNT:.0e}, the window from 1ms to 7 days ({_RATE_FORMS})")
    unit = match["unit"]
    count = match["count"]
    text = (f"{_number(amount)}{' ' + unit if unit else ''}/"
            f"{_number(float(count)) if count else ''}{match['window']}")
    return RateLimit(text, amount, window, unit)


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def concurrency(value: Any, *, what: str) -> int | None:
    """A valid concurrency limit: a whole number of running jobs from 1, or None."""
    return whole_number_or_none(value, what=what, unit="running jobs", none="no limit")


def whole_number_or_none(value: Any, *, what: str, unit: str, none: str) -> int | None:
    """``value`` if it is a whole number from 1 to 2^31-1 (``unit`` of them), or None;
    anything else raises one line naming ``what`` and what None means."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INTEGER:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)} ({a_type(value)}): a whole number of {unit} "
            f"from 1 to {MAX_INTEGER}, or None for {none}")
    return value


def limit_key(value: Any, *, what: str) -> str | None:
    """A valid concurrency or rate-limit key: 1 to 200 printable characters, or None."""
    if value is None:
        return None
    if (not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LENGTH
            or not value.isprintable()):
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)} ({a_type(value)}): a string of 1 to "
            f"{MAX_KEY_LENGTH} printable characters, e.g. 'tenant:42'")
    return value


def cost(value: Any) -> float | None:
    """A valid cost estimate: a finite number of units from 0 to 1e9, or None (1 unit)."""
    if value is None:
        return None
    return _units(value, "cost", "the estimate a limit by cost charges at claim")


def charge_units(value: Any) -> float:
    """A valid ``ctx.charge()`` amount: a finite number of units from 0 to 1e9."""
    return _units(value, "ctx.charge() units", "what the job used of its cost limit")


def _units(value: Any, what: str, meaning: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 <= value <= MAX_RATE_AMOUNT:
        raise ConfigurationError(
            f"invalid {what} {short_repr(value)} ({a_type(value)}): a finite number of units "
            f"from 0 to {MAX_RATE_AMOUNT:.0e}, {meaning}")
    return float(value)


@dataclass(frozen=True)
class TaskLimits:
    """A task's limits, from ``@q.task(global_concurrency=, key_concurrency=, rate_limit=)``."""

    global_concurrency: int | None = None
    key_concurrency: int | None = None
    rate: RateLimit | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.global_concurrency, self.key_concurrency,
                                            self.rate))

    def to_dict(self) -> dict[str, Any]:
        """As ``@q.task`` takes them (and ``pgq queues list --json`` shows them)."""
        return {"global_concurrency": self.global_concurrency,
                "key_concurrency": self.key_concurrency,
                "rate_limit": None if self.rate is None else self.rate.text}


def declare_task_limits(queries: Queries, limits: dict[str, TaskLimits]) -> Plan[None]:
    """Write the limits of a worker's tasks: a row for each limited task, none for the
    others (a limit removed from the code goes away when a worker with that code starts)."""
    given = [
        {"task": task, "global_concurrency": lim.global_concurrency,
         "key_concurrency": lim.key_concurrency,
         **(lim.rate.as_params() if lim.rate else
            {"rate_limit": None, "rate_amount": None, "rate_window": None, "rate_unit": None})}
        for task, lim in sorted(limits.items()) if lim
    ]
    yield Statement(queries.declare_task_limits,
                    {"limits": dumps(given), "tasks": sorted(limits)}, fetch="rowcount")


@dataclass(frozen=True)
class Pause:
    """A scope paused by ``RateLimited``: ``task:T``, ``queue:Q`` or ``key:K``."""

    scope: str
    until: datetime


def list_task_limits(queries: Queries) -> Plan[tuple[dict[str, TaskLimits], list[Pause]]]:
    """Every task's limits, and the scopes paused now."""
    rows = yield Statement(queries.select_task_limits, {}, fetch="all")
    paused = yield Statement(queries.select_paused_scopes, {}, fetch="all")
    limits = {
        row["task"]: TaskLimits(row["global_concurrency"], row["key_concurrency"],
                                rate_limit(row["rate_limit"]))
        for row in rows
    }
    return limits, [Pause(row["scope"], row["paused_until"]) for row in paused]
