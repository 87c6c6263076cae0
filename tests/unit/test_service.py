"""The runtime every worker service shares: rounds, reconnection, backoff (no database).

A fake service runs on fake connections, so each rule of the retry policy is checked on
its own: a failed round closes its connection and the next round opens a new one; the
warning carries the first line of the error; a success resets the backoff; an error that
is not retryable ends the service; ``stop()`` closes everything.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import psycopg
import pytest

from pgqueue.errors import first_line
from pgqueue.worker.backoff import Backoff
from pgqueue.worker.service import Service, retrying


class FakeConnection:
    def __init__(self, number: int) -> None:
        self.number = number
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class Scripted(Service):
    """Runs the outcomes it is given, one per round: an exception to raise, or None."""

    name = "scripted"

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.opened: list[FakeConnection] = []

        async def connect() -> psycopg.AsyncConnection[Any]:
            self.opened.append(FakeConnection(len(self.opened) + 1))
            return cast("psycopg.AsyncConnection[Any]", self.opened[-1])

        super().__init__(connect=connect, backoff=Backoff(base=0.001, cap=0.002))
        self.outcomes = outcomes
        self.rounds: list[int] = []  # which connection each round ran on

    async def run_once(self) -> None:
        self.rounds.append(cast("FakeConnection", await self.connection()).number)
        outcome = self.outcomes.pop(0)
        if not self.outcomes:
            self.finished = True
        if outcome is not None:
            raise outcome


def test_first_line_of_an_exception() -> None:
    assert first_line(psycopg.OperationalError("\n  connection refused\nDETAIL: x")) == (
        "connection refused")
    assert first_line(OSError()) == "OSError"


async def test_a_failed_round_closes_its_connection_and_the_next_reconnects(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = psycopg.OperationalError("server closed the connection\nunexpectedly")
    service = Scripted([None, lost, lost, None, None])
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
        await asyncio.wait_for(service.run(), 5)
    # Round 2 failed on connection 1, round 3 on connection 2; 3 served the rest.
    assert service.rounds == [1, 1, 2, 3, 3]
    assert [c.closed for c in service.opened] == [True, True, True]  # all closed at the end
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert warnings[0].startswith("Scripted failed (server closed the connection); retrying in")
    assert service.backoff.failures == 0  # reset by the rounds that succeeded


async def test_an_error_that_is_not_retryable_ends_the_service() -> None:
    service = Scripted([None, ValueError("a bug"), None])
    with pytest.raises(ValueError, match="a bug"):
        await asyncio.wait_for(service.run(), 5)
    assert service.rounds == [1, 1]
    assert service.opened[0].closed


async def test_stop_cancels_the_running_service_and_closes_its_connection() -> None:
    class Forever(Scripted):
        async def run_once(self) -> None:
            self.rounds.append(cast("FakeConnection", await self.connection()).number)
            await asyncio.Event().wait()

    service = Forever([])
    task = service.start()
    assert task.get_name() == "pgqueue-scripted"
    while not service.rounds:
        await asyncio.sleep(0)
    await service.stop()
    assert task.cancelled()
    assert service.opened[0].closed


async def test_retrying_gives_up_when_on_failure_raises() -> None:
    calls: list[float] = []

    async def attempt() -> int:
        raise psycopg.OperationalError("down")

    def on_failure(exc: Exception, delay: float) -> float:
        calls.append(delay)
        if len(calls) == 3:
            raise TimeoutError("gave up")
        return 0.0

    with pytest.raises(TimeoutError, match="gave up"):
        await retrying(attempt, backoff=Backoff(base=0.1, cap=0.4), on_failure=on_failure)
    assert len(calls) == 3
    assert 0.05 <= calls[0] <= 0.1 and 0.2 <= calls[2] <= 0.4  # capped exponential


class Sleeper(Service):
    """Waits for an event with asyncio.wait_for in every round, as a service might."""

    name = "sleeper"

    def __init__(self) -> None:
        async def connect() -> psycopg.AsyncConnection[Any]:
            return cast("psycopg.AsyncConnection[Any]", FakeConnection(1))

        super().__init__(connect=connect, backoff=Backoff())
        self.event = asyncio.Event()
        self.waiting = asyncio.Event()

    async def run_once(self) -> None:
        self.waiting.set()
        await asyncio.wait_for(self.event.wait(), 10)
        self.event.clear()


async def test_stop_ends_a_service_whose_cancellation_is_swallowed() -> None:
    # Python 3.11's wait_for returns the awaited result instead of raising when the
    # event is set in the same iteration as the cancel; the cancellation is then lost.
    # stop() must end the service anyway (it hung a worker's shutdown before).
    service = Sleeper()
    service.start()
    await asyncio.wait_for(service.waiting.wait(), 5)
    service.event.set()
    await asyncio.wait_for(service.stop(), 5)
