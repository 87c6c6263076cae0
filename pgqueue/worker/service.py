"""The runtime every worker service shares: its connection, its loop, its retry policy.

A service (producer, completer, heartbeat, listener, maintenance) is a class with a
small protocol:

* :meth:`Service.wait` — until the next round is due (a timer, work arriving); no
  database here;
* :meth:`Service.run_once` — one round of work, on the service's own connection
  (:meth:`Service.connection`, opened when the round first needs it);
* :meth:`Service.failed` — the warning to log when a round failed and will be retried.

The runtime does the rest, once for all of them: :meth:`Service.run` loops ``wait`` and
``run_once``; a round that fails with a retryable database error (the one classifier is
:func:`pgqueue.worker.backoff.is_retryable`) closes the connection, logs the first line
of the error and runs again after a jittered, capped exponential backoff, reconnecting
first; any other error ends the service and, through the runner, the worker.
:meth:`start` and :meth:`stop` let the runner start and stop every service in one loop.
A new service (a scheduler, a limiter, metrics) is one more subclass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import psycopg

from pgqueue.errors import DatabaseUnavailable, first_line
from pgqueue.worker.backoff import Backoff, is_retryable
from pgqueue.worker.connections import Connect

logger = logging.getLogger("pgqueue.worker")

T = TypeVar("T")


async def retrying(
    attempt: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff,
    on_failure: Callable[[Exception, float], float],
) -> T:
    """``attempt()`` until it succeeds: the retry policy of every worker connection.

    A retryable database error calls ``on_failure(error, delay)`` with the next backoff
    delay; it logs and returns the delay to wait (or raises to give up). Any other error
    propagates at once. A success resets ``backoff``.
    """
    while True:
        try:
            result = await attempt()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            await asyncio.sleep(on_failure(exc, backoff.next_delay()))
        else:
            backoff.reset()
            return result


async def retrying_for(attempt: Callable[[], Awaitable[T]], *, timeout: float) -> T:
    """``attempt()`` until it succeeds or ``timeout`` seconds have passed: how a worker,
    and a supervisor of workers, wait for the database at start-up. Each failure is
    logged with the delay before the next try (0.5 s doubling to 5 s); past the timeout,
    :class:`DatabaseUnavailable` names the last error in one line."""
    deadline = time.monotonic() + timeout
    backoff = Backoff(base=0.5, cap=5.0)

    def failed(exc: Exception, delay: float) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DatabaseUnavailable(
                f"could not connect to the database within {timeout:g}s: {first_line(exc)}"
            ) from None
        delay = min(delay, remaining)
        logger.warning("Cannot connect to the database (attempt %d: %s); retrying in "
                       "%.1f s.", backoff.failures, first_line(exc), delay)
        return delay

    return await retrying(attempt, backoff=backoff, on_failure=failed)


class Service:
    """One long-running part of the worker, with a connection of its own.

    Subclasses set :attr:`name` and implement :meth:`run_once`; most also implement
    :meth:`wait`, and set :attr:`failure` or override :meth:`failed` for their warning.
    """

    # The asyncio task is named "pgqueue-<name>".
    name: ClassVar[str]
    # The warning when a round failed: str.format with the error's first line and the
    # delay before the next try.
    failure: ClassVar[str] = "{name} failed ({error}); retrying in {delay:.2f} s."

    def __init__(self, *, connect: Connect, backoff: Backoff) -> None:
        self._connect = connect
        self.backoff = backoff
        self._conn: psycopg.AsyncConnection[Any] | None = None
        # One opening at a time: the connection may be asked for by two tasks at once
        # (the scheduler borrows the maintenance service's), and two openings would
        # leave one connection unreferenced and never closed.
        self._opening = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # True once the service has nothing more to do (a burst worker's producer).
        self.finished = False

    # -- the protocol ----------------------------------------------------------------------

    async def wait(self) -> None:
        """Return when the next round is due (default: at once)."""

    async def run_once(self) -> None:
        """One round of work; raise to fail it (a retryable error means: again, later)."""
        raise NotImplementedError

    def failed(self, error: str, delay: float) -> str:
        """Take note of a failed round; return the warning to log."""
        return self.failure.format(name=self.name.capitalize(), error=error, delay=delay)

    # -- the runtime -------------------------------------------------------------------------

    async def connection(self) -> psycopg.AsyncConnection[Any]:
        """The service's connection, opened now if it is closed."""
        if self._conn is None or self._conn.closed:
            async with self._opening:
                if self._conn is None or self._conn.closed:
                    self._conn = await self._connect()
        return self._conn

    async def close(self) -> None:
        """Close the connection (the next round opens a new one)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def run(self) -> None:
        """Rounds until :attr:`finished` or cancelled; the connection is closed at the end."""
        try:
            while not self.finished:
                await self.wait()
                await retrying(self.round, backoff=self.backoff, on_failure=self._failure)
        finally:
            await self.close()

    async def round(self) -> None:
        """One :meth:`run_once`; a failed round closes the connection, so the next one
        starts on a new connection."""
        try:
            await self.run_once()
        except Exception:
            await self.close()
            raise

    def _failure(self, exc: Exception, delay: float) -> float:
        logger.warning("%s", self.failed(first_line(exc), delay))
        return delay

    def start(self) -> asyncio.Task[None]:
        """Run the service in a task of the running loop; returns the task."""
        self._task = asyncio.create_task(self.run(), name=f"pgqueue-{self.name}")
        return self._task

    async def stop(self) -> None:
        """Cancel the service's task and wait for it to end (its connection closed).

        Its error, if it died of one, is not raised here: the runner reported it when the
        task ended.
        """
        task, self._task = self._task, None
        # Also end the loop by its own test: a cancellation can be lost (Python 3.11's
        # asyncio.wait_for returns its result instead of raising when the awaited event
        # is set in the same iteration as the cancel), and the loop would then go on.
        self.finished = True
        if task is not None:
            task.cancel()
            # gather, not a bare await: the task's own error or cancellation stays in the
            # task, while a cancellation of the caller still reaches the caller.
            await asyncio.gather(task, return_exceptions=True)
        await self.close()
