"""The JSON API (contract §7/§8): each endpoint calls the Queue method the matching CLI
command calls and returns that result's ``to_dict()``.

Lists are ``{"jobs": [...]}`` (plus ``next_cursor``, the keyset cursor of the next page);
a POST returns the job it changed; unknown ids are 404; bad filters 400 or 422 with
``{"error": "<one line>"}``.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from pgqueue import Queue
from pgqueue.errors import JobNotFound
from pgqueue.settings import parse_duration

from . import metrics
from .reads import both
from .throughput import read as read_last_hour

router = APIRouter()

# The most jobs one page of a list returns.
MAX_PAGE: Final = 500

Status = Annotated[str | None, Query(description="An API status: queued, scheduled, running, "
                                     "retrying, waiting, succeeded, cancelled or dead.")]
QueueName = Annotated[str | None, Query(description="Only jobs of this queue.")]
TaskName = Annotated[str | None, Query(description="Only jobs of this task.")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description="Jobs per page.")]
Cursor = Annotated[str | None, Query(description="next_cursor of the previous page.")]


def _queue(request: Request) -> Queue:
    return request.app.state.queue  # type: ignore[no-any-return]


@router.get("/api/stats", tags=["queues"], summary="Per-queue counts (pgq stats --json)")
def stats(request: Request) -> dict[str, Any]:
    """``{"queues": [...]}``: the objects of ``pgq stats --json``."""
    return {"queues": [entry.to_dict() for entry in _queue(request).stats()]}


@router.get("/api/overview", tags=["queues"],
            summary="Unfinished and dead jobs per queue, workers, throughput")
def overview(request: Request) -> dict[str, Any]:
    """What the overview page shows, from indexes only (cheap on a large table)."""
    return _queue(request).overview().to_dict()


@router.get("/api/throughput", tags=["queues"],
            summary="Job outcomes per minute, queue and outcome (from job_counts)")
def throughput(request: Request,
               minutes: Annotated[int, Query(ge=1, le=7 * 24 * 60)] = 60,
               queue: QueueName = None, task: TaskName = None) -> dict[str, Any]:
    """``{"throughput": [{minute, queue, outcome, count}]}``, oldest first; sparse (a
    minute without outcomes has no point)."""
    points = _queue(request).throughput(minutes=minutes, queue=queue, task=task)
    return {"throughput": [point.to_dict() for point in points]}


@router.get("/api/jobs", tags=["jobs"], summary="Jobs, newest first (pgq jobs list --json)")
def jobs(request: Request, status: Status = None, queue: QueueName = None,
         task: TaskName = None, limit: Limit = 50, cursor: Cursor = None) -> dict[str, Any]:
    """``{"jobs": [...], "next_cursor": ...}``; pass ``cursor`` for the next page. An
    empty filter (``?status=&queue=``) is no filter."""
    page = _queue(request).job_page(status=status or None, queue=queue or None,
                                    task=task or None, limit=limit, cursor=cursor or None)
    return page.to_dict()


@router.get("/api/jobs/{job_id}", tags=["jobs"], summary="One job (pgq jobs show --json)")
def job(request: Request, job_id: int) -> dict[str, Any]:
    """The live or dead job; 404 if unknown."""
    found = _queue(request).get_job(job_id)
    if found is None:
        raise JobNotFound(f"no job with id {job_id}")
    return found.to_dict()


@router.post("/api/jobs/{job_id}/cancel", tags=["jobs"], summary="Cancel a job")
def cancel(request: Request, job_id: int) -> dict[str, Any]:
    """Queued → cancelled; running → cancellation requested; finished → unchanged. The job."""
    return _queue(request).cancel_job(job_id).to_dict()


@router.get("/api/workflows/{workflow_id}", tags=["jobs"],
            summary="A workflow and its steps (pgq workflows show --json)")
def workflow(request: Request, workflow_id: int) -> dict[str, Any]:
    """``{id, kind, outputs, returns_list, status, steps: [...]}``; 404 once its last
    step is gone."""
    handle = _queue(request).get_workflow(workflow_id)
    if handle is None:
        raise JobNotFound(f"no workflow with id {workflow_id}")
    return handle.describe()


@router.get("/api/dead", tags=["dead jobs"], summary="Dead jobs, last failed first")
def dead(request: Request, queue: QueueName = None, task: TaskName = None,
         limit: Limit = 50, cursor: Cursor = None) -> dict[str, Any]:
    """``{"jobs": [...], "next_cursor": ...}`` of ``pgq dead list --json`` objects."""
    page = _queue(request).job_page(status="dead", queue=queue or None, task=task or None,
                                    limit=limit, cursor=cursor or None)
    return page.to_dict()


@router.post("/api/dead/{job_id}/retry", tags=["dead jobs"], summary="Retry one dead job")
def retry(request: Request, job_id: int) -> dict[str, Any]:
    """The job, queued again with the same id; 404 if no dead job has it, 409 when a newer
    live job holds its idempotency key."""
    return _queue(request).retry_dead_job(job_id).to_dict()


@router.post("/api/dead/retry", tags=["dead jobs"],
             summary="Retry every dead job (of one queue)")
def retry_all(request: Request, queue: QueueName = None) -> dict[str, Any]:
    """``{"retried": [ids], "refused": [{id, reason}]}`` (pgq dead retry --all --json)."""
    return _queue(request).retry_dead(None, queue=queue).to_dict()


@router.post("/api/dead/purge", tags=["dead jobs"], summary="Delete old dead jobs")
def purge(request: Request,
          older_than: Annotated[str, Query(description="30s, 15m, 1h, 7d or seconds")],
          queue: QueueName = None) -> dict[str, int]:
    """``{"purged": n}`` (pgq dead purge --json)."""
    seconds = parse_duration(older_than, what="older_than")
    return {"purged": _queue(request).purge_dead(seconds, queue=queue)}


@router.get("/api/queues", tags=["queues"], summary="Queues (pgq queues list --json)")
def queues(request: Request) -> dict[str, Any]:
    """``{"queues": [...]}``: state, settings and counts of every queue."""
    return {"queues": [info.to_dict() for info in _queue(request).queues()]}


@router.post("/api/queues/{name}/pause", tags=["queues"], summary="Pause a queue")
def pause_queue(request: Request, name: str) -> dict[str, Any]:
    """The queue's state afterwards."""
    return _queue(request).pause_queue(name).to_dict()


