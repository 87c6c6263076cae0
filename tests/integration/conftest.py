"""Fixtures shared by the integration tests: a Queue on this test's fresh database.

A test file that needs a different Queue (another schema, tasks registered up front, an
async-only set-up under the name ``q``) defines its own fixture, which takes precedence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pgqueue import Queue


@pytest.fixture
def q(dsn: str) -> Iterator[Queue]:
    """A Queue for sync code; its pool is closed after the test."""
    queue = Queue(dsn=dsn)
    try:
        yield queue
    finally:
        queue.close()


@pytest.fixture
async def aq(dsn: str) -> AsyncIterator[Queue]:
    """A Queue for async code; its pools are closed on the test's event loop."""
    queue = Queue(dsn=dsn)
    try:
        yield queue
    finally:
        await queue.close_async()
