"""Rendering: the Jinja environment's filters and one ``render`` for every page.

A page asked for by the refresh script (header ``X-Pgqueue-Fragment``) gets only its
``live`` block, which the script swaps in place: the page refreshes without a reload.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from pgqueue.stats import age as table_age
from pgqueue.stats import last_line
from pgqueue.stats import when as table_when

FRAGMENT_HEADER: Final = "x-pgqueue-fragment"
STATUSES: Final = ("queued", "scheduled", "retrying", "waiting", "running", "succeeded",
                   "cancelled", "dead")


def age(seconds: float | None) -> str:
    """A wait for people: ``4.2s``, ``12m``, ``3.1h``, ``2.0d``, or ``-``."""
    return table_age(seconds, days=True)


def when(value: datetime | str | None) -> str:
    """A timestamp, UTC to the second, or ``-`` (an ISO 8601 string is parsed first)."""
    return table_when(datetime.fromisoformat(value) if isinstance(value, str) else value)


def since(value: datetime | None, now: datetime | None = None) -> str:
    """How long ago ``value`` was, e.g. ``3.0s``."""
    if value is None:
        return "-"
    return age(((now or datetime.now(UTC)) - value).total_seconds())


def to_json(value: Any) -> str:
    """JSON for a ``<pre>``, indented."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def configure(templates: Jinja2Templates) -> None:
    """Add the filters the templates use."""
    templates.env.filters.update(age=age, when=when, since=since, to_json=to_json,
                                 last_line=last_line)
    templates.env.globals["STATUSES"] = STATUSES


def render(request: Request, name: str, context: dict[str, Any], *, status_code: int = 200
           ) -> HTMLResponse:
    """Template ``name`` (its ``live`` block alone for the refresh script)."""
    templates: Jinja2Templates = request.app.state.templates
    values = {
        "request": request,
        "csrf": getattr(request.state, "csrf", ""),
        "refresh_ms": int(request.app.state.refresh_seconds * 1000),
        "login_required": request.app.state.access.token is not None,
        "notice": request.query_params.get("notice"),
        "problem": request.query_params.get("problem"),
        **context,
    }
    if request.headers.get(FRAGMENT_HEADER):
        template = templates.env.get_template(name)
        block = template.blocks.get("live")
        if block is not None:
            body = "".join(block(template.new_context(values)))
            return HTMLResponse(body, status_code=status_code)
    return templates.TemplateResponse(request, name, values, status_code=status_code)
