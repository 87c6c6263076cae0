"""The heartbeat: keeps this worker's row and leases alive, and learns what changed.

One statement every ``lease / 3`` seconds (the timings are in ``worker/timings.py``)
upserts the ``workers`` row and extends the lease of every job this worker holds — the
(id, lease token) pairs of its ledger (held, executing) and of the outcomes still to be
written, and only those. The rows it returns are the jobs the database still gives us: a
running execution missing from them, or held under another lease token, lost its lease
(another worker may be running it now) and is stopped; a held job missing from them is
forgotten; one with ``cancel_requested`` set is cancelled.

A row the database says this worker holds and the worker does not know is not renewed:
its claim or its outcome was lost (a failover to a replica that had not received them, a
restore to an earlier point). ``give_back_orphaned_jobs`` returns it to the queue at
once with a last_error that says so, rather than letting a live worker's heartbeats keep
it ``running`` for ever. While heartbeats fail the worker is *unhealthy* and claims
nothing new: it cannot promise to keep a lease it cannot renew. After the leases, it adds
the outcomes the worker counted since the last beat to ``job_counts``
(``worker/counts.py``), when there are any.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import Queries
from pgqueue.worker import timings
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Connect, answered
from pgqueue.worker.counts import OutcomeCounts
from pgqueue.worker.executor import Execution
from pgqueue.worker.ledger import Ledger
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
        ledger: Ledger,
        holdings: Callable[[], list[tuple[int, int]]],
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
        self._ledger = ledger
        # The outcomes not yet written (the completer's): those jobs are still ours.
        self._holdings = holdings
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
        ledger = self._ledger
        candidates = [e for e in ledger.executions.values() if e.started < started]
        waiting = [h.job for h in ledger.held_jobs() if h.since < started]
        pairs = orjson.dumps(ledger.holdings() + self._holdings()).decode()
        async with answered("a heartbeat"):
            rows = await self._queries.heartbeat.all(
                conn, self._params | {"stuck": self._stuck(), "held": pairs})
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
        lost = {job.id for job in waiting
                if (state := held.get(job.id)) is None or state.lease_token != job.token}
        if lost:
            # Cancelled, released or taken back while held: never started here.
            ledger.drop_held(lost)
            logger.info("%d held job(s) are no longer this worker's (cancelled or taken "
                        "back before they started).", len(lost))
        await self._give_back_orphans(conn, pairs)
        if self._counts:
            # Throughput (job_counts): what this worker recorded since the last beat.
            await self._counts.write(conn, self._queries, self._params["worker_id"])

    async def _give_back_orphans(self, conn: Any, pairs: str) -> None:
        """Give back the jobs the database says this worker holds and it does not know
        (see the module docstring): not renewed for a heartbeat interval, so that a claim
        committing while this heartbeat ran is not taken for one."""
        async with answered("giving back jobs this worker no longer holds"):
            given = await self._queries.give_back_orphaned_jobs.one(conn, {
                "worker_id": self._params["worker_id"], "held": pairs, "lease": self.lease,
                "grace": self.interval,
            })
            if given.requeued or given.dead or given.cancelled or given.released:
                logger.warning(
                    "The database says this worker holds %d job(s) it has no record of (their "
                    "claim or outcome was lost: a failover to a replica that had not "
                    "received them, or a restore to an earlier point): %d back to queued, "
                    "%d dead, %d cancelled, %d held ones back to the queue.",
                    given.requeued + given.dead + given.cancelled + given.released,
                    given.requeued, given.dead, given.cancelled, given.released)
            if given.queues:
                await conn.execute(self._queries.notify_ready, {
                    "channel": notify_channel(self._queries.schema), "queues": given.queues,
                })

    def failed(self, error: str, delay: float) -> str:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        unhealthy = "" if self.healthy else " Not claiming new jobs until it works."
        return f"Heartbeat failed ({error}); retrying in {delay:.2f} s.{unhealthy}"
