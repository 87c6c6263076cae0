"""Tasks for the CLI end-to-end tests (``pgq worker -A tests.e2e.apps.cli_tasks:queue``).

The Queue has no DSN of its own: every test passes ``--dsn`` to the command, which is the
path a real deployment takes when ``PGQUEUE_DSN`` is not set.
"""

from __future__ import annotations

from pgqueue import Discard, JobContext, Queue

queue = Queue()


@queue.task(name="add")
def add(a: int, b: int) -> int:
    """A sync task with annotated arguments (so ``pgq enqueue -A`` validates them)."""
    return a + b


@queue.task(name="async_echo")
async def async_echo(value: object) -> object:
    """An async task returning its argument unchanged."""
    return value


@queue.task(name="doomed", max_attempts=1)
def doomed(ctx: JobContext, reason: str = "doomed on purpose") -> None:
    """Always fails at once, to make dead jobs for ``pgq dead …``; records one step
    first, so that its dead jobs have steps to keep and to purge."""
    ctx.step("reason", str, reason)
    raise Discard(reason)


@queue.task(name="reports.build", queue="reports", priority=3)
def build_report(n: int) -> int:
    """A task with a dotted name and options of its own (its queue, its priority)."""
    return n
