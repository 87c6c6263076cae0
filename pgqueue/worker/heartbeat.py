"""The heartbeat: keeps this worker's row and leases alive, and learns what changed.

One statement every ``lease / 3`` seconds upserts the ``workers`` row and extends the
lease of every job this worker holds. The rows it returns are the jobs the database still
gives us: a running execution missing from them lost its lease (another worker may be
running it now) and is stopped; one with ``cancel_requested`` set is cancelled. While
heartbeats fail the worker is *unhealthy* and claims nothing new: it cannot promise to
keep a lease it cannot renew.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue.db.queries import Queries
from pgqueue.worker.backoff import Backoff, is_retryable
from pgqueue.worker.executor import Execution

logger = logging.getLogger("pgqueue.worker")


class Heartbeat:
    """Extends leases on a timer; reports lost leases and cancellation requests."""

    def __init__(
        self,
        *,
        connect: Callable[[], Any],
        queries: Queries,
        registration: dict[str, Any],
        lease: float,
        running: Callable[[], list[Execution]],
        on_lease_lost: Callable[[Execution], None],
        on_cancel_requested: Callable[[Execution], None],
    ) -> None:
        self._connect = connect
        self._queries = queries
        self._params = registration | {"lease": lease}
        self.lease = lease
        self.interval = lease / 3
        self._running = running
        self._on_lease_lost = on_lease_lost
        self._on_cancel_requested = on_cancel_requested
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._backoff = Backoff(base=0.2, cap=min(5.0, self.interval))
        self.last_success = time.monotonic()
        self.failing_since: float | None = None

    @property
    def healthy(self) -> bool:
        """False once leases may have expired because heartbeats failed for too long.

        The margin (one interval) stops claims *before* the leases we hold can expire.
        """
        return time.monotonic() - self.last_success < self.lease - self.interval

    async def beat(self) -> None:
        """One heartbeat; raises on database errors (the loop retries)."""
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
        started = time.monotonic()
        candidates = [e for e in self._running() if e.started < started]
        cursor = await self._conn.execute(self._queries["heartbeat"], self._params)
        held = {row[0]: (row[1], row[2]) for row in await cursor.fetchall()}
        if self.failing_since is not None:
            logger.info("Heartbeats work again, %.1f s after the last one that succeeded.",
                        started - self.last_success)
            self.failing_since = None
        self.last_success = started
        for execution in candidates:
            if execution.asyncio_task is not None and execution.asyncio_task.done():
                continue
            # ctx.transaction() holds the job's row locked (nobody can take it, and our
            # heartbeat waited for that lock) or has marked the job succeeded: missing
            # from the running rows, yet not lost. The commit's reply may reach the task
            # after this heartbeat's reply, so "open" counts too. Read in this order: on
            # commit the task sets completed_in_transaction before clearing
            # transaction_open.
            if execution.ctx.transaction_open or execution.ctx.completed_in_transaction:
                continue
            state = held.get(execution.job.id)
            if state is None or state[0] != execution.job.token:
                self._on_lease_lost(execution)
            elif state[1]:
                self._on_cancel_requested(execution)

    async def run(self) -> None:
        """Beat every interval until cancelled; on errors reconnect with backoff."""
        try:
            while True:
                await asyncio.sleep(self.interval)
                await self._beat_with_retries()
        finally:
            if self._conn is not None:
                await self._conn.close()

    async def _beat_with_retries(self) -> None:
        while True:
            try:
                await self.beat()
                self._backoff.reset()
                return
            except Exception as exc:
                if not is_retryable(exc):
                    raise
                if self.failing_since is None:
                    self.failing_since = time.monotonic()
                if self._conn is not None:
                    await self._conn.close()
                    self._conn = None
                delay = self._backoff.next_delay()
                logger.warning(
                    "Heartbeat failed (%s); retrying in %.2f s.%s",
                    str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                    delay, "" if self.healthy else " Not claiming new jobs until it works.",
                )
                await asyncio.sleep(delay)
