"""The dashboard's web application: one FastAPI app serving pages, the JSON API,
``/metrics`` and ``/healthz``.

Every read and write goes through the :class:`~pgqueue.Queue` methods that the CLI calls
(which run the plans of ``pgqueue.stats``, ``operations``, ``dead_jobs``, ``queues`` and
``schedules``), and every JSON object is a result's own ``to_dict()``: the API cannot
drift from ``pgq … --json``. No SQL lives here. Handlers are plain functions: FastAPI
runs them in its thread pool, on the Queue's connection pool.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import anyio
import psycopg
import psycopg_pool
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

import pgqueue
from pgqueue import Queue
from pgqueue.errors import (
    ConfigurationError,
    DuplicateJob,
    JobNotFound,
    PgQueueError,
    ScheduleNotFound,
    SchemaOutOfDate,
    first_line,
)

from . import api, pages, views
from .security import (
    CSRF_COOKIE,
    CSRF_HEADER,
    SESSION_COOKIE,
    Access,
    bearer,
    cross_site,
    new_csrf_token,
    same_secret,
)

HERE: Final = Path(__file__).parent
# Paths anyone may fetch: probes, the login form, and the script and style it uses.
_OPEN_PATHS: Final = frozenset({"/healthz", "/login"})
# On every response: scripts and styles from the dashboard only (its pages use no inline
# script), no framing by another site (its buttons cannot be clickjacked), no sniffing.
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
# How long /healthz waits for the database before it answers 503.
HEALTH_TIMEOUT: Final = 5.0


def create_app(queue: Queue, access: Access | None = None, *, refresh_seconds: float = 3.0
               ) -> FastAPI:
    """The dashboard for ``queue``'s database, guarded by ``access`` (default: open, any
    Host: for tests and embedding behind your own authentication)."""
    rules = access or Access()
    app = FastAPI(
        title="pgqueue dashboard",
        version=pgqueue.__version__,
        description="Queues, jobs, dead jobs, schedules and workers of one pgqueue schema. "
                    "JSON objects are those of `pgq … --json`.",
        docs_url=None,  # Swagger UI would load its script from a CDN: the schema is enough
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.queue = queue
    app.state.access = rules
    app.state.refresh_seconds = refresh_seconds
    templates = Jinja2Templates(directory=HERE / "templates")
    views.configure(templates)
    app.state.templates = templates
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(api.router)
    app.include_router(pages.router)
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["operations"],
                      summary="200 when the database answers, 503 otherwise")
    _add_error_handlers(app)
    app.middleware("http")(_guard)
    return app


async def healthz(request: Request) -> JSONResponse:
    """Whether the dashboard reaches its database (and its schema is migrated)."""
    queue: Queue = request.app.state.queue
    try:
        with anyio.fail_after(HEALTH_TIMEOUT):
            await anyio.to_thread.run_sync(queue.check_schema, abandon_on_cancel=True)
    except TimeoutError:
        return JSONResponse({"status": "unavailable",
                             "error": f"no answer from the database in {HEALTH_TIMEOUT:g}s"},
                            status_code=503)
    except (psycopg.Error, PgQueueError) as exc:
        return JSONResponse({"status": "unavailable", "error": first_line(exc)},
                            status_code=503)
    return JSONResponse({"status": "ok"})


def _wants_html(request: Request) -> bool:
    path = request.url.path
    return not (path.startswith("/api/") or path in ("/metrics", "/openapi.json"))


async def _guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]
                 ) -> Response:
    """Host check, authentication and cross-site checks, before any handler runs (see
    ``security``); hands the page its CSRF token and sets the cookie that holds it."""
    rules: Access = request.app.state.access
    if not rules.host_allowed(request.headers.get("host")):
        return PlainTextResponse("unexpected Host header: use http://127.0.0.1:<port>/",
                                 status_code=403)
    path = request.url.path
    public = path in _OPEN_PATHS or path.startswith("/static/")
    authorization = request.headers.get("authorization")
    if not public and not rules.authenticated(authorization, request.cookies.get(SESSION_COOKIE)):
        if _wants_html(request) and request.method == "GET":
            return RedirectResponse(pages.login_url(request), status_code=303)
        return JSONResponse(
            {"error": "authentication required: send Authorization: Bearer <token> "
                      "(the PGQUEUE_DASHBOARD_TOKEN)"},
            status_code=401, headers={"WWW-Authenticate": "Bearer"},
        )
    if request.method not in ("GET", "HEAD", "OPTIONS") and not bearer(authorization):
        own = {request.headers.get("host", "")}
        if cross_site(request.headers.get("origin"), request.headers.get("sec-fetch-site"),
                      own):
            return _refuse(request, "cross-site request refused")
        if (path.startswith("/api/") and SESSION_COOKIE in request.cookies
                and not same_secret(request.headers.get(CSRF_HEADER),
                                    request.cookies.get(CSRF_COOKIE))):
            return _refuse(request, "an API write with the session cookie needs the "
                                    "X-CSRF-Token header (the pgq_csrf cookie's value)")
    known = request.cookies.get(CSRF_COOKIE)
    request.state.csrf = known or new_csrf_token()
    response = await call_next(request)
    response.headers.update(SECURITY_HEADERS)
    if not known:
        response.set_cookie(CSRF_COOKIE, request.state.csrf, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
    return response


def _refuse(request: Request, message: str) -> Response:
    if _wants_html(request):
        return PlainTextResponse(message, status_code=403)
    return JSONResponse({"error": message}, status_code=403)


# Library exceptions → status codes, for the API and the pages alike.
_STATUS: Final[tuple[tuple[type[Exception], int], ...]] = (
    (SchemaOutOfDate, 503),  # not migrated (or older than this code): "run pgq migrate"
    (JobNotFound, 404),
    (ScheduleNotFound, 404),
    (DuplicateJob, 409),
    (ConfigurationError, 400),
)


def _add_error_handlers(app: FastAPI) -> None:
    for kind, status in _STATUS:
        app.add_exception_handler(kind, _handler(status))
    app.add_exception_handler(RequestValidationError, _invalid)
    # A dashboard run as the read-only monitor role: its buttons say why they do nothing.
    app.add_exception_handler(psycopg.errors.InsufficientPrivilege,
                              _handler(403, "the dashboard's database role may not do this: "))
    app.add_exception_handler(psycopg.OperationalError, _handler(503, "database unavailable: "))
    app.add_exception_handler(psycopg_pool.PoolTimeout, _handler(503, "database unavailable: "))


def _handler(status: int, prefix: str = "") -> Callable[[Request, Any], Response]:
    def handle(request: Request, exc: Any) -> Response:
        return _error(request, status, prefix + first_line(exc))

    return handle


def _invalid(request: Request, exc: Any) -> Response:
    """FastAPI's validation errors, as one line naming the parameter and what it takes."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ())[1:]) or "request"
        problems.append(f"invalid {where} {error.get('input')!r}: {error.get('msg', '')}")
    return _error(request, 422, "; ".join(problems) or "invalid request")


def _error(request: Request, status: int, message: str) -> Response:
    if _wants_html(request):
        return views.render(request, "error.html", {"status": status, "message": message},
                            status_code=status)
    return JSONResponse({"error": message}, status_code=status)
