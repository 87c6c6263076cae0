"""The ledger: a worker's slots and every job it holds, in one object.

A job this worker holds is in exactly one of these places, each of which SQL shows as it is:

* **held** (``claimed`` in SQL): claimed ahead of the slots, up to the prefetch allowance
  (worker/prefetch.py), not started; kept in start order;
* **reserved**: a statement that may start jobs is on its way (a claim that starts some,
  or the completer's ``start_jobs``): the slots it may fill are taken until it answers;
* **executing** (``running``): started, its attempt under way;
* **ended**: its attempt is over and its outcome waits in the completer's batch. SQL still
  shows it ``running`` until the outcome commits, so it keeps its slot until then.

So a worker's ``running`` rows never exceed its slots: a slot is free only when nothing
above takes it, and a held job starts only in a statement fenced on its ``claimed`` status
(a job cancelled, released or taken back while held is simply not started). The producer
(claims), the completer (outcomes and starts), the heartbeat (leases) and the metrics all
read this one object; nobody else counts slots.

Per-queue slots (``--queues email:2,...``) cap a queue's executing and ended jobs; such a
worker holds nothing ahead (its queues' slots decide what it may take, queue by queue).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from pgqueue.worker.prefetch import Prefetch

if TYPE_CHECKING:
    from pgqueue.db.queries import ClaimedJob
    from pgqueue.worker.executor import Execution
    from pgqueue.worker.outcome import Outcome


class Held(NamedTuple):
    """A job claimed ahead of the slots, and since when (monotonic seconds)."""

    job: ClaimedJob
    since: float


def claim_order(job: ClaimedJob) -> tuple[int, datetime, int]:
    """Sorts jobs as the claim index does: priority descending, run_at, id."""
    return (-job.priority, job.run_at, job.id)


class Ledger:
    """Slots, held jobs, executions and ended jobs of one worker (see the module doc)."""

    def __init__(
        self,
        *,
        concurrency: int,
        prefetch: Prefetch,
        queue_slots: dict[str, int] | None = None,
        queue_rank: dict[str, int] | None = None,
        stuck: Callable[[], int] = lambda: 0,
    ) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.queue_slots = queue_slots or {}
        # Several queues in order (--queues high,default): held jobs start queue by
        # queue in that order, then in claim order.
        self._queue_rank = queue_rank or {}
        self._stuck = stuck
        # Next to start at the end (popped from there).
        self._held: list[Held] = []
        self.executions: dict[int, Execution] = {}
        self._ended: Counter[str] = Counter()  # by queue: outcomes not yet committed
        self._reserved = 0
        # Set when no more jobs may start: the worker is shutting down.
        self.draining = False
        # Set by the producer while a limit this worker's jobs may fall under exists:
        # then it holds nothing ahead, and every slot that frees goes to the limited
        # claim first (a held job would take it, and the limited jobs could wait for
        # ever behind a busy queue's held ones).
        self.hold_paused = False
        # Called when a slot may be free with held jobs waiting for it (the completer
        # starts them) or with none held (the producer claims).
        self.on_start_demand: Callable[[], None] = lambda: None
        self.on_claim_demand: Callable[[], None] = lambda: None

    # -- what is where ------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Jobs held (claimed, not started)."""
        return len(self._held)

    @property
    def executing(self) -> int:
        """Jobs started whose attempt is still under way."""
        return len(self.executions)

    @property
    def ended(self) -> int:
        """Jobs whose attempt ended and whose outcome is not committed yet."""
        return self._ended.total()

    @property
    def allowance(self) -> int:
        """How many jobs the worker may hold ahead of its slots now (none with per-queue
        slots, whose caps decide queue by queue what it takes)."""
        return 0 if self.queue_slots or self.hold_paused else self.prefetch.allowance

    def free_slots(self) -> int:
        """Slots nothing takes: not executing, not waiting for an outcome to commit, not
        reserved by a start on its way, and not held by a thread stuck in a sync call
        whose attempt already ended."""
        busy = len(self.executions) + self._ended.total() + self._reserved + self._stuck()
        return max(0, self.concurrency - busy)

    def hold_room(self) -> int:
        """How many more jobs the worker may claim ahead of its slots."""
        return max(0, self.allowance - len(self._held))

    def queue_room(self, queue: str) -> int | None:
        """How many more of ``queue``'s jobs may start (``name:N`` slots; None: no cap of
        its own). Counted when asked, at most once per queue per claim round."""
        slots = self.queue_slots.get(queue)
        if slots is None:
            return None
        executing = sum(1 for e in self.executions.values() if e.job.queue == queue)
        return max(0, slots - executing - self._ended[queue])

    def holdings(self) -> list[tuple[int, int]]:
        """Every (job id, lease token) this worker holds and has not ended: held and
        executing. (Ended ones are the completer's: see ``Completer.holdings``.)"""
        pairs = [(h.job.id, h.job.token) for h in self._held]
        pairs += [(e.job.id, e.job.token) for e in self.executions.values()]
        return pairs

    def held_jobs(self) -> list[Held]:
        return list(self._held)

    # -- held jobs ----------------------------------------------------------------------

    def hold(self, jobs: Iterable[ClaimedJob]) -> None:
        """Jobs a claim took without starting them."""
        now = time.monotonic()
        self._held.extend(Held(job, now) for job in jobs)
        self._held.sort(key=self._start_order, reverse=True)
        self._demand()

    def _start_order(self, held: Held) -> tuple[int, int, datetime, int]:
        job = held.job
        return (self._queue_rank.get(job.queue, 0), -job.priority, job.run_at, job.id)

    def offer(self, slots: int) -> tuple[list[ClaimedJob], int]:
        """The held jobs to start in ``slots`` free slots, in start order, and the priority
        a ready job must beat to start before the worst of them. They stay held until
        :meth:`started` says what became of them."""
        offered = [h.job for h in reversed(self._held[-slots:])] if slots > 0 else []
        floor = min((job.priority for job in offered), default=32767)
        return offered, floor

    def drop_held(self, ids: set[int]) -> list[ClaimedJob]:
        """Forget held jobs (started, given back, or no longer ours); returns them."""
        held = self._held
        # The jobs a start took were offered from the end of the list (the next to
        # start): pop that tail first. A scan of every held job per batch was 5% of the
        # worker's CPU draining no-op jobs with 8 slots and ~300 held.
        dropped = []
        while held and held[-1].job.id in ids:
            dropped.append(held.pop().job)
        if len(dropped) < len(ids):
            rest = [h.job for h in held if h.job.id in ids]
            if rest:
                self._held = [h for h in held if h.job.id not in ids]
                dropped += rest
        if dropped:
            self._demand()
        return dropped

    def stale_held(self, patience: float) -> list[ClaimedJob]:
        """Held jobs that have waited ``patience`` seconds for a slot."""
        now = time.monotonic()
        return [h.job for h in self._held if now - h.since >= patience]

    def take_all_held(self) -> list[ClaimedJob]:
        """Every held job, forgotten (to give back: the worker stops)."""
        jobs = [h.job for h in self._held]
        self._held = []
        return jobs

    # -- slots --------------------------------------------------------------------------

    def reserve(self, slots: int, *, freeing: int = 0) -> int:
        """Take up to ``slots`` free slots for a start on its way; returns how many.
        ``freeing``: slots of ended jobs whose outcomes commit in the same statement as
        the start (they are free for it)."""
        taken = max(0, min(slots, self.free_slots() + freeing))
        self._reserved += taken
        return taken

    def unreserve(self, slots: int) -> None:
        """A start answered: its reserved slots are the executions it began (already
        added with :meth:`began`) or free again."""
        self._reserved -= slots
        self._demand()

    def began(self, execution: Execution) -> None:
        """A job started in a reserved slot (the caller unreserves it afterwards)."""
        self.executions[execution.job.id] = execution

    def finished(self, execution: Execution, outcome: Outcome | None) -> None:
        """An attempt ended. Its slot stays taken until its outcome is committed, unless
        there is none to record (a lost lease)."""
        if self.executions.get(execution.job.id) is not execution:
            return  # already accounted for (released at shutdown, or replaced)
        del self.executions[execution.job.id]
        if outcome is not None and outcome.holds_slot:
            self._ended[outcome.queue] += 1
        else:
            self._demand()

    def recorded(self, outcome: Outcome) -> None:
        """An outcome the completer wrote (or dropped as fenced): a final outcome of a
        started job frees its slot."""
        if outcome.holds_slot and self._ended[outcome.queue] > 0:
            self._ended[outcome.queue] -= 1
            if self._ended[outcome.queue] <= 0:
                del self._ended[outcome.queue]
            self._demand()

    def slot_freed(self) -> None:
        """A slot freed outside the ledger's own bookkeeping (a stuck thread returned)."""
        self._demand()

    def _demand(self) -> None:
        """Something changed that may let a job start or the held jobs be topped up: tell
        the completer (held jobs and a free slot) and the producer (it decides)."""
        if self.draining:
            return
        if self._held and self.free_slots() > 0:
            self.on_start_demand()
        self.on_claim_demand()
