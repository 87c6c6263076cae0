"""The HTML pages: overview, jobs, a job, dead jobs, queues, schedules, and the login form.

Reads call the same Queue methods as the API and the CLI. Writes are HTML forms that
POST and redirect back (303) with a ``notice`` or ``problem`` line; each form carries
the CSRF token (see ``security``), checked by :func:`_check_form` before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, Final
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from pgqueue import Queue
from pgqueue.errors import DuplicateJob, JobNotFound, PgQueueError
from pgqueue.operations import JobPage
from pgqueue.settings import parse_duration

from . import throughput
from .reads import both
from .security import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Access, bearer, same_secret
from .views import render

router = APIRouter(include_in_schema=False)

PAGE_SIZE: Final = 50
CsrfField = Annotated[str, Form(alias=CSRF_FIELD)]


def _queue(request: Request) -> Queue:
    return request.app.state.queue  # type: ignore[no-any-return]


def _blank(value: str | None) -> str | None:
    """A filter from a form: an empty field means no filter."""
    return value.strip() or None if value is not None else None


def _check_form(request: Request, token: str) -> Response | None:
    """403 unless the form's CSRF token matches the cookie (a bearer-authenticated
    request is not a browser's form, and the guard has checked its token)."""
    if bearer(request.headers.get("authorization")):
        return None
    if same_secret(token, request.cookies.get(CSRF_COOKIE)):
        return None
    return PlainTextResponse("the form's CSRF token does not match: reload the page and "
                             "try again", status_code=403)


def _back(path: str, **message: str) -> RedirectResponse:
    """Redirect after a write, with its outcome in one line."""
    query = f"?{urlencode(message)}" if message else ""
    return RedirectResponse(path + query, status_code=303)


# -- overview ---------------------------------------------------------------------------------


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> Response:
    """Queues (unfinished and dead jobs, oldest wait), throughput, workers."""
    queue = _queue(request)
    data, points = await both(queue.overview, partial(throughput.read, queue))
    return render(request, "overview.html", {
        "page": "overview", "overview": data, "hour": throughput.last_hour(points, data.now),
    })


# -- jobs ---------------------------------------------------------------------------------------


def _page_links(path: str, kept: dict[str, str], page: JobPage, cursor: str | None
                ) -> dict[str, str | None]:
    """A job list's ``next_url`` (None on the last page) and ``first_url`` (None on the
    first), keeping its filters."""
    next_url = None
    if page.next_cursor is not None:
        next_url = f"{path}?" + urlencode(kept | {"cursor": page.next_cursor})
    return {"next_url": next_url, "first_url": f"{path}?" + urlencode(kept) if cursor else None}


@router.get("/jobs", response_class=HTMLResponse)
def jobs(request: Request, status: str | None = None, queue: str | None = None,
         task: str | None = None, cursor: str | None = None) -> Response:
    """Jobs, newest first, filtered; a page at a time (keyset cursor)."""
    filters = {"status": _blank(status), "queue": _blank(queue), "task": _blank(task)}
    page = _queue(request).job_page(**filters, limit=PAGE_SIZE, cursor=_blank(cursor))
    kept = {name: value for name, value in filters.items() if value}
    return render(request, "jobs.html", {
        "page": "jobs", "jobs": page.jobs, "filters": filters,
        **_page_links("/jobs", kept, page, cursor),
    })


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job(request: Request, job_id: int) -> Response:
    """One job: arguments, meta and progress, attempts, error, timeline; cancel."""
    queue = _queue(request)
    found = queue.get_job(job_id)
    if found is None:
        raise JobNotFound(f"no job with id {job_id}")
    handle = queue.get_workflow(found.workflow_id) if found.workflow_id else None
    workflow = handle.describe() if handle is not None else None
    return render(request, "job.html", {"page": "jobs", "job": found, "workflow": workflow})


@router.post("/jobs/{job_id}/cancel")
def cancel(request: Request, job_id: int, csrf_token: CsrfField = "") -> Response:
    """Cancel the job: a queued one now, a running one at its worker's next heartbeat."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    queue = _queue(request)
    before = queue.get_job(job_id)
    if before is None:
        raise JobNotFound(f"no job with id {job_id}")
    if before.finished:
        return _back(f"/jobs/{job_id}", problem=f"job {job_id} is {before.status}: "
                                                 "nothing to cancel")
    after = queue.cancel_job(job_id)
    notice = (f"job {job_id} cancelled" if after.status == "cancelled" else
              f"cancellation of job {job_id} requested: its worker stops it at its next "
              "heartbeat")
    return _back(f"/jobs/{job_id}", notice=notice)


# -- dead jobs ------------------------------------------------------------------------------


@router.get("/dead", response_class=HTMLResponse)
def dead(request: Request, queue: str | None = None, cursor: str | None = None) -> Response:
    """Dead jobs, last failed first, with retry (one, or all of a queue) and purge."""
    name = _blank(queue)
    page = _queue(request).job_page(status="dead", queue=name, limit=PAGE_SIZE,
                                    cursor=_blank(cursor))
    kept = {"queue": name} if name else {}
    queues = _queue(request).dead_queues()
    return render(request, "dead.html", {
        "page": "dead", "jobs": page.jobs, "queue": name, "queues": queues,
        **_page_links("/dead", kept, page, cursor),
    })


@router.post("/dead/{job_id}/retry")
def retry(request: Request, job_id: int, csrf_token: CsrfField = "") -> Response:
    """Queue a dead job again (same id, attempts from 0) and show it."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    try:
        _queue(request).retry_dead_job(job_id)
    except (JobNotFound, DuplicateJob) as exc:
        return _back("/dead", problem=str(exc))
    return _back(f"/jobs/{job_id}", notice=f"dead job {job_id} queued again")


