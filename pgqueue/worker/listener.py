"""The listener: LISTENs for ready jobs on a dedicated connection and wakes the producer.

Insert statements notify once per statement, naming the queues that got ready jobs (see
the ``notify_jobs_ready`` trigger). Notifications can be lost — the connection may drop —
so after every (re)connect the listener wakes the producer once, and the producer also
polls on a timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pgqueue.worker.backoff import Backoff, is_retryable

logger = logging.getLogger("pgqueue.worker")


class Listener:
    """Turns NOTIFYs on ``channel`` about our queues into producer wake-ups."""

    def __init__(
        self,
        *,
        connect: Callable[[], Any],
        channel: str,
        queues: frozenset[str],
        wake: Callable[[], None],
    ) -> None:
        self._connect = connect
        self._channel = channel
        self._queues = queues
        self._wake = wake
        self._backoff = Backoff(base=0.2, cap=5.0)
        self.listening = asyncio.Event()

    def _relevant(self, payload: str) -> bool:
        if not self._queues or not payload:
            return True
        return any(name in self._queues for name in payload.split(","))

    async def run(self) -> None:
        """Listen until cancelled, reconnecting with backoff when the connection drops."""
        from psycopg import sql

        while True:
            conn = None
            try:
                conn = await self._connect()
                await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                self._backoff.reset()
                self.listening.set()
                self._wake()  # anything that became ready while we were not listening
                async for notify in conn.notifies():
                    if self._relevant(notify.payload):
                        self._wake()
            except Exception as exc:
                self.listening.clear()
                if not is_retryable(exc):
                    raise
                delay = self._backoff.next_delay()
                logger.warning("Listen connection lost (%s); reconnecting in %.2f s.",
                               str(exc).strip().splitlines()[0] if str(exc).strip()
                               else type(exc).__name__, delay)
                await asyncio.sleep(delay)
            finally:
                if conn is not None:
                    await conn.close()
