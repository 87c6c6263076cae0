"""Maintenance any worker may run: the rescuer, the pruner, stale worker rows.

There is no leader. Every worker runs these on a jittered timer; ``FOR UPDATE SKIP
LOCKED`` in the statements means two workers sweeping at once split the rows instead of
fighting over them.

* Rescuer (every ``rescue_interval``): running jobs whose lease expired go back to
  ``queued`` at once — the attempt counts as failed — or to ``dead_jobs`` when their
  attempts are spent. With the default 1 s interval a lease is rescued within lease + ~1 s.
* Pruner (every ``prune_interval``): succeeded and cancelled rows past ``result_ttl``.
* Stale workers: ``workers`` rows whose own lease ran out more than ``grace`` ago.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import psycopg

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import Queries
from pgqueue.worker.backoff import Backoff, is_retryable

logger = logging.getLogger("pgqueue.worker")

RESCUE_BATCH = 1000
PRUNE_BATCH = 5000


class Maintenance:
    """Rescue expired leases, prune finished jobs, remove stale worker rows."""

    def __init__(
        self,
        *,
        connect: Callable[[], Any],
        queries: Queries,
        rescue_interval: float = 1.0,
        prune_interval: float = 30.0,
        stale_worker_grace: float = 10.0,
    ) -> None:
        self._connect = connect
        self._queries = queries
        self.rescue_interval = rescue_interval
        self.prune_interval = prune_interval
        self.stale_worker_grace = stale_worker_grace
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._backoff = Backoff(base=0.5, cap=10.0)
        self._next_prune = time.monotonic() + random.uniform(0, prune_interval / 2)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
        return self._conn

    async def rescue(self) -> int:
        """Re-queue (or bury) jobs whose lease expired; returns how many it handled."""
        conn = await self._connection()
        handled = 0
        while True:
            cursor = await conn.execute(self._queries["rescue_expired_jobs"],
                                        {"limit": RESCUE_BATCH})
            row = await cursor.fetchone()
            assert row is not None
            requeued, dead, cancelled, queues = row
            if requeued or dead or cancelled:
                logger.warning(
                    "Rescued jobs with expired leases: %d back to queued, %d dead, %d cancelled.",
                    requeued, dead, cancelled,
                )
            if queues:
                await conn.execute(self._queries["notify_ready"], {
                    "channel": notify_channel(self._queries.schema), "queues": queues,
                })
            batch = int(requeued) + int(dead) + int(cancelled)
            handled += batch
            if batch < RESCUE_BATCH:
                return handled

    async def prune(self) -> int:
        """Delete finished rows past their result_ttl, and stale worker rows."""
        conn = await self._connection()
        pruned = 0
        while True:
            cursor = await conn.execute(self._queries["prune_finished_jobs"],
                                        {"limit": PRUNE_BATCH})
            pruned += cursor.rowcount
            if cursor.rowcount < PRUNE_BATCH:
                break
        cursor = await conn.execute(self._queries["delete_stale_workers"],
                                    {"grace": self.stale_worker_grace})
        for (worker_id,) in await cursor.fetchall():
            logger.warning("Removed worker %s: it stopped heartbeating.", worker_id)
        if pruned:
            logger.info("Pruned %d finished job(s) past their result_ttl.", pruned)
        return pruned

    async def run(self) -> None:
        """Sweep on a jittered timer until cancelled."""
        try:
            while True:
                await asyncio.sleep(self.rescue_interval * random.uniform(0.8, 1.2))
                try:
                    await self.rescue()
                    if time.monotonic() >= self._next_prune:
                        await self.prune()
                        self._next_prune = time.monotonic() + self.prune_interval
                    self._backoff.reset()
                except Exception as exc:
                    if not is_retryable(exc):
                        raise
                    if self._conn is not None:
                        await self._conn.close()
                        self._conn = None
                    delay = self._backoff.next_delay()
                    logger.warning("Maintenance failed (%s); retrying in %.1f s.",
                                   str(exc).strip().splitlines()[0] if str(exc).strip()
                                   else type(exc).__name__, delay)
                    await asyncio.sleep(delay)
        finally:
            if self._conn is not None:
                await self._conn.close()
