"""The completer: the only writer of outcomes, and the one that starts held jobs.

Outcomes collect for a moment (``flush_interval``) and go to the database in one
``complete_jobs`` statement. The statement changes a row only if it still carries the
``lease_token`` of the claim the outcome belongs to; an outcome whose row was not changed
is reported as a lost lease and dropped, never forced. On a lost connection the batch is
kept and written again after reconnecting: nothing the executor decided is forgotten while
the process lives.

While the worker holds jobs claimed ahead of its slots (worker/ledger.py), the batch that
frees slots also starts held jobs in them, in the same statement
(``complete_and_start_jobs_*``): the outcomes of a slot's last jobs and the start of its
next ones commit together, so SQL never shows more running jobs than the worker has
slots, and a slot waits one round trip between jobs, not two. A batch is then written as
soon as it can be (the statement in flight batches what ends meanwhile), and a free slot
with held jobs waiting sends one even with no outcome to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from typing import Any

import orjson
import psycopg

from pgqueue.db.names import notify_channel
from pgqueue.db.queries import ClaimedJob, Queries, RecordedOutcome
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Link, answered
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")

MAX_BATCH = 1000
# Outcome kinds that put a job back in the queue, due at once if their delay is 0: a
# NOTIFY tells idle workers.
_REQUEUED = ("release", "retry", "snooze", "unclaim")


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
    """Collects outcomes from executions and records them in batches, starting held jobs
    in the slots they free.

    Its connection plans with sequential scans off (``connections.COMPLETIONS``).
    """

    name = "completer"

    def __init__(
        self,
        *,
        connect: Link,
        queries: Queries,
        ledger: Ledger,
        on_recorded: Callable[[Outcome, bool], None],
        on_started: Callable[[ClaimedJob], None],
        start_params: dict[str, Any],
        flush_interval: float = 0.002,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff())
        self._link = connect
        self._queries = queries
        self._ledger = ledger
        self._on_recorded = on_recorded
        self._on_started = on_started
        # worker_id, lease and queues: what a start writes and where it may look for a
        # job of higher priority than the held ones.
        self._start_params = start_params
        self._start = (queries.complete_and_start_jobs_in_queues if start_params["queues"]
                       else queries.complete_and_start_jobs_any_queue)
        self._flush_interval = flush_interval
        self._pending: dict[tuple[int, int], Outcome] = {}
        # The batch being written: kept until a write succeeds, across reconnections.
        self._batch: list[Outcome] = []
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
        self._pending[key] = outcome
        self._idle.clear()
        self._arrived.set()

    def holdings(self) -> list[tuple[int, int]]:
        """The (job id, lease token) of every outcome not yet written: the worker still
        holds those jobs (their rows read claimed or running until the write)."""
        return list(self._pending) + [o.key for o in self._batch]

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

    def start_demand(self) -> None:
        """A slot is free and jobs are held: start them now (the ledger calls this)."""
        self._hurry.set()
        self._arrived.set()

    async def wait(self) -> None:
        """Until outcomes arrive, then a moment more (``flush_interval``, cut short by
        :meth:`hurry`) so that the outcomes of executions ending together share a batch.
        While jobs are held for the slots these outcomes free, no moment more: only what
        ends in this same turn of the event loop."""
        await self._arrived.wait()
        if self._flush_interval and not self._hurry.is_set() and not self._ledger.held:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._flush_interval):
                    await self._hurry.wait()
        else:
            # Jobs started together mostly end together, a turn or two of the event loop
            # apart (no-op and short jobs): keep yielding while each turn brings more
            # outcomes and executions are still under way, so that one statement records
            # them all and starts as many held jobs as slots free. With one turn only,
            # batches of 8 slots carried 4 outcomes on average, two round trips per 8 jobs
            # instead of one (measured: 2,510 statements for 10,000 jobs, then 626 for
            # 5,000); a turn of the loop costs microseconds, a round trip a millisecond.
            seen = -1
            while len(self._pending) != seen and self._ledger.executing:
                seen = len(self._pending)
                await asyncio.sleep(0)
        self._hurry.clear()
        self._arrived.clear()

    async def run_once(self) -> None:
        """Write batches (and start held jobs) until nothing is pending (the runner waits
        for that at shutdown)."""
        while True:
            if not self._batch:
                self._batch = self._take_batch()
            starting = self._may_start(self._batch)
            if not self._batch and not starting:
                break
            progressed = await self._write(await self.connection(), self._batch, starting)
            self._batch = []
            if not progressed and not self._pending:
                break
        if not self._pending:
            self._idle.set()

    def _may_start(self, batch: list[Outcome]) -> bool:
        """Whether writing ``batch`` may start held jobs: some are held, and a slot is free
        once it is written."""
        ledger = self._ledger
        if not ledger.held or ledger.draining:
            return False
        return ledger.free_slots() + sum(1 for o in batch if o.holds_slot) > 0

    def failed(self, error: str, delay: float) -> str:
        return (f"Could not record {len(self._batch)} job outcome(s) ({error}); "
                f"retrying in {delay:.2f} s.")

    def _take_batch(self) -> list[Outcome]:
        keys = list(self._pending)[:MAX_BATCH]
        return [self._pending.pop(key) for key in keys]

    async def _write(self, conn: psycopg.AsyncConnection[Any], batch: list[Outcome],
                     starting: bool) -> bool:
        """Record ``batch`` and, with ``starting``, start held jobs in the slots free once
        it is recorded. Returns whether anything changed in the worker."""
        params = outcome_params(batch)
        ledger = self._ledger
        # The slots this batch frees are free once it commits: in the same statement.
        freed = sum(1 for o in batch if o.holds_slot)
        reserved = ledger.reserve(ledger.free_slots() + freed, freeing=freed) if starting else 0
        offered, floor = ledger.offer(reserved)
        try:
            if offered:
                params |= self._start_params | {
                    "offered": orjson.dumps([(job.id, job.token) for job in offered]).decode(),
                    "n": reserved, "floor": floor, "token": secrets.randbits(63),
                }
            recorded, started, blocked = await self._statements(conn, batch, params,
                                                                 bool(offered))
            if offered:
                gone = {job.id for job in offered} if len(started) < reserved else set()
                ledger.drop_held(gone | {job.id for job in started} | {job.id for job in blocked})
                for job in started:
                    self._on_started(job)
        finally:
            ledger.unreserve(reserved)
        for job in blocked:
            # Its queue was paused or limited since it was claimed: back to the queue.
            self.submit(Outcome.of(job, "unclaim"))
        await self._notify(conn, batch, recorded)
        changed = {(row.id, row.token) for row in recorded}
        for outcome in batch:
            was_recorded = outcome.key in changed
            if not was_recorded:
                logger.warning(
                    "Job %s (%s): the %s outcome of attempt %s was refused: this worker no "
                    "longer holds the job (lease lost).", outcome.job_id, outcome.task,
                    outcome.kind, outcome.attempt,
                    extra={"job_id": outcome.job_id, "task": outcome.task,
                           "attempt": outcome.attempt},
                )
            self._on_recorded(outcome, was_recorded)
        return bool(batch or started or blocked or len(started) < reserved)

    async def _statements(
        self, conn: psycopg.AsyncConnection[Any], batch: list[Outcome], params: dict[str, Any],
        starting: bool,
    ) -> tuple[list[RecordedOutcome], list[ClaimedJob], list[ClaimedJob]]:
        """Run the batch's statement (in a transaction with what must precede it): the
        outcomes recorded, the jobs started and the held jobs that may no longer start."""
        # Prepared after five executions like any statement; see connections.COMPLETIONS
        # for why its cached plan cannot degrade into a sequential scan.
        # Workflow steps: their successors are locked first, in one order, in the
        # batch's transaction (see queries.lock_workflow_successors). Batches of plain
        # jobs skip this and stay one autocommitted statement.
        steps = [o.job_id for o in batch if o.in_workflow and o.final]
        # Charges and RateLimited pauses (pgqueue/limits.py) are written in the batch's
        # transaction too, before complete_jobs moves any job away.
        limits = [o for o in batch if o.touches_limits]
        # One transaction only when a statement must precede the batch's.
        together: contextlib.AbstractAsyncContextManager[Any] = (
            conn.transaction() if steps or limits else contextlib.nullcontext())
        async with answered(f"writing {len(batch)} outcome(s)"), self._link.applied(conn), \
                together:
            if steps:
                await conn.execute(self._queries.lock_workflow_successors, {"ids": steps})
            if limits:
                await conn.execute(self._queries.apply_limit_outcomes, {
                    "ids": [o.job_id for o in limits],
                    "charges": [o.charged for o in limits],
                    "pause_keys": [o.pause_key for o in limits],
                    "pauses": [o.pause for o in limits],
                })
            if not starting:
                return await self._queries.complete_jobs.all(conn, params), [], []
            rows = await self._start.all(conn, params)
        recorded = [row.outcome() for row in rows if row.kind not in ("started", "blocked")]
        started = [row.job() for row in rows if row.kind == "started"]
        blocked = [row.job() for row in rows if row.kind == "blocked"]
        return recorded, started, blocked

    async def _notify(self, conn: psycopg.AsyncConnection[Any], batch: list[Outcome],
                      recorded: list[RecordedOutcome]) -> None:
        """Wake idle workers for the jobs this batch put back in the queue, due now, and
        for every limit a job of the batch ran under (it frees room in it)."""
        limited = {o.queue for o in batch if o.limited and o.final}
        ready_queues = sorted(limited | {
            row.queue for row in recorded if row.kind in _REQUEUED and row.ready})
        if ready_queues:
            async with answered("a wake-up"), self._link.applied(conn):
                await conn.execute(self._queries.notify_ready, {
                    "channel": notify_channel(self._queries.schema),
                    "queues": ",".join(ready_queues),
                })
