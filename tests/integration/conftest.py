"""Fixtures shared by the integration tests: a Queue on this test's fresh database.

``q`` is for sync tests, ``aq`` for async ones (its pools close on the test's loop);
both use the ``schema`` fixture, so a file that overrides ``schema`` gets Queues in that
schema. A file that needs another Queue (tasks registered up front) defines its own
fixture, which takes precedence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pgqueue import Queue


@pytest.fixture
def q(dsn: str, schema: str) -> Iterator[Queue]:
    """A Queue for sync code; its pool is closed after the test."""
    queue = Queue(dsn=dsn, schema=schema)
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
async def aq(dsn: str, schema: str) -> AsyncIterator[Queue]:
    """A Queue for async code; its pools are closed on the test's event loop."""
    queue = Queue(dsn=dsn, schema=schema)
    try:
        yield queue
    finally:
        await queue.close_async()
