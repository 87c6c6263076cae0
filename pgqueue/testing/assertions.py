"""``assert_enqueued`` / ``assert_not_enqueued``: what waits in the queue, read from the
database with the same query as ``q.list_jobs`` (never a record kept on the side)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_core import to_jsonable_python

from pgqueue.job import Job
from pgqueue.operations import list_jobs
from pgqueue.serialization import dumps, loads
from pgqueue.task import Task

# Jobs that were enqueued and have not run yet (a retrying job waits to run again).
WAITING = frozenset({"queued", "scheduled", "retrying", "waiting"})
_LIMIT = 10_000


def _as_stored(value: Any) -> Any:
    """``value`` as a job stores it: JSON round-tripped (tuples become lists, pydantic
    models and datetimes their JSON form), so an expectation compares like the row."""
    return loads(dumps(to_jsonable_python(value)))


def _waiting_jobs(task: Task[Any, Any], conn: object | None) -> list[Job]:
    queue = task.queue
    rows = queue.run_plan(list_jobs(queue.queries, status=None, queue=None, task=task.name,
                                    limit=_LIMIT), conn=conn)
    jobs = [Job.from_row(row, queue) for row in rows]
    return sorted((job for job in jobs if job.status in WAITING), key=lambda job: job.id)


def _matching(
    jobs: list[Job], args: Sequence[Any] | None, kwargs: dict[str, Any] | None,
    queue: str | None,
) -> list[Job]:
    wanted_args = None if args is None else _as_stored(list(args))
    wanted_kwargs = None if kwargs is None else _as_stored(dict(kwargs))
    return [
        job for job in jobs
        if (wanted_args is None or job.args == wanted_args)
        and (wanted_kwargs is None or job.kwargs == wanted_kwargs)
        and (queue is None or job.queue == queue)
    ]


def _describe(task: Task[Any, Any], jobs: list[Job]) -> str:
    if not jobs:
        return f"no job of task {task.name!r} waits to run"
    lines = [f"  job {job.id} ({job.status}, queue {job.queue!r}): args={job.args!r} "
             f"kwargs={job.kwargs!r}" for job in jobs[:20]]
    more = f"\n  ... and {len(jobs) - 20} more" if len(jobs) > 20 else ""
    return f"jobs of task {task.name!r} waiting to run:\n" + "\n".join(lines) + more


def _wanted(args: Sequence[Any] | None, kwargs: dict[str, Any] | None,
            queue: str | None) -> str:
    parts = [f"args={list(args)!r}" if args is not None else "",
             f"kwargs={kwargs!r}" if kwargs is not None else "",
             f"queue={queue!r}" if queue is not None else ""]
    return ", ".join(p for p in parts if p) or "any arguments"


def assert_enqueued(
    task: Task[Any, Any],
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    count: int | None = None,
    conn: object | None = None,
) -> list[Job]:
    """Assert that a job of ``task`` waits to run (queued, scheduled or retrying) and
    return the matching jobs, oldest first.

    ``args`` (a list) and ``kwargs`` (a dict), when given, must equal the job's as
    stored: positional arguments in ``args``, keyword ones in ``kwargs``, exactly as the
    caller passed them. ``count``: exactly that many match. ``conn``: look from that
    connection (``conn=`` of enqueue), e.g. to see a job its uncommitted transaction
    holds.
    """
    jobs = _waiting_jobs(task, conn)
    found = _matching(jobs, args, kwargs, queue)
    wanted = _wanted(args, kwargs, queue)
    if not found:
        raise AssertionError(f"expected a job of task {task.name!r} with {wanted}; "
                             + _describe(task, jobs))
    if count is not None and len(found) != count:
        raise AssertionError(f"expected {count} job(s) of task {task.name!r} with {wanted}, "
                             f"found {len(found)}; " + _describe(task, jobs))
    return found


def assert_not_enqueued(
    task: Task[Any, Any],
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    conn: object | None = None,
) -> None:
    """Assert that no job of ``task`` (with these arguments, if given) waits to run."""
    jobs = _waiting_jobs(task, conn)
    found = _matching(jobs, args, kwargs, queue)
    if found:
        raise AssertionError(f"expected no job of task {task.name!r} with "
                             f"{_wanted(args, kwargs, queue)}; " + _describe(task, found))
