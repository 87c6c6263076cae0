"""Tasks for the clock-skew tests (``tests/e2e/test_clock_skew.py``), run by real
``pgq worker -A clock_tasks:q`` processes whose clock ``faketime`` moves by minutes.

A code schedule every minute (its first tick is computed when the worker declares it),
a task that holds its job (leases), a task that returns at once (``run_at``), and one
under a rate limit of 4 starts a second (rate windows).
"""

from __future__ import annotations

import asyncio

from pgqueue import Queue

# No DSN here: ``pgq worker --dsn`` points the queue at the test's database.
q = Queue()


@q.periodic("* * * * *")
@q.task(name="clock.every_minute")
def every_minute() -> None:
    """The code schedule (its ticks are what is checked, not what it does)."""


@q.task(name="clock.hold")
async def hold(seconds: float) -> None:
    """Holds its job for ``seconds`` (the heartbeat must keep its lease alive)."""
    await asyncio.sleep(seconds)


@q.task(name="clock.noop")
async def noop(n: int) -> int:
    """Returns at once."""
    return n


@q.task(name="clock.limited", rate_limit="4/s")
async def limited(n: int) -> int:
    """At most 4 starts a second, spread evenly, on every worker together."""
    return n
