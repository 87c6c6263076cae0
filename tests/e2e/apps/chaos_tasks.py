"""Tasks for the chaos tests, run by real ``pgq worker -A chaos_tasks:q`` subprocesses.

Every task first records that it started, in the table ``chaos_runs`` of the test's
database, through its own autocommit connection (``CHAOS_RECORD_DSN``). The row is
committed before the task does anything else, so it survives the worker being killed a
moment later: counting the rows per job counts executions, which is how the tests see
duplicates and losses. The tables are created by the test (see ``tests/e2e/_chaos.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
import time
from typing import Any

import psycopg

from pgqueue import JobContext, Queue

# No DSN here: ``pgq worker --dsn`` points the queue at the test's database.
q = Queue()

_RECORD = """
    INSERT INTO chaos_runs (job_id, worker_pid, attempt, task)
    VALUES (%(job_id)s, %(pid)s, %(attempt)s, %(task)s)
"""

_async_conn: psycopg.AsyncConnection[Any] | None = None
_async_lock: asyncio.Lock | None = None
_sync_conn: psycopg.Connection[Any] | None = None
_sync_lock = threading.Lock()


def _record_dsn() -> str:
    return os.environ["CHAOS_RECORD_DSN"]


def _params(ctx: JobContext) -> dict[str, Any]:
    return {"job_id": ctx.job.id, "pid": os.getpid(), "attempt": ctx.attempt,
            "task": ctx.job.task}


async def record_run(ctx: JobContext) -> None:
    """Commit a ``chaos_runs`` row for this execution (async tasks)."""
    global _async_conn, _async_lock
    if _async_lock is None:
        _async_lock = asyncio.Lock()
    async with _async_lock:
        if _async_conn is None or _async_conn.closed or _async_conn.broken:
            _async_conn = await psycopg.AsyncConnection.connect(
                _record_dsn(), autocommit=True, connect_timeout=10
            )
        try:
            await _async_conn.execute(_RECORD, _params(ctx))
        except psycopg.OperationalError:
            await _async_conn.close()  # reconnect on next use; this attempt fails
            raise


def record_run_sync(ctx: JobContext) -> None:
    """Commit a ``chaos_runs`` row for this execution (sync tasks, any thread)."""
    global _sync_conn
    with _sync_lock:
        if _sync_conn is None or _sync_conn.closed or _sync_conn.broken:
            _sync_conn = psycopg.connect(_record_dsn(), autocommit=True, connect_timeout=10)
        try:
            _sync_conn.execute(_RECORD, _params(ctx))
        except psycopg.OperationalError:
            _sync_conn.close()
            raise


@q.task(name="chaos.job")
async def chaos_job(n: int, ctx: JobContext) -> int:
    """A short job whose one database effect commits with its completion.

    The run row is at-least-once; the ``chaos_effects`` row is written inside
    ``ctx.transaction()`` and so exists exactly once per job however often it ran.
    """
    await record_run(ctx)
    await asyncio.sleep(random.uniform(0.03, 0.12))
    async with ctx.transaction() as conn:
        await conn.execute(
            "INSERT INTO chaos_effects (job_id, worker_pid, attempt) VALUES (%s, %s, %s)",
            (ctx.job.id, os.getpid(), ctx.attempt),
        )
    return n


@q.task(name="chaos.hold")
async def hold(seconds: float, ctx: JobContext) -> dict[str, int]:
    """Run for ``seconds``, then return who ran it."""
    await record_run(ctx)
    await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@q.task(name="chaos.hold_first_attempt")
async def hold_first_attempt(seconds: float, ctx: JobContext) -> dict[str, int]:
    """Run for ``seconds`` on attempt 1 only; later attempts return at once."""
    await record_run(ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@q.task(name="chaos.hold_sync")
def hold_sync(seconds: float, ctx: JobContext) -> dict[str, int]:
    """A synchronous task (runs in a worker thread) that blocks for ``seconds``."""
    record_run_sync(ctx)
    time.sleep(seconds)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@q.task(name="chaos.long_transaction")
async def long_transaction(seconds: float, ctx: JobContext) -> dict[str, int]:
    """Hold ``ctx.transaction()`` (and so the job's row lock) open for ``seconds``."""
    await record_run(ctx)
    async with ctx.transaction() as conn:
        await conn.execute(
            "INSERT INTO chaos_effects (job_id, worker_pid, attempt) VALUES (%s, %s, %s)",
            (ctx.job.id, os.getpid(), ctx.attempt),
        )
        await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "attempt": ctx.attempt}


