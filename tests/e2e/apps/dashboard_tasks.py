"""Tasks for the dashboard's browser tests (``pgq worker -A
tests.e2e.apps.dashboard_tasks:queue``)."""

from __future__ import annotations

import asyncio

from pgqueue import Queue

queue = Queue()


@queue.task(name="dash.add")
def add(a: int, b: int) -> int:
    """Quick work: a retried dead job of this task succeeds at once."""
    return a + b


@queue.task(name="dash.long")
async def long(seconds: float) -> None:
    """Runs until cancelled (or ``seconds`` pass)."""
    await asyncio.sleep(seconds)
