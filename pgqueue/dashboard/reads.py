"""Blocking reads run side by side, for a page or a scrape that needs more than one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import anyio

A = TypeVar("A")
B = TypeVar("B")


async def both(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """Two blocking reads at once, each in a worker thread on its own pooled connection:
    a page waits for the slower, not for their sum."""
    results: list[Any] = [None, None]

    async def run(index: int, read: Callable[[], Any]) -> None:
        results[index] = await anyio.to_thread.run_sync(read)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run, 0, first)
            group.start_soon(run, 1, second)
    except BaseExceptionGroup as failed:
        # The first failure as itself, so that the app's handlers map it (404, 503…).
        raise failed.exceptions[0] from None
    return results[0], results[1]
