"""The scheduler: enqueues the jobs of periodic schedules at their ticks (table
``schedules``; ``pgqueue/schedules.py`` describes the two kinds of schedule).

Every worker runs one; there is no leader. At a tick each worker that wakes for it runs
``enqueue_schedule_tick``, which takes the tick only if the row still holds it: exactly
one statement inserts the job (``run_at`` = the tick) and moves the row to the next
tick; the others match nothing. The service runs beside the producer, on the
maintenance service's connection (borrowed: see :meth:`Scheduler.close`), so a tick is
enqueued even while every slot of the worker is busy, the producer's claims pay nothing
for it, and a worker needs no extra connection.

When it sleeps: until the next active tick, read from the table with the database's
clock (so a host whose clock is off still wakes when the database says the tick is due);
a change to the table (a schedule added, paused, resumed, its cron changed) sends
``,schedules`` on the wake-up channel and the listener wakes it to read the table
again; it also reads it every ``timings.SCHEDULE_RECHECK`` (the poll interval without a
listener) in case a notification was lost. Workers with code schedules renew their
declaration every heartbeat interval.

Missed ticks are not backfilled: a tick due while no worker ran is enqueued once when a
worker next runs (the first missed tick, ``run_at`` in the past) and the schedule then
moves to its first tick after *now*.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import psycopg

from pgqueue.cron import parse_cron
from pgqueue.db.queries import DueSchedule, Queries
from pgqueue.errors import ConfigurationError, first_line
from pgqueue.queues import QUEUE_FULL
from pgqueue.schedules import PeriodicSpec, tick_key
from pgqueue.serialization import dumps
from pgqueue.worker import timings
from pgqueue.worker.backoff import Backoff, is_retryable
from pgqueue.worker.connections import Connect
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")

# Due schedules read per statement (more are taken by the next round, at once).
DUE_BATCH = 100
# The shortest sleep: a due tick that another worker holds right now (SKIP LOCKED) is
# looked at again after this, not in a busy loop.
MIN_SLEEP = 0.05


class Scheduler(Service):
    """Declares this worker's code schedules and enqueues every active schedule's ticks."""

    name = "scheduler"
    failure = "Enqueuing periodic jobs failed ({error}); retrying in {delay:.1f} s."

    def __init__(
        self,
        *,
        connect: Connect,
        queries: Queries,
        specs: list[PeriodicSpec],
        lease: float,
        recheck: float = timings.SCHEDULE_RECHECK,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff(base=0.5, cap=10.0))
        self._queries = queries
        self._specs = specs
        self._names = [spec.name for spec in specs]
        self._lease = lease
        self._renew_every = timings.heartbeat_interval(lease)
        self._recheck = recheck
        self._declared = False
        self._renew_at = 0.0  # monotonic time of the next renewal
        self._due_at = 0.0  # monotonic time of the next round
        self._wake = asyncio.Event()
        # Ticks this worker enqueued (the others' are theirs): for logs and tests.
        self.enqueued = 0

    async def close(self) -> None:
        """Forget the connection without closing it: it is the maintenance service's,
        which closes it when it stops. After a failed round the next one asks for it
        again, and gets a new one if the failure broke it (psycopg marks a lost
        connection closed, and the maintenance service then reconnects)."""
        self._conn = None

    def wake(self) -> None:
        """The schedules changed (a NOTIFY), or wake-ups may have been lost (the listener
        reconnected): read the table again now."""
        self._wake.set()

    async def wait(self) -> None:
        deadline = self._due_at
        if self._specs:
            deadline = min(deadline, self._renew_at)
        delay = deadline - time.monotonic()
        if delay <= 0 or self._wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()

    async def run_once(self) -> None:
        # Cleared before reading: a change notified while this round runs wakes the next.
        self._wake.clear()
        conn = await self.connection()
        if self._specs and (not self._declared or time.monotonic() >= self._renew_at):
            await self._declare(conn)
            self._renew_at = time.monotonic() + self._renew_every
        # A full batch may hide more due ticks: read again, unless this round took none
        # of them (other workers hold them right now: MIN_SLEEP, then look again).
        while await self._enqueue_due(conn) == DUE_BATCH:
            pass
        row = await self._queries.next_schedule_due.one(conn, {})
        wait = self._recheck if row.seconds is None else min(row.seconds, self._recheck)
        self._due_at = time.monotonic() + max(MIN_SLEEP, wait)

    async def _declare(self, conn: psycopg.AsyncConnection[object]) -> None:
        """Declare this worker's code schedules (at start), or renew the declaration."""
        if self._declared:
            await conn.execute(self._queries.renew_schedules,
                               {"names": self._names, "lease": self._lease})
            return
        # The first tick of a new schedule follows the database's clock, which the
        # ticks are compared with, not this host's.
        now = (await self._queries.database_clock.one(conn, {})).now
        declared = await self._queries.declare_schedules.all(conn, {
            "schedules": dumps([spec.declaration(now) for spec in self._specs]),
            "lease": self._lease,
        })
        taken = set(self._names) - {row.name for row in declared}
        for name in sorted(taken):
            logger.warning("Code schedule %r is not declared: a run-time schedule of that "
                           "name exists (pgq periodic remove %s, or rename one of them).",
                           name, name)
        self._declared = True
        logger.info("Declared %d code schedule(s): %s.", len(declared),
                    ", ".join(sorted(row.name for row in declared)))

    async def _enqueue_due(self, conn: psycopg.AsyncConnection[object]) -> int:
        """Enqueue the ticks due now; returns how many schedules were due, or 0 when this
        worker took none of them."""
        due = await self._queries.select_due_schedules.all(conn, {"limit": DUE_BATCH})
        taken = 0
        for schedule in due:
            taken += await self._enqueue_tick(conn, schedule)
        return len(due) if taken else 0

    async def _enqueue_tick(
        self, conn: psycopg.AsyncConnection[object], schedule: DueSchedule
    ) -> int:
        """Enqueue one due tick; returns 1 if this worker took it (or skipped or paused
        the schedule), 0 if another worker did."""
        tick = schedule.next_run_at
        try:
            cron = parse_cron(schedule.cron, schedule.tz)
        except ConfigurationError as exc:
            return await self._pause_broken(conn, schedule.name, str(exc))
        # Missed ticks are not backfilled: after the due one, the first tick after now.
        params = {"name": schedule.name, "tick": tick,
                  "next_run_at": cron.next_after(max(schedule.now, tick))}
        try:
            result = await self._queries.enqueue_schedule_tick.one(
                conn, params | {"key": tick_key(schedule.name, tick)})
        except psycopg.Error as exc:
            if is_retryable(exc):
                raise
            if exc.sqlstate != QUEUE_FULL:
                # The row makes a job the jobs table refuses (edited in SQL: meta not an
                # object, max_attempts 0...): a worker must not die of it, nor retry it.
                return await self._pause_broken(conn, schedule.name, first_line(exc))
            result = await self._queries.skip_schedule_tick.one(conn, params)
            if result.advanced:
                logger.warning("Schedule %r: tick %s skipped: %s.", schedule.name,
                               tick.isoformat(), exc.diag.message_primary or exc)
            return result.advanced
        if result.advanced:
            self.enqueued += 1
            lag = (schedule.now - tick).total_seconds()  # both by the database's clock
            logger.info("Schedule %r: enqueued job %s for tick %s (%.3f s after it).",
                        schedule.name, result.job_id, tick.isoformat(), lag,
                        extra={"schedule": schedule.name, "job_id": result.job_id})
        return result.advanced

    async def _pause_broken(
        self, conn: psycopg.AsyncConnection[object], name: str, problem: str
    ) -> int:
        """Pause a schedule no tick of which can be enqueued (only SQL can store such a
        row): every worker stops tripping over it, and the error says what to fix."""
        await conn.execute(self._queries.pause_schedule, {"name": name})
        logger.error("Schedule %r paused: %s. Fix it, then pgq periodic resume %s.",
                     name, problem, name)
        return 1
