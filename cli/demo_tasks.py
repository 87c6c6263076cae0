"""The sample tasks ``pgq demo`` runs: one of each behaviour a newcomer should see.

They live on their own Queue so that the demo never mixes with the user's tasks; ``pgq
demo`` points it at the database it uses and gives each run a fresh queue name.
"""

from __future__ import annotations

import hashlib

from pgqueue import JobContext, Queue

queue = Queue()

# Short retry delays keep the demo quick; real tasks use exponential backoff.
_NO_WAIT = [0]
# Demo results need not outlive the demo by much.
_RESULT_TTL = 3600


@queue.task(name="demo.ping", result_ttl=_RESULT_TTL)
async def ping(n: int) -> int:
    """The fast path: an async task that does nothing but return."""
    return n


@queue.task(name="demo.checksum", result_ttl=_RESULT_TTL)
def checksum(n: int) -> str:
    """A sync task (run in the worker's thread pool) doing a little CPU work."""
    return hashlib.sha256(f"pgqueue-demo-{n}".encode()).hexdigest()[:16]


@queue.task(name="demo.flaky", retry_intervals=_NO_WAIT, result_ttl=_RESULT_TTL)
async def flaky(n: int, ctx: JobContext) -> str:
    """Fails its first attempt and succeeds on the retry: what transient errors look like."""
    if ctx.attempt == 1:
        raise ConnectionError(f"demo: simulated transient failure of job {n}")
    return f"succeeded on attempt {ctx.attempt}"


@queue.task(name="demo.doomed", max_attempts=2, retry_intervals=_NO_WAIT)
def doomed(n: int) -> None:
    """Always fails: after its two attempts the job lands in dead_jobs."""
    raise ValueError(f"demo: job {n} always fails, so it ends up dead")