@router.post("/api/queues/{name}/resume", tags=["queues"], summary="Resume a queue")
def resume_queue(request: Request, name: str) -> dict[str, Any]:
    """The queue's state afterwards."""
    return _queue(request).resume_queue(name).to_dict()


@router.get("/api/workers", tags=["workers"], summary="Worker processes (pgq workers --json)")
def workers(request: Request) -> dict[str, Any]:
    """``{"workers": [...]}``."""
    return {"workers": [worker.to_dict() for worker in _queue(request).workers()]}


@router.get("/api/schedules", tags=["schedules"],
            summary="Periodic schedules (pgq periodic list --json)")
def schedules(request: Request) -> dict[str, Any]:
    """``{"schedules": [...]}``."""
    return {"schedules": [entry.to_dict() for entry in _queue(request).schedules()]}


@router.post("/api/schedules/{name}/pause", tags=["schedules"], summary="Pause a schedule")
def pause_schedule(request: Request, name: str) -> dict[str, Any]:
    """The schedule afterwards; 404 if unknown."""
    return _queue(request).pause_schedule(name).to_dict()


@router.post("/api/schedules/{name}/resume", tags=["schedules"], summary="Resume a schedule")
def resume_schedule(request: Request, name: str) -> dict[str, Any]:
    """The schedule afterwards; 404 if unknown."""
    return _queue(request).resume_schedule(name).to_dict()


@router.get("/metrics", tags=["operations"], summary="Prometheus metrics from the database",
            response_class=Response)
async def prometheus(request: Request) -> Response:
    """Queue depth by status, oldest ready job's age and dead jobs per queue, and live
    workers, read from the database at scrape time (see ``dashboard.metrics``)."""
    queue = _queue(request)
    data, points = await both(queue.overview, partial(read_last_hour, queue))
    body, content_type = metrics.exposition(data, points)
    return Response(body, media_type=content_type)
