"""Tasks for the periodic-jobs end-to-end tests (``pgq worker -A periodic_tasks:q``).

One code schedule, every minute; one plain task that ``pgq periodic add`` schedules at
run time.
"""

from __future__ import annotations

from pgqueue import JobContext, Queue

q = Queue()


@q.periodic("* * * * *")
@q.task(name="every_minute")
def every_minute(ctx: JobContext) -> int:
    """The code schedule: returns its job id (a job per tick, whoever enqueued it)."""
    return ctx.job.id


@q.task(name="runtime_tick")
def runtime_tick(label: str) -> str:
    """Scheduled at run time, with an argument."""
    return label
