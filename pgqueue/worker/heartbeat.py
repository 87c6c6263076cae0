"""The heartbeat: keeps this worker's row and leases alive, and learns what changed.

One statement every ``lease / 3`` seconds (the timings are in ``worker/timings.py``)
upserts the ``workers`` row and extends the lease of every job this worker holds. The
rows it returns are the jobs the database still gives us: a running execution missing
from them, or held under another lease token, lost its lease (another worker may be
running it now) and is stopped; one with ``cancel_requested`` set is cancelled. While
heartbeats fail the worker is *unhealthy* and claims nothing new: it cannot promise to
keep a lease it cannot renew. After the leases, it adds the outcomes the worker counted
since the last beat to ``job_counts`` (``worker/counts.py``), when there are any.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from pgqueue.db.queries import Queries
from pgqueue.worker import timings
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Connect, answered
from pgqueue.worker.counts import OutcomeCounts
from pgqueue.worker.executor import Execution
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")


class Heartbeat(Service):
    """Extends leases on a timer; reports lost leases and cancellation requests."""

    name = "heartbeat"

    def __init__(
        self,
        *,
        connect: Connect,
        queries: Queries,
        registration: dict[str, Any],
        lease: float,
        running: Callable[[], list[Execution]],
        on_lease_lost: Callable[[Execution], None],
        on_cancel_requested: Callable[[Execution], None],
        stuck: Callable[[], int] = lambda: 0,
        counts: OutcomeCounts | None = None,
    ) -> None:
        self.lease = lease
        self.interval = timings.heartbeat_interval(lease)
        super().__init__(connect=connect, backoff=Backoff(
            base=timings.HEARTBEAT_RETRY_BASE,
            cap=min(timings.HEARTBEAT_RETRY_CAP, self.interval),
        ))
        self._queries = queries
        self._params = registration | {"lease": lease}
        self._running = running
        self._on_lease_lost = on_lease_lost
        self._on_cancel_requested = on_cancel_requested
        self._stuck = stuck
        self._counts = counts
        self.last_success = time.monotonic()
        self.failing_since: float | None = None

    @property
    def healthy(self) -> bool:
        """False once leases may have expired because heartbeats failed for too long.

        The margin (one interval) stops claims *before* the leases we hold can expire.
        """
        return time.monotonic() - self.last_success < timings.claims_allowed_for(self.lease)

    async def beat(self) -> None:
        """One heartbeat now; raises on database errors (:meth:`run` retries them)."""
        await self.round()

    async def wait(self) -> None:
        await asyncio.sleep(self.interval)

    async def run_once(self) -> None:
        conn = await self.connection()
        started = time.monotonic()
        candidates = [e for e in self._running() if e.started < started]
        async with answered("a heartbeat"):
            rows = await self._queries.heartbeat.all(
                conn, self._params | {"stuck": self._stuck()})
        held = {row.id: row for row in rows}
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
            if state is None or state.lease_token != execution.job.token:
                self._on_lease_lost(execution)
            elif state.cancel_requested:
                self._on_cancel_requested(execution)
        if self._counts:
            # Throughput (job_counts): what this worker recorded since the last beat.
            await self._counts.write(conn, self._queries, self._params["worker_id"])

    def failed(self, error: str, delay: float) -> str:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        unhealthy = "" if self.healthy else " Not claiming new jobs until it works."
        return f"Heartbeat failed ({error}); retrying in {delay:.2f} s.{unhealthy}"
