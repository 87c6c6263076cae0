"""Periodic jobs: schedules declared in code or added at run time (table ``schedules``,
revision 0008_schedules).

Two kinds of schedule share the table:

* **code** (``@q.periodic("*/5 * * * *")`` above ``@q.task``): a :class:`PeriodicSpec` in
  ``Queue.periodic_tasks``. Each worker declares the ones it knows when it starts
  (``queries.declare_schedules``) and keeps them active while it runs
  (``queries.renew_schedules``, every heartbeat interval); one that no live worker
  declares any more is *inactive*: shown, never enqueued.
* **runtime** (``q.schedule(...)``, ``pgq periodic add``): stored with its arguments,
  active until removed.

Any worker enqueues any active schedule's ticks (``worker/scheduler.py``), exactly once
per tick however many run: ``queries.enqueue_schedule_tick`` takes the tick only if the
row still holds it, inserts the job and advances the row in one statement. The plans
below are what ``Queue.schedule``, ``unschedule``, ``pause_schedule``,
``resume_schedule`` and ``schedules`` run, and ``pgq periodic`` calls those.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pgqueue.bounds import name_problem, short_repr
from pgqueue.cron import Cron, parse_cron
from pgqueue.db.plans import Plan, Statement
from pgqueue.db.queries import Queries
from pgqueue.errors import ConfigurationError, ScheduleNotFound
from pgqueue.options import JobOptions
from pgqueue.serialization import loads

__all__ = [
    "SCHEDULE_OPTIONS", "PeriodicSpec", "ScheduleInfo", "database_now", "delete_schedule",
    "list_schedules", "pause_schedule", "resume_schedule", "schedule_name", "tick_key",
    "upsert_schedule",
]

# The job options a schedule carries (the tick's job gets them; run_in, run_at and
# idempotency_key are the tick's own).
SCHEDULE_OPTIONS: Final = frozenset(
    {"queue", "priority", "max_attempts", "timeout", "result_ttl", "meta"})

MAX_SCHEDULE_NAME_LENGTH: Final = 200


def schedule_name(value: Any) -> str:
    """A valid schedule name (1 to 200 printable characters), or ConfigurationError."""
    problem = name_problem(value, max_length=MAX_SCHEDULE_NAME_LENGTH)
    if problem:
        raise ConfigurationError(
            f"invalid schedule name {short_repr(value)}: {problem} (a schedule name is 1 to "
            f"{MAX_SCHEDULE_NAME_LENGTH} printable characters, e.g. 'nightly-report')")
    return value  # type: ignore[no-any-return]


def tick_key(name: str, tick: datetime) -> str:
    """The idempotency key of a tick's job: ``periodic:<name>:<tick in UTC, ISO 8601>``."""
    return f"periodic:{name}:{tick.astimezone(UTC).isoformat()}"


@dataclass(frozen=True)
class PeriodicSpec:
    """A schedule declared in code: ``@q.periodic`` above a task that takes no arguments."""

    name: str
    cron: Cron
    task: str
    options: JobOptions

    def declaration(self, now: datetime) -> dict[str, Any]:
        """This schedule as a row of ``declare_schedules``' JSON, its next tick after
        ``now`` computed here (used when the row is new or its timing changed)."""
        return {
            "name": self.name, "cron": self.cron.expression, "tz": self.cron.tz,
            "task": self.task, "queue": self.options.queue,
            "priority": self.options.priority, "max_attempts": self.options.max_attempts,
            "timeout": self.options.timeout, "result_ttl": self.options.result_ttl,
            "meta": loads(self.options.meta),
            "next_run_at": self.cron.next_after(now).isoformat(),
        }


@dataclass(frozen=True)
class ScheduleInfo:
    """One schedule as stored, with whether it is active (a run-time schedule, or a code
    one some live worker declares)."""

    name: str
    cron: str
    tz: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    result_ttl: int
    meta: dict[str, Any]
    source: str  # "code" or "runtime"
    paused: bool
    active: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    declared_until: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ScheduleInfo:
        return cls(**row)

    @property
    def state(self) -> str:
        """``paused``, ``inactive`` (a code schedule no live worker declares) or ``active``."""
        if self.paused:
            return "paused"
        return "active" if self.active else "inactive"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: an object of ``pgq periodic list --json`` (the table's columns,
        plus ``active`` and ``state``)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["state"] = self.state
        return data


def list_schedules(queries: Queries, name: str | None = None) -> Plan[list[ScheduleInfo]]:
    """Every schedule (or only ``name``), by name."""
    rows = yield Statement(queries.select_schedules, {"name": name}, fetch="all")
    return [ScheduleInfo.from_row(row) for row in rows]


def _one(queries: Queries, name: str) -> Plan[ScheduleInfo]:
    found = yield from list_schedules(queries, name)
    if not found:
        raise ScheduleNotFound(f"no schedule named {name!r} (pgq periodic list shows them)")
    return found[0]


def database_now(queries: Queries) -> Plan[datetime]:
    """The database's ``now()``: the clock every tick is compared with."""
    row = yield Statement(queries.database_clock.sql, {}, fetch="one")
    now: datetime = row["now"]
    return now


def upsert_schedule(
    queries: Queries, *, name: str, cron: Cron, task: str, args: str, kwargs: str,
    options: JobOptions,
) -> Plan[ScheduleInfo]:
    """Add the run-time schedule ``name`` or replace its definition (it starts again from
    its next tick after now, by the database's clock); a code schedule of that name is
    refused."""
    now = yield from database_now(queries)
    params = {
        "name": name, "cron": cron.expression, "tz": cron.tz, "task": task, "args": args,
        "kwargs": kwargs, "queue": options.queue, "priority": options.priority,
        "max_attempts": options.max_attempts, "timeout": options.timeout,
        "result_ttl": options.result_ttl, "meta": options.meta,
        "next_run_at": cron.next_after(now),
    }
    written = yield Statement(queries.upsert_schedule, params, fetch="one")
    if written is None:
        raise ConfigurationError(
            f"schedule {name!r} is declared in code (@q.periodic): choose another name for "
            "a run-time schedule, or change it in the code")
    return (yield from _one(queries, name))


def delete_schedule(queries: Queries, name: str) -> Plan[str]:
    """Delete the schedule ``name``; returns its source (``code`` or ``runtime``)."""
    row = yield Statement(queries.delete_schedule, {"name": name}, fetch="one")
    if row is None:
        raise ScheduleNotFound(f"no schedule named {name!r} (pgq periodic list shows them)")
    return str(row["source"])


def pause_schedule(queries: Queries, name: str) -> Plan[ScheduleInfo]:
    """Pause ``name`` (no tick is enqueued until it is resumed); its state afterwards."""
    yield Statement(queries.pause_schedule, {"name": name}, fetch="rowcount")
    return (yield from _one(queries, name))


def resume_schedule(queries: Queries, name: str) -> Plan[ScheduleInfo]:
    """Resume ``name`` from its next tick after now, by the database's clock (ticks
    missed while it was paused are not enqueued); its state afterwards."""
    while True:
        info = yield from _one(queries, name)
        if not info.paused:
            return info
        cron = parse_cron(info.cron, info.tz)
        now = yield from database_now(queries)
        changed = yield Statement(queries.resume_schedule, {
            "name": name, "cron": info.cron, "tz": info.tz,
            "next_run_at": cron.next_after(now),
        }, fetch="rowcount")
        if changed:
            return (yield from _one(queries, name))
        # Its cron or time zone changed meanwhile (or someone else resumed it): again.
