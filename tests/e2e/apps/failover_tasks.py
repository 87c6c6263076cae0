"""The task of the failover scenario (``tests/e2e/_failover.py``), run by real
``pgq worker -A failover_tasks:q`` subprocesses on a primary/standby pair's DSN.

Its one effect, a ``failover_effects`` row, commits inside ``ctx.transaction()`` with the
job's completion. The row names the producer's sequence number ``n`` as well as the job
id: after a lossy failover PostgreSQL hands out ids again (its sequence restarts from
what the standby had), so only ``n`` tells two enqueues apart across the failover.
"""

from __future__ import annotations

import asyncio
import os

from pgqueue import JobContext, Queue

# No DSN here: ``pgq worker --dsn`` points the queue at the pair.
q = Queue()

EFFECTS = """
    CREATE TABLE failover_effects (
        job_id bigint NOT NULL,
        n bigint NOT NULL,
        worker_pid int NOT NULL,
        attempt int NOT NULL
    )
"""


# Five attempts: a job whose attempt fails on a connection the failover broke (a pooled
# connection to the dead primary) runs again soon; what this scenario judges is the
# failover.
@q.task(name="failover.effect", max_attempts=5, retry_intervals=[0.2])
async def effect(n: int, seconds: float, ctx: JobContext) -> int:
    """Work for ``seconds``, then commit the effect together with the completion."""
    await asyncio.sleep(seconds)
    async with ctx.transaction() as conn:
        await conn.execute(
            "INSERT INTO failover_effects (job_id, n, worker_pid, attempt) "
            "VALUES (%s, %s, %s, %s)",
            (ctx.job.id, n, os.getpid(), ctx.attempt),
        )
    return n
