"""Queues as objects: their state and settings (table ``queues``, revision 0006_queues).

A queue exists as soon as a job names it; a row in ``queues`` is only needed to change
its defaults (running, unbounded). ``Queue.pause_queue``, ``resume_queue``,
``set_queue`` and ``queues`` run the plans below, and ``pgq queues`` calls those, so the
API, the CLI and SQL agree. Workers read ``paused`` in every claim statement and the
insert trigger reads ``max_queued`` (see the revision's docstring for how).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from pgqueue.bounds import short_repr
from pgqueue.db.names import LIMITS_CHANGED, notify_channel
from pgqueue.db.plans import Plan, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ConfigurationError
from pgqueue.limits import whole_number_or_none
from pgqueue.settings import parse_duration

__all__ = ["DEFAULT_SETTINGS", "QUEUE_FULL", "UNSET", "QueueInfo", "Unset", "list_queues",
           "max_queued", "pause_queue", "priority_aging", "queue_info", "set_settings"]


class Unset(Enum):
    """The type of :data:`UNSET`: a setting not given (None means "clear it")."""

    UNSET = "unset"


UNSET: Final = Unset.UNSET

# The shortest and longest priority-aging steps (the column's CHECK says the same).
MIN_AGING_STEP: Final = 0.1
MAX_AGING_STEP: Final = 365 * 86400

# The SQLSTATE the insert trigger raises for an enqueue beyond a queue's max_queued.
QUEUE_FULL = "PQ001"

# The columns of set_queue_settings, and those that are limits (pgqueue/limits.py).
SETTING_COLUMNS = ("max_queued", "priority_aging", "concurrency", "key_concurrency",
                   "rate_limit", "rate_amount", "rate_window", "rate_unit", "fair")
LIMIT_COLUMNS = frozenset(SETTING_COLUMNS[2:])

# A queue's settings when nobody set any (QueueInfo.settings of a queue without a row):
# also what Queue.set_queue(name, **DEFAULT_SETTINGS) puts back.
DEFAULT_SETTINGS: Final[dict[str, Any]] = {
    "max_queued": None, "priority_aging": None, "concurrency": None, "key_concurrency": None,
    "rate_limit": None, "fair": False}

# The counts of QueueInfo.counts, in the order tables show them.
COUNTS = ("queued", "scheduled", "retrying", "waiting", "running", "succeeded", "cancelled",
          "dead")


@dataclass(frozen=True)
class QueueInfo:
    """One queue: its state, its settings, and its jobs by API status."""

    name: str
    paused: bool
    max_queued: int | None  # None: unbounded
    counts: dict[str, int]  # every key of COUNTS
    oldest_queued_age_seconds: float | None  # None: no job of this queue is ready
    priority_aging: float | None = None  # seconds per priority step; None: no aging
    # Limits across the cluster (pgqueue/limits.py); None: no limit.
    concurrency: int | None = None
    key_concurrency: int | None = None
    rate_limit: str | None = None
    fair: bool = False

    @property
    def settings(self) -> dict[str, Any]:
        """The queue's settings, as ``Queue.set_queue`` takes them."""
        return {"max_queued": self.max_queued, "priority_aging": self.priority_aging,
                "concurrency": self.concurrency, "key_concurrency": self.key_concurrency,
                "rate_limit": self.rate_limit, "fair": self.fair}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: an object of ``pgq queues list --json``."""
        return {"name": self.name, "paused": self.paused, "settings": self.settings,
                "counts": dict(self.counts),
                "oldest_queued_age_seconds": self.oldest_queued_age_seconds}


def list_queues(queries: Queries, name: str | None = None) -> Plan[list[QueueInfo]]:
    """Every queue with jobs or settings (or only ``name``), ordered by name."""
    rows = yield Statement(queries.select_queues, {"name": name}, fetch="all")
    return [
        QueueInfo(name=row["name"], paused=row["paused"], max_queued=row["max_queued"],
                  counts={key: int(row[key]) for key in COUNTS},
                  oldest_queued_age_seconds=row["oldest_queued_age_seconds"],
                  priority_aging=row["priority_aging"], concurrency=row["concurrency"],
                  key_concurrency=row["key_concurrency"], rate_limit=row["rate_limit"],
                  fair=row["fair"])
        for row in rows
    ]


def pause_queue(queries: Queries, name: str, *, paused: bool) -> Plan[QueueInfo]:
    """Pause or resume ``name``; its state afterwards."""
    yield Statement(queries.pause_queue, {"name": name, "paused": paused}, fetch="rowcount")
    return (yield from queue_info(queries, name))


def set_settings(queries: Queries, name: str, changes: dict[str, Any]) -> Plan[QueueInfo]:
    """Give ``name`` the settings in ``changes`` (None clears one; the others keep their
    value), in one statement; its state afterwards."""
    params = dict.fromkeys(SETTING_COLUMNS) | {"name": name} | changes
    yield Statement(queries.set_queue_settings, params | {"given": list(changes)},
                    fetch="rowcount")
    if LIMIT_COLUMNS & set(changes):
        # Every worker looks at its limits again at once (see Producer.limits_changed).
        yield Statement(queries.notify_ready,
                        {"channel": notify_channel(queries.schema), "queues": LIMITS_CHANGED},
                        fetch="rowcount")
    return (yield from queue_info(queries, name))


def queue_info(queries: Queries, name: str) -> Plan[QueueInfo]:
    """``name``'s state; a queue without jobs or settings has the defaults."""
    found = yield from list_queues(queries, name)
    if found:
        return found[0]
    return QueueInfo(name, False, None, dict.fromkeys(COUNTS, 0), None)


def priority_aging(value: Any) -> float | None:
    """A valid ``priority_aging``: seconds per step from 0.1 to a year (or ``"30s"``,
    ``"5m"``, a timedelta), or None (no aging)."""
    if value is None:
        return None
    seconds = parse_duration(value, what="priority_aging")
    if not MIN_AGING_STEP <= seconds <= MAX_AGING_STEP:
        raise ConfigurationError(
            f"invalid priority_aging {short_repr(value)}: seconds per priority step from "
            f"{MIN_AGING_STEP:g} to {MAX_AGING_STEP} (a year), e.g. 60 or '5m', or None for "
            "no aging")
    return seconds


def max_queued(value: Any) -> int | None:
    """A valid ``max_queued``: a whole number of jobs from 1, or None (unbounded)."""
    return whole_number_or_none(value, what="max_queued", unit="jobs", none="no bound")