@router.post("/dead/retry")
def retry_all(request: Request, csrf_token: CsrfField = "",
              queue: Annotated[str, Form()] = "") -> Response:
    """Retry every dead job of a queue (every dead job when no queue is given)."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    name = _blank(queue)
    outcome = _queue(request).retry_dead(None, queue=name)
    where = f" of queue {name!r}" if name else ""
    message = {"notice": f"{len(outcome.retried)} dead job(s){where} queued again"}
    if outcome.refused:
        message["problem"] = f"{len(outcome.refused)} left dead: " + "; ".join(
            f"{job_id}: {refusal.message}" for job_id, refusal in sorted(outcome.refused.items())
        )[:300]
    return _back("/dead", **message)


@router.post("/dead/purge")
def purge(request: Request, csrf_token: CsrfField = "",
          older_than: Annotated[str, Form()] = "7d",
          queue: Annotated[str, Form()] = "") -> Response:
    """Delete dead jobs that failed longer ago than ``older_than`` (of one queue)."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    name = _blank(queue)
    try:
        seconds = parse_duration(older_than.strip(), what="older than")
    except PgQueueError as exc:
        return _back("/dead", problem=str(exc))
    purged = _queue(request).purge_dead(seconds, queue=name)
    where = f" of queue {name!r}" if name else ""
    return _back("/dead", notice=f"purged {purged} dead job(s){where} that failed more "
                                 f"than {older_than.strip()} ago")


# -- queues and schedules ----------------------------------------------------------------


@router.get("/queues", response_class=HTMLResponse)
def queues(request: Request) -> Response:
    """Every queue: paused or running, settings, counts; pause and resume."""
    return render(request, "queues.html", {"page": "queues", "queues": _queue(request).queues()})


@router.post("/queues/{name}/{action}")
def pause_queue(request: Request, name: str, action: str, csrf_token: CsrfField = ""
                ) -> Response:
    """Pause or resume a queue."""
    queue = _queue(request)
    return _pause_or_resume(request, csrf_token, "queue", name, action,
                            queue.pause_queue, queue.resume_queue)


@router.get("/schedules", response_class=HTMLResponse)
def schedules(request: Request) -> Response:
    """Periodic schedules: cron, next and last run, state; pause and resume."""
    return render(request, "schedules.html",
                  {"page": "schedules", "schedules": _queue(request).schedules()})


@router.post("/schedules/{name}/{action}")
def pause_schedule(request: Request, name: str, action: str, csrf_token: CsrfField = ""
                   ) -> Response:
    """Pause or resume a schedule."""
    queue = _queue(request)
    return _pause_or_resume(request, csrf_token, "schedule", name, action,
                            queue.pause_schedule, queue.resume_schedule)


def _pause_or_resume(request: Request, csrf_token: str, what: str, name: str, action: str,
                     pause: Callable[[str], object], resume: Callable[[str], object]
                     ) -> Response:
    """The form posts of the queues and schedules pages: check, act, go back."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    if action not in ("pause", "resume"):
        return PlainTextResponse(f"unknown action {action!r}: pause or resume",
                                 status_code=404)
    (pause if action == "pause" else resume)(name)
    return _back(f"/{what}s", notice=f"{what} {name!r} {action}d")


# -- login ----------------------------------------------------------------------------------


def login_url(request: Request) -> str:
    """The login form, coming back to the page asked for."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/login?next=" + quote(target, safe="")


def _local(target: str | None) -> str:
    """Where to go after logging in: a path on this server only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str | None = None) -> Response:
    """The token form (only useful when the dashboard has a token)."""
    return render(request, "login.html", {"page": "login", "next": _local(next)})


@router.post("/login")
def login(request: Request, csrf_token: CsrfField = "",
          token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = "/",
          ) -> Response:
    """Check the token; on success set the session cookie (HttpOnly, SameSite=Strict)."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    access: Access = request.app.state.access
    session = access.session_value
    if session is None:
        return _back("/")
    if not access.authenticated(f"Bearer {token}", None):
        context: dict[str, Any] = {"page": "login", "next": _local(next),
                                   "failed": "wrong token"}
        return render(request, "login.html", context, status_code=401)
    response = RedirectResponse(_local(next), status_code=303)
    response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


@router.post("/logout")
def logout(request: Request, csrf_token: CsrfField = "") -> Response:
    """Forget the session cookie."""
    refused = _check_form(request, csrf_token)
    if refused is not None:
        return refused
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
