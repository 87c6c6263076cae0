"""The completer: the only writer of outcomes. Batches them and writes them fenced.

Outcomes collect for a moment (``flush_interval``) and go to the database in one
``complete_jobs`` statement. The statement changes a row only if it still carries the
``lease_token`` of the claim the outcome belongs to; an outcome whose row was not changed
is reported as a lost lease and dropped, never forced. On a lost connection the batch is
kept and written again after reconnecting: nothing the executor decided is forgotten while
the process lives.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import psycopg

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import Queries
from pgqueue.worker.backoff import Backoff, is_retryable
from pgqueue.worker.outcome import Outcome

logger = logging.getLogger("pgqueue.worker")

MAX_BATCH = 1000

# Session settings of the completer's connection. complete_jobs is prepared (psycopg
# does so after five executions) and PostgreSQL may then cache a generic plan. Made while
# the table is small, that plan seq-scans jobs, and it is kept as the table grows: the
# write then costs O(rows) per batch (measured 0.7 s -> 33 s per batch within two
# minutes of a 4,100 jobs/s soak, when worker_id was still part of the fence). With
# sequential scans off, the primary key is the only way to a row, whatever the
# statistics said when the plan was made. No other statement on this connection scans.
CONNECTION_OPTIONS = "-c enable_seqscan=off"


class Completer:
    """Collects outcomes from executions and records them in batches."""

    def __init__(
        self,
        *,
        connect: Callable[[], Any],
        queries: Queries,
        on_recorded: Callable[[Outcome, bool], None],
        flush_interval: float = 0.002,
    ) -> None:
        self._connect = connect
        self._queries = queries
        self._on_recorded = on_recorded
        self._flush_interval = flush_interval
        self._pending: dict[tuple[int, int], Outcome] = {}
        self._arrived = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._backoff = Backoff()
        self.recorded = 0

    def submit(self, outcome: Outcome) -> None:
        """Queue an outcome for the next batch (progress merges into a later final outcome)."""
        key = outcome.key
        previous = self._pending.get(key)
        if previous is not None:
            if previous.final and not outcome.final:
                # A final outcome already waits; carry the newer progress along with it.
                outcome = replace(previous, progress=outcome.progress)
            else:
                outcome = outcome.merged_with_progress(previous.progress)
        self._pending[key] = outcome
        self._idle.clear()
        self._arrived.set()

    @property
    def idle(self) -> bool:
        """True when no outcome waits to be written."""
        return self._idle.is_set()

    async def wait_idle(self) -> None:
        """Return once every submitted outcome has been written (or dropped as fenced)."""
        await self._idle.wait()

    async def run(self) -> None:
        """Write batches until cancelled; call :meth:`wait_idle` first to lose nothing."""
        try:
            while True:
                await self._arrived.wait()
                if self._flush_interval:
                    await asyncio.sleep(self._flush_interval)
                self._arrived.clear()
                while self._pending:
                    batch = self._take_batch()
                    await self._write_until_done(batch)
                if not self._pending:
                    self._idle.set()
        finally:
            if self._conn is not None:
                await self._conn.close()

    def _take_batch(self) -> list[Outcome]:
        keys = list(self._pending)[:MAX_BATCH]
        return [self._pending.pop(key) for key in keys]

    async def _write_until_done(self, batch: list[Outcome]) -> None:
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = await self._connect()
                await self._write(self._conn, batch)
                self._backoff.reset()
                return
            except Exception as exc:
                if not is_retryable(exc):
                    raise
                delay = self._backoff.next_delay()
                logger.warning("Could not record %d job outcome(s) (%s); retrying in %.2f s.",
                               len(batch), str(exc).strip().splitlines()[0] if str(exc).strip()
                               else type(exc).__name__, delay)
                if self._conn is not None:
                    await self._conn.close()
                    self._conn = None
                await asyncio.sleep(delay)

    async def _write(self, conn: psycopg.AsyncConnection[Any], batch: list[Outcome]) -> None:
        params = {
            "ids": [o.job_id for o in batch],
            "tokens": [o.token for o in batch],
            "kinds": [o.kind for o in batch],
            "results": [o.result for o in batch],
            "errors": [o.error for o in batch],
            "delays": [o.delay for o in batch],
            "progress": [o.progress for o in batch],
        }
        # Prepared after five executions like any statement; see CONNECTION_OPTIONS for
        # why its cached plan cannot degrade into a sequential scan.
        cursor = await conn.execute(self._queries["complete_jobs"], params)
        rows = await cursor.fetchall()
        changed = {(row[0], row[4]) for row in rows}
        ready_queues = sorted({row[2] for row in rows if row[1] in ("release", "retry", "snooze")
                               and row[3]})
        if ready_queues:
            await conn.execute(self._queries["notify_ready"], {
                "channel": notify_channel(self._queries.schema), "queues": ",".join(ready_queues),
            })
        for outcome in batch:
            recorded = outcome.key in changed
            if not recorded:
                logger.warning(
                    "Job %s (%s): the %s outcome of attempt %s was refused: this worker no "
                    "longer holds the job (lease lost).", outcome.job_id, outcome.task,
                    outcome.kind, outcome.attempt,
                    extra={"job_id": outcome.job_id, "task": outcome.task,
                           "attempt": outcome.attempt},
                )
            self.recorded += recorded
            self._on_recorded(outcome, recorded)
