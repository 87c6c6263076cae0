"""Maintenance any worker may run: the rescuer, the pruner, stale worker rows.

There is no leader. Every worker runs these on a jittered timer; ``FOR UPDATE SKIP
LOCKED`` in the statements means two workers sweeping at once split the rows instead of
fighting over them.

* Rescuer (every ``rescue_interval``): running jobs whose lease expired go back to
  ``queued`` at once — the attempt counts as failed — or to ``dead_jobs`` when their
  attempts are spent. With the default 1 s interval a lease is rescued within lease + ~1 s.
* Pruner (every ``prune_interval``): succeeded and cancelled rows past ``result_ttl``,
  with their checkpointed steps (``job_steps``).
* Old counts (with the pruner): ``job_counts`` rows older than ``counts.RETENTION``.
* Stale workers: ``workers`` rows whose own lease ran out more than ``grace`` ago.
* Lost results (with the pruner): a workflow step marked succeeded by
  ``ctx.transaction()`` whose worker died before recording its value gets null, so the
  steps after it run (``queries.settle_lost_results``).
* Limit state (with the pruner): rate buckets and pauses whose times have passed.
* Priority aging (with the rescuer): queues with ``priority_aging`` whose step has
  passed get the priority of their waiting jobs raised (``queries.age_priorities``).

The timings are in ``worker/timings.py``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import RESULT_GRACE, Queries
from pgqueue.worker import timings
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Connect
from pgqueue.worker.counts import RETENTION
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")

RESCUE_BATCH = 1000
PRUNE_BATCH = 5000


class Maintenance(Service):
    """Rescue expired leases, prune finished jobs, remove stale worker rows."""

    name = "maintenance"
    failure = "Maintenance failed ({error}); retrying in {delay:.1f} s."

    def __init__(
        self,
        *,
        connect: Connect,
        queries: Queries,
        rescue_interval: float = timings.DEFAULT_RESCUE_INTERVAL,
        prune_interval: float = timings.DEFAULT_PRUNE_INTERVAL,
        stale_worker_grace: float = timings.STALE_WORKER_GRACE,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff(base=0.5, cap=10.0))
        self._queries = queries
        self.rescue_interval = rescue_interval
        self.prune_interval = prune_interval
        self.stale_worker_grace = stale_worker_grace
        self._next_prune = time.monotonic() + random.uniform(0, prune_interval / 2)

    async def wait(self) -> None:
        jitter = timings.MAINTENANCE_JITTER
        await asyncio.sleep(self.rescue_interval * random.uniform(1 - jitter, 1 + jitter))

    async def run_once(self) -> None:
        await self.rescue()
        await self.age_priorities()
        if time.monotonic() >= self._next_prune:
            await self.prune()
            self._next_prune = time.monotonic() + self.prune_interval

    async def rescue(self) -> int:
        """Re-queue (or bury) jobs whose lease expired; returns how many it handled."""
        conn = await self.connection()
        handled = 0
        while True:
            rescued = await self._queries.rescue_expired_jobs.one(conn, {"limit": RESCUE_BATCH})
            if rescued.requeued or rescued.dead or rescued.cancelled:
                logger.warning(
                    "Rescued jobs with expired leases: %d back to queued, %d dead, %d cancelled.",
                    rescued.requeued, rescued.dead, rescued.cancelled,
                )
            if rescued.released:
                logger.info("%d held job(s) whose worker stopped heartbeating before it "
                            "started them: back to the queue.", rescued.released)
            if rescued.queues:
                await conn.execute(self._queries.notify_ready, {
                    "channel": notify_channel(self._queries.schema), "queues": rescued.queues,
                })
            batch = rescued.requeued + rescued.dead + rescued.cancelled + rescued.released
            handled += batch
            if batch < RESCUE_BATCH:
                return handled

    async def age_priorities(self) -> int:
        """Raise the priority of ready jobs in queues with ``priority_aging`` whose step
        has passed (one worker per step, whichever gets there first); returns how many."""
        conn = await self.connection()
        aged = await self._queries.age_priorities.one(conn, {})
        if aged.raised:
            logger.debug("Priority aging: raised %d waiting job(s).", aged.raised)
        return aged.raised

    async def prune(self) -> int:
        """Delete finished rows past their result_ttl (and their steps), and stale worker
        rows."""
        conn = await self.connection()
        pruned = 0
        while True:
            batch = await self._queries.prune_finished_jobs.one(conn, {"limit": PRUNE_BATCH})
            pruned += batch.pruned
            if batch.pruned < PRUNE_BATCH:
                break
        await conn.execute(self._queries.prune_job_counts, {"retention": RETENTION})
        settled = await conn.execute(self._queries.settle_lost_results,
                                     {"grace": RESULT_GRACE})
        if settled.rowcount:
            logger.warning("%d workflow step(s) lost their return value (their worker stopped "
                           "just after ctx.transaction() committed): the steps after them "
                           "receive null.", settled.rowcount)
        # Rate buckets and pauses whose times have passed (limits.py): the table holds the
        # scopes in use, not one row per key ever seen.
        await conn.execute(self._queries.prune_limit_state)
        stale = await self._queries.delete_stale_workers.all(
            conn, {"grace": self.stale_worker_grace})
        for worker in stale:
            logger.warning("Removed worker %s: it stopped heartbeating.", worker.id)
        if pruned:
            logger.info("Pruned %d finished job(s) past their result_ttl.", pruned)
        return pruned
