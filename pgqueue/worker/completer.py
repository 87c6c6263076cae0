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
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import psycopg

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import Queries
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Link, answered
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")

MAX_BATCH = 1000


def outcome_params(batch: list[Outcome]) -> dict[str, Any]:
    """``complete_jobs``'s parameters for a batch: the outcomes as one JSON array of
    ``[id, token, kind, result, error, delay, progress]``, and whether any is dead.

    Every text in it is storable: results and progress are pgqueue's own JSON text, and
    errors went through ``storable_text``.
    """
    return {
        "outcomes": orjson.dumps([
            (o.job_id, o.token, o.kind, o.result, o.error, o.delay, o.progress)
            for o in batch
        ]).decode(),
        "any_dead": any(o.kind == "dead" for o in batch),
    }


class Completer(Service):
    """Collects outcomes from executions and records them in batches.

    Its connection plans with sequential scans off (``connections.COMPLETIONS``).
    """

    name = "completer"

    def __init__(
        self,
        *,
        connect: Link,
        queries: Queries,
        on_recorded: Callable[[Outcome, bool], None],
        flush_interval: float = 0.002,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff())
        self._link = connect
        self._queries = queries
        self._on_recorded = on_recorded
        self._flush_interval = flush_interval
        self._pending: dict[tuple[int, int], Outcome] = {}
        # The batch being written: kept until a write succeeds, across reconnections.
        self._batch: list[Outcome] = []
        # How many of the outcomes in _pending and _batch are final (see unrecorded):
        # kept as a count, for the worker asks before every claim.
        self._finals = 0
        self._arrived = asyncio.Event()
        self._hurry = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, outcome: Outcome) -> None:
        """Queue an outcome for the next batch (progress merges into a later final outcome)."""
        key = outcome.key
        previous = self._pending.get(key)
        if previous is not None:
            if previous.final and not outcome.final:
                # A final outcome already waits; carry the newer progress along with it.
                outcome = previous._replace(progress=outcome.progress)
            else:
                outcome = outcome.merged_with_progress(previous.progress)
        if outcome.final and (previous is None or not previous.final):
            self._finals += 1
        self._pending[key] = outcome
        self._idle.clear()
        self._arrived.set()

    @property
    def unrecorded(self) -> int:
        """Final outcomes not yet committed. Their jobs still read ``running`` in SQL, so
        the worker counts them against its slots (what SQL shows stays true)."""
        return self._finals

    def unrecorded_in(self, queue: str) -> int:
        """:attr:`unrecorded` for one queue (per-queue slots)."""
        return sum(1 for o in self._unrecorded() if o.queue == queue)

    def _unrecorded(self) -> Iterator[Outcome]:
        yield from (o for o in self._pending.values() if o.final)
        yield from (o for o in self._batch if o.final)

    @property
    def idle(self) -> bool:
        """True when no outcome waits to be written."""
        return self._idle.is_set()

    async def wait_idle(self) -> None:
        """Return once every submitted outcome has been written (or dropped as fenced)."""
        await self._idle.wait()

    def hurry(self) -> None:
        """Write what is pending without waiting out ``flush_interval``: the producer has
        no free slot, and pending outcomes hold slots until they are committed."""
        if self._pending:
            self._hurry.set()

    async def wait(self) -> None:
        """Until outcomes arrive, then a moment more (``flush_interval``, cut short by
        :meth:`hurry`) so that the outcomes of executions ending together share a batch."""
        await self._arrived.wait()
        if self._flush_interval and not self._hurry.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_interval):
                    await self._hurry.wait()
        self._hurry.clear()
        self._arrived.clear()

    async def run_once(self) -> None:
        """Write batches until nothing is pending (the runner waits for that at shutdown)."""
        while self._batch or self._pending:
            if not self._batch:
                self._batch = self._take_batch()
            await self._write(await self.connection(), self._batch)
            self._finals -= sum(1 for o in self._batch if o.final)
            self._batch = []
        self._idle.set()

    def failed(self, error: str, delay: float) -> str:
        return (f"Could not record {len(self._batch)} job outcome(s) ({error}); "
                f"retrying in {delay:.2f} s.")

    def _take_batch(self) -> list[Outcome]:
        keys = list(self._pending)[:MAX_BATCH]
        return [self._pending.pop(key) for key in keys]

    async def _write(self, conn: psycopg.AsyncConnection[Any], batch: list[Outcome]) -> None:
        params = outcome_params(batch)
        # Prepared after five executions like any statement; see connections.COMPLETIONS
        # for why its cached plan cannot degrade into a sequential scan.
        # Workflow steps: their successors are locked first, in one order, in the
        # batch's transaction (see queries.lock_workflow_successors). Batches of plain
        # jobs skip this and stay one autocommitted statement.
        steps = [o.job_id for o in batch if o.in_workflow and o.final]
        # Charges and RateLimited pauses (pgqueue/limits.py) are written in the batch's
        # transaction too, before complete_jobs moves any job away.
        limits = [o for o in batch if o.touches_limits]
        async with answered(f"writing {len(batch)} outcome(s)"), self._link.applied(conn):
            if steps or limits:
                async with conn.transaction():
                    if steps:
                        await conn.execute(self._queries.lock_workflow_successors,
                                           {"ids": steps})
                    if limits:
                        await conn.execute(self._queries.apply_limit_outcomes, {
                            "ids": [o.job_id for o in limits],
                            "charges": [o.charged for o in limits],
                            "pause_keys": [o.pause_key for o in limits],
                            "pauses": [o.pause for o in limits],
                        })
                    rows = await self._queries.complete_jobs.all(conn, params)
            else:
                rows = await self._queries.complete_jobs.all(conn, params)
            # A job that ran under a limit frees room in it: every worker looks again.
            limited = {o.queue for o in batch if o.limited and o.final}
            ready_queues = sorted(limited | {
                row.queue for row in rows
                if row.kind in ("release", "retry", "snooze") and row.ready})
            if ready_queues:
                await conn.execute(self._queries.notify_ready, {
                    "channel": notify_channel(self._queries.schema),
                    "queues": ",".join(ready_queues),
                })
        changed = {(row.id, row.token) for row in rows}
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
            self._on_recorded(outcome, recorded)
