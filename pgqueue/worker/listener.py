"""The listener: LISTENs for ready jobs on a dedicated connection and wakes the producer.

Insert statements notify once per statement, naming the queues that got ready jobs (see
the ``notify_jobs_ready`` trigger). Notifications can be lost — the connection may drop —
so after every (re)connect the listener wakes the producer once, and the producer also
polls on a timer.

The same channel carries ``,schedules`` when the periodic schedules change (revision
0008_schedules: no list of queue names can start with a comma): that wakes the
scheduler, not the producer. And ``,limits`` when ``Queue.set_queue`` changes a queue's
limits: the producer looks for limits again at its next claim (see producer.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from psycopg import sql

from pgqueue.db.names import LIMITS_CHANGED
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.connections import Connect
from pgqueue.worker.service import Service

# The payload of the schedules table's trigger.
SCHEDULES_CHANGED: Final = ",schedules"


class Listener(Service):
    """Turns NOTIFYs on ``channel`` about our queues into producer wake-ups."""

    name = "listener"
    failure = "Listen connection lost ({error}); reconnecting in {delay:.2f} s."

    def __init__(
        self,
        *,
        connect: Connect,
        channel: str,
        queues: frozenset[str],
        wake: Callable[[], None],
        schedules_changed: Callable[[], None] = lambda: None,
        limits_changed: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(connect=connect, backoff=Backoff(base=0.2, cap=5.0))
        self._channel = channel
        self._queues = queues
        self._wake = wake
        self._schedules_changed = schedules_changed
        self._limits_changed = limits_changed or wake
        self.listening = asyncio.Event()

    def _relevant(self, payload: str) -> bool:
        if not self._queues or not payload:
            return True
        return any(name in self._queues for name in payload.split(","))

    async def run_once(self) -> None:
        """Listen for as long as the connection lives."""
        conn = await self.connection()
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        # Listening again is the success that ends a run of failures: this round itself
        # lasts as long as the connection, so the runtime never sees it end.
        self.backoff.reset()
        self.listening.set()
        # Anything that became ready, and any schedule or limit that changed, while we
        # were not listening.
        self._limits_changed()  # wakes the producer too
        self._schedules_changed()
        async for notify in conn.notifies():
            if notify.payload == SCHEDULES_CHANGED:
                self._schedules_changed()
            elif notify.payload == LIMITS_CHANGED:
                self._limits_changed()
            elif self._relevant(notify.payload):
                self._wake()

    def failed(self, error: str, delay: float) -> str:
        self.listening.clear()
        return super().failed(error, delay)