@q.task(name="chaos.noop")
async def noop(n: int) -> int:
    """Returns at once: a drain of these is all claims and outcomes."""
    return n


@q.task(name="chaos.noop_sync")
def noop_sync(n: int) -> int:
    """Returns at once, from a thread of the worker's pool."""
    return n


@q.task(name="chaos.exit", max_attempts=1)
async def exit_async(code: int) -> None:
    """Calls sys.exit from a coroutine: it must fail this attempt, not end the worker."""
    raise SystemExit(code)


@q.task(name="chaos.exit_sync", max_attempts=1)
def exit_sync(code: int) -> None:
    """Calls sys.exit from a pool thread."""
    raise SystemExit(code)


@q.task(name="chaos.interrupt", max_attempts=1)
async def interrupt() -> None:
    """Raises KeyboardInterrupt as if Ctrl-C landed inside the task."""
    raise KeyboardInterrupt


@q.task(name="chaos.busy_sync", timeout=0.5, max_attempts=1)
def busy_sync(seconds: float, ctx: JobContext) -> None:
    """Ignores its timeout: a thread that keeps running for ``seconds`` regardless."""
    record_run_sync(ctx)
    time.sleep(seconds)


@q.task(name="chaos.deaf", timeout=0.5, max_attempts=1)
async def deaf(seconds: float, ctx: JobContext) -> None:
    """Swallows every cancellation for ``seconds``."""
    await record_run(ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)


@q.task(name="chaos.deaf_forever", max_attempts=3)
async def deaf_forever(ctx: JobContext) -> None:
    """No timeout, and swallows every cancellation: only abandoning it ends a stop."""
    await record_run(ctx)
    while True:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)


async def _step_run(ctx: JobContext, name: str) -> str:
    """A step's function: commits a ``chaos_runs`` row named after the step (so the test
    counts each step's executions), returns which process ran it."""
    params = _params(ctx) | {"task": f"{ctx.job.task}:{name}"}
    async with await psycopg.AsyncConnection.connect(
        _record_dsn(), autocommit=True, connect_timeout=10
    ) as conn:
        await conn.execute(_RECORD, params)
    return f"{name}@{os.getpid()}"


@q.task(name="chaos.three_steps")
async def three_steps(hold: float, ctx: JobContext) -> list[str]:
    """Three ``ctx.step``s; on attempt 1 it waits ``hold`` seconds after the second (the
    test kills the worker there), so a later attempt must run only the third."""
    await record_run(ctx)
    done = []
    for name in ("first", "second", "third"):
        done.append(await ctx.step(name, _step_run, ctx, name))
        if name == "second" and ctx.attempt == 1:
            await asyncio.sleep(hold)
    return done


# -- Workflow steps (tests/e2e/test_workflows_processes.py) --------------------------------


@q.task(name="chaos.member", max_attempts=5, retry_intervals=[0.05])
async def member(n: int, ctx: JobContext) -> int:
    """A workflow member: n squared, after a short while; multiples of 5 fail their first
    attempt, so retries happen inside workflows."""
    await record_run(ctx)
    await asyncio.sleep(random.uniform(0.01, 0.05))
    if n % 5 == 0 and ctx.attempt == 1:
        raise RuntimeError(f"member {n} fails its first attempt")
    return n * n


@q.task(name="chaos.slow_member")
async def slow_member(n: int, seconds: float, ctx: JobContext) -> int:
    """A workflow member that takes ``seconds``: long enough to be killed holding it."""
    await record_run(ctx)
    await asyncio.sleep(seconds)
    return n


@q.task(name="chaos.collect")
async def collect(results: list[Any], ctx: JobContext) -> dict[str, Any]:
    """A chord callback: what it received, and how often it ran (see chaos_runs)."""
    await record_run(ctx)
    return {"count": len(results), "results": results}
