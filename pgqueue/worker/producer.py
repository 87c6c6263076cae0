"""The producer: claims ready jobs for the free slots and the prefetch allowance.

A claim starts jobs in the worker's free slots and holds more, up to the prefetch
allowance (worker/prefetch.py), ``claimed`` in SQL: not started, so a slot that frees
has a job at hand. Which of a claim's jobs start is decided in the claim statement, by
claim order; the held ones are started by the completer (worker/completer.py), in the
statement that records the outcomes of the jobs whose slots they take, so SQL never
shows more ``running`` jobs than the worker has slots (worker/ledger.py). While any job
is held, free slots are the completer's to fill (held jobs were at the head of the queue
when claimed: a new claim must not start jobs behind them first); the producer then only
tops the held jobs up, once half the allowance is free, in one claim: a claim's cost is
mostly per statement, so a busy worker claims in batches of up to ``MAX_CLAIM``. After a
full claim it claims again at once; after a short one it sleeps until a NOTIFY, a freed
slot, the next scheduled ``run_at``, or the poll interval — whichever comes first.

Where a claim starts. Every job claimed since the last vacuum leaves a dead entry at the
head of ``jobs_claim_idx``, and a claim that starts at the head walks over all of them:
the longer autovacuum waits (or a long transaction holds it back), the slower each claim.
So after a full claim the producer remembers the last job it took, in claim order, and
the next claim resumes behind it (``claim_jobs_*_after``). A ready job can land *behind*
that cursor only by an insert or an update that puts it back in the queue; each of those
sends a NOTIFY (the insert trigger; the completer and rescuer for jobs put back), and
every wake-up forgets the cursor. A resumed claim that comes back short is topped up by a
claim from the head, which also reaches lower priorities and anything else behind the
cursor. Claim order is therefore what it would be without the cursor, except that a job
landing behind it can wait until the next wake-up or short claim (milliseconds in a busy
queue, whose inserts notify).

Several queues (``--queues high,default,low``), or per-queue slots (``email:2``): each
claim round asks the queues in the order given, one claim statement each (each with its
own cursor), a queue for at most its own free slots and the next ones only for what is
left. A queue still at its slots with jobs maybe ready makes the producer look again when
a slot frees. Without ``--queues`` a single claim takes every queue by priority.

Limits (pgqueue/limits.py). The claims above skip limited queues and tasks. Before them,
each round runs the limited claim (``_claim_limited``: lock the limits' rows, then claim
what they admit, one transaction), but only while some limit exists: when the lock finds
none, the producer does not look again for ``LIMITS_RECHECK`` seconds or until told
that limits changed (``Queue.set_queue`` notifies ``,limits``; a plain wake-up for new
jobs does not count, or every idle worker's first claim would wait for the look), so
queues without limits pay one small statement every few seconds at most. While limits
exist, an idle producer also wakes when a rate bucket next admits a job or a pause ends
(``next_limit_at``). The limited claim only starts jobs, in free slots, and never holds
one (a held job would count against its limit while it waits, and idle workers could not
take the room it holds); a worker stops holding jobs while the limited claim finds jobs
waiting for its slots (``Ledger.hold_paused``), so that held jobs do not take every slot
that frees.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pgqueue.db.queries import ClaimedJob, Queries, Query
from pgqueue.worker import timings
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Link, answered
from pgqueue.worker.ledger import Ledger, claim_order
from pgqueue.worker.prefetch import PATIENCE
from pgqueue.worker.service import Service

logger = logging.getLogger("pgqueue.worker")

MAX_CLAIM = 100
# Without any limit, how long the producer goes before it looks for limits again (the
# ",limits" notification that Queue.set_queue sends makes it look at once).
LIMITS_RECHECK = 2.0
# When another claim held some limit's row, how soon to try that limit again.
LIMITS_BUSY_RETRY = 0.02
# How many concurrency keys one limited claim looks at (fair queues, key_concurrency).
MAX_KEYS = 200
# How far down the claim index one limited claim looks for jobs without a key (keyed
# jobs are found per key, whatever their place). Bounded so that a deep backlog (say,
# 100,000 jobs of a busy key) costs each claim about a millisecond, not a walk over all
# of it (measured 58 ms for 200,000 entries).
LIMITED_SCAN = 1000

# A job's place in claim order: priority (descending), run_at, id.
ClaimKey = tuple[int, datetime, int]


class Producer(Service):
    """Claims jobs for the free slots and the prefetch allowance (see the module doc)."""

    name = "producer"
    failure = "Claiming jobs failed ({error}); reconnecting in {delay:.2f} s."

    def __init__(
        self,
        *,
        connect: Link,
        queries: Queries,
        worker_id: str,
        queues: list[str],
        tasks: frozenset[str],
        lease: float,
        poll_interval: float,
        ledger: Ledger,
        start: Callable[[ClaimedJob], None],
        healthy: Callable[[], bool],
        burst: bool = False,
        is_idle: Callable[[], bool] = lambda: True,
        starved: Callable[[], None] = lambda: None,
        stalled: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff())
        self._link = connect
        self._queries = queries
        self._queues = queues
        self._tasks = tasks
        self._ledger = ledger
        # Several queues, or per-queue slots: one claim per queue, in the order given
        # (``_claim_in_order``).
        self._in_order = len(queues) > 1 or bool(ledger.queue_slots)
        self._queue_rank = {queue: n for n, queue in enumerate(queues)}
        # Per claim scope (every queue, or one queue): the last job claimed, in claim
        # order, while no wake-up happened since; the next claim resumes behind it. No
        # entry: claim from the head of the claim index.
        self._resume_after: dict[tuple[str, ...], ClaimKey] = {}
        self._wakes = 0
        self._claim_params: dict[str, Any] = {
            "worker_id": worker_id, "lease": lease, "queues": queues,
        }
        self.poll_interval = poll_interval
        self._start_job = start
        self._healthy = healthy
        self._burst = burst
        self._is_idle = is_idle
        self._starved = starved
        self._stalled = stalled
        self._wake = asyncio.Event()
        self._slot_freed = asyncio.Event()
        # Limits: no limited claim before this (monotonic) time, for none exists; whether
        # the last look found limits (then idle sleeps also end at next_limit_at); and
        # when to retry limits another claim held.
        self._limits_recheck_at = 0.0
        self._limits_looked_at = -LIMITS_RECHECK
        self._limits_exist = False
        self._limits_busy = False
        # Set while the producer sleeps with nothing to claim, until the next wake-up,
        # the next scheduled job or the poll interval: what tests wait for before they
        # check that a NOTIFY (and nothing else) wakes it.
        self.sleeping = asyncio.Event()

    def wake(self) -> None:
        """Something may be ready (NOTIFY, timer, reconnect): claim soon, from the head."""
        self._wakes += 1
        self._resume_after.clear()  # what woke us may sit behind a cursor
        self.sleeping.clear()
        self._wake.set()

    def limits_changed(self) -> None:
        """Limits may have been set (``Queue.set_queue`` notifies; so does a reconnect,
        after which anything may have changed): look for them at the next claim."""
        self._limits_recheck_at = 0.0
        self._limits_looked_at = -LIMITS_RECHECK
        self.wake()

    def slot_freed(self) -> None:
        """A slot may be free, or the held jobs ran low (the ledger calls this)."""
        self._slot_freed.set()

    async def stop(self) -> None:
        """Let a claim in flight finish, then stop. Cancelled mid-statement, a claim may
        commit in the database while its jobs never reach us: they would sit claimed or
        running until their lease expired. Its jobs are handed over like any others (the
        worker gives back what it does not start)."""
        self.finished = True
        self._wake.set()
        self._slot_freed.set()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=timings.PRODUCER_STOP_WAIT)
        await super().stop()

    def cursor(self, queues: tuple[str, ...] | None = None) -> ClaimKey | None:
        """Where the next claim of ``queues`` (default: the worker's) resumes; None: from
        the head of the claim index."""
        return self._resume_after.get(tuple(self._queues) if queues is None else queues)

    async def claim(self, limit: int, queues: tuple[str, ...] | None = None, *,
                    start: int | None = None) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs of ``queues`` (default: the worker's), the
        first ``start`` of them (default: all) started, the rest held: behind the cursor
        while that lasts, else (or for what it left short) from the head of the claim
        index. The slots of the jobs to start must be reserved (``Ledger.reserve``)."""
        scope = tuple(self._queues) if queues is None else queues
        start = limit if start is None else start
        # Each variant is its own statement, with its own plan (see queries._claim).
        if scope:
            head = self._queries.claim_jobs_in_queues
            after = self._queries.claim_jobs_in_queues_after
        else:
            head = self._queries.claim_jobs_any_queue
            after = self._queries.claim_jobs_any_queue_after
        wakes = self._wakes
        complete = True  # False if the top-up claim failed
        jobs: list[ClaimedJob] = []
        cursor = self._resume_after.pop(scope, None)
        if cursor is not None:
            priority, run_at, job_id = cursor
            jobs = await self._claim(after, scope, limit, start, {
                "after_priority": priority, "after_run_at": run_at, "after_id": job_id,
            })
        if len(jobs) < limit:
            started = sum(1 for job in jobs if job.started)
            try:
                jobs += await self._claim(head, scope, limit - len(jobs),
                                          max(0, start - started), {})
            except Exception:
                if not jobs:
                    raise
                # The resumed claim's jobs are committed to us: run them rather than leave
                # them to lease expiry. The next claim reconnects or meets the failure.
                logger.debug("Topping up a resumed claim failed.", exc_info=True)
                complete = False
        # Keep a cursor only if nothing woke us while claiming: what did might have landed
        # behind the jobs just claimed, where this claim's snapshot could not see it.
        if jobs and complete and wakes == self._wakes:
            self._resume_after[scope] = _last_in_claim_order(jobs)
        return jobs

    async def _claim_in_order(self, start: int, hold: int) -> tuple[list[ClaimedJob], bool, bool]:
        """Claim queue by queue, in the order given, ``start`` jobs to start and ``hold``
        to hold: each queue as far as its own slots allow, the next one only with what is
        left.

        Returns the jobs, whether a queue may have more ready (a claim came back full, or
        room ran out), and whether a queue was skipped for want of its own slots.
        """
        jobs: list[ClaimedJob] = []
        more = capped = False
        for queue in self._queues:
            if start + hold == 0:
                more = True
                break
            room = self._ledger.queue_room(queue)
            want_start = start if room is None else min(start, room)
            want_hold = hold if room is None else 0
            if want_start + want_hold <= 0:
                capped = True
                continue
            got = await self.claim(want_start + want_hold, (queue,), start=want_start)
            jobs += got
            began = sum(1 for job in got if job.started)
            start -= began
            hold -= len(got) - began
            more = more or len(got) == want_start + want_hold
        return jobs, more, capped

    async def _claim(
        self, query: Query[ClaimedJob], queues: tuple[str, ...], limit: int, start: int,
        extra: dict[str, Any],
    ) -> list[ClaimedJob]:
        conn = await self.connection()
        token = secrets.randbits(63)  # fences every outcome of this claim (lease_token)
        params = self._claim_params | extra | {"queues": list(queues), "limit": limit,
                                               "start": start, "token": token}
        async with answered("a claim"), self._link.applied(conn):
            return await query.all(conn, params, prepare=self._link.prepare)

    async def _seconds_until_next_job(self) -> float:
        """How long until the next scheduled job is due, or while limits exist the next
        rate bucket admits a job or a pause ends (capped by the poll interval)."""
        conn = await self.connection()
        async with answered("reading when the next job is due"), self._link.applied(conn):
            row = await self._queries.next_run_at.one(
                conn, {"queues": self._queues}, prepare=self._link.prepare)
            due = [row.seconds]
            if self._limits_exist:
                row = await self._queries.next_limit_at.one(conn, {}, prepare=self._link.prepare)
                due.append(row.seconds)
        times = [t for t in due if t is not None]
        if not times:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, min(times) + 0.001))

    async def _claim_limited_in_order(self, limit: int) -> list[ClaimedJob]:
        """The limited claim for up to ``limit`` jobs (their slots reserved); with
        per-queue slots, queue by queue within each queue's own room."""
        if not self._ledger.queue_slots:
            return await self._claim_limited(limit, self._queues)
        jobs: list[ClaimedJob] = []
        for queue in self._queues:
            room = self._ledger.queue_room(queue)
            want = limit - len(jobs) if room is None else min(limit - len(jobs), room)
            if want > 0:
                jobs += await self._claim_limited(want, [queue])
        return jobs

    async def _claim_limited(self, limit: int, queues: list[str]) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs of limited queues and tasks, in one transaction: take
        the limits' rows (those no other claim holds), then what they admit."""
        self._limits_busy = False
        now = time.monotonic()
        if now < self._limits_recheck_at:
            return []
        if limit <= 0 and now - self._limits_looked_at < LIMITS_RECHECK:
            return []  # no slot to fill, and what limits exist is known
        self._limits_looked_at = now
        conn = await self.connection()
        token = secrets.randbits(63)
        query = (self._queries.claim_limited_jobs_in_queues if queues
                 else self._queries.claim_limited_jobs_any_queue)
        async with answered("a limited claim"), self._link.applied(conn), conn.transaction():
            held = await self._queries.lock_limits.one(conn, {}, prepare=self._link.prepare)
            self._limits_exist = bool(held.queues or held.tasks or held.skipped_queues
                                      or held.skipped_tasks)
            # While a limit this worker's jobs may fall under exists, it holds no jobs
            # ahead of its slots: each slot that frees goes through this claim first.
            self._ledger.hold_paused = self._concerns_me(
                held.queues + held.skipped_queues, held.tasks + held.skipped_tasks)
            if not self._limits_exist:
                self._limits_recheck_at = time.monotonic() + LIMITS_RECHECK
                return []
            self._limits_busy = bool(held.skipped_queues or held.skipped_tasks)
            if limit <= 0 or not (held.queues or held.tasks):
                return []
            return await query.all(conn, self._claim_params | {
                "queues": queues, "limit": limit, "token": token,
                "locked_queues": held.queues, "locked_tasks": held.tasks,
                "skipped_queues": held.skipped_queues, "skipped_tasks": held.skipped_tasks,
                "max_keys": MAX_KEYS, "scan": limit + LIMITED_SCAN,
            }, prepare=self._link.prepare)

    def _concerns_me(self, queues: list[str], tasks: list[str]) -> bool:
        """Whether a limit on ``queues`` or ``tasks`` can apply to this worker's jobs."""
        if any(task in self._tasks for task in tasks):
            return True
        return bool(queues) and (not self._queues or any(q in self._queues for q in queues))

    async def _wait_for_slot(self) -> None:
        self._slot_freed.clear()
        if self._full():
            self._starved()
            try:
                async with asyncio.timeout(PATIENCE):
                    await self._slot_freed.wait()
            except TimeoutError:
                # Nothing ended for a while: held jobs may be waiting behind slow ones
                # (worker/prefetch.py, PATIENCE).
                self._stalled()
        # Let executions finishing in this same loop iteration free their slots too, so
        # the next claim fetches several jobs in one round trip.
        await asyncio.sleep(0)

    async def _wait_for_slot_or_wake(self) -> None:
        self._slot_freed.clear()
        slot = asyncio.ensure_future(self._slot_freed.wait())
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({slot, wake}, timeout=self.poll_interval,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            slot.cancel()
            wake.cancel()

    async def _sleep_until_woken(self, timeout: float) -> None:
        if timeout <= 0:
            return
        self.sleeping.set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
        finally:
            self.sleeping.clear()

    def _start_room(self) -> int:
        """Free slots this round's claims may start jobs in: none while jobs are held
        (the completer starts those first)."""
        ledger = self._ledger
        return 0 if ledger.held or ledger.draining else ledger.free_slots()

    async def run_once(self) -> None:
        """One claim for the free slots and the allowance; then, unless it was full, wait
        for more work.

        With ``burst``, the service finishes once nothing is ready or running.
        """
        if self.finished or not await self._can_claim():
            return
        ledger = self._ledger
        self._wake.clear()
        capped = False
        reserved = ledger.reserve(min(self._start_room(), MAX_CLAIM))
        try:
            limited = await self._claim_limited_in_order(reserved)
            for job in limited:
                self._start_job(job)
            start = reserved - len(limited)
            hold = min(ledger.hold_room(), MAX_CLAIM - start)
            limit = start + hold
            jobs: list[ClaimedJob]
            if limit == 0:
                jobs, more = [], bool(limited) and len(limited) == reserved
            elif self._in_order:
                jobs, more, capped = await self._claim_in_order(start, hold)
            else:
                jobs = await self.claim(limit, start=start)
                more = len(jobs) == limit
            self._hand_over(jobs)
        finally:
            ledger.unreserve(reserved)
        jobs = limited + jobs
        if more:
            return  # a full claim: more may be ready right now
        if self._limits_busy:
            # Another claim held a limit: look again in a moment, once it has committed.
            await self._sleep_until_woken(LIMITS_BUSY_RETRY)
            return
        if capped and not self._burst:
            # A queue at its own slots may have jobs ready: look again when a slot frees
            # (or something wakes us), not only at the next poll.
            await self._wait_for_slot_or_wake()
            return
        if self._burst:
            if not jobs and self._is_idle():
                self.finished = True
            elif not jobs:
                await self._wait_burst()
            return
        await self._idle()

    def _hand_over(self, jobs: list[ClaimedJob]) -> None:
        """Start the jobs a claim started and hold the others, in start order."""
        if self._in_order:
            jobs.sort(key=lambda job: (self._queue_rank.get(job.queue, 0), *claim_order(job)))
        else:
            # Claims return rows unordered; the worker starts them in the order handed over.
            jobs.sort(key=claim_order)
        for job in jobs:
            if job.started:
                self._start_job(job)
        held = [job for job in jobs if not job.started]
        if held:
            self._ledger.hold(held)

    def _full(self) -> bool:
        """True while a claim is not worth its round trip: no slot is free for it (or jobs
        are held, which the completer starts first) and fewer than a claim batch of held
        places are free while held jobs remain (they keep the slots busy until more
        places free)."""
        ledger = self._ledger
        if ledger.draining:
            return True
        if self._start_room() > 0:
            return False
        room = ledger.hold_room()
        if room == 0:
            return True
        return ledger.held > 0 and room < ledger.prefetch.claim_batch

    async def _can_claim(self) -> bool:
        """False (after waiting a little) while a claim is not worth it (``_full``) or
        heartbeats fail."""
        if self._full():
            await self._wait_for_slot()
            return False
        if not self._healthy():
            await asyncio.sleep(0.2)
            return False
        return True

    async def _idle(self) -> None:
        """Sleep until a NOTIFY, the next scheduled job, or the poll interval."""
        timeout = await self._seconds_until_next_job()
        started = time.monotonic()
        await self._sleep_until_woken(timeout)
        logger.debug("Producer woke after %.3f s.", time.monotonic() - started)

    async def _wait_burst(self) -> None:
        """In burst mode, with jobs still running: wait for one to end, then look again."""
        self._slot_freed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await self._slot_freed.wait()


def _last_in_claim_order(jobs: list[ClaimedJob]) -> ClaimKey:
    """The claim-order key of the job a claim reached last (claims return rows unordered)."""
    last = max(jobs, key=claim_order)
    return (last.priority, last.run_at, last.id)
