"""``pgq stats`` and ``pgq workers``: what the queues and the workers are doing now."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer

from .context import cli_context
from .options import DsnOption, EmbeddedOption, JsonOption, SchemaOption
from .output import json_ready, print_json, print_table, when

STAT_COLUMNS = ("queued", "scheduled", "retrying", "running", "succeeded", "cancelled", "dead")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def stats(
    ctx: typer.Context,
    dsn: DsnOption = None,
    embedded: EmbeddedOption = False,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Per queue: jobs by status and the age of the oldest ready job."""
    context = cli_context(ctx, dsn=dsn, embedded=embedded, schema=schema, json=as_json)
    with context.session() as queue:
        rows = queue.stats()
    if context.json:
        print_json(rows)
        return
    print_table(
        ["queue", *STAT_COLUMNS, "oldest queued"],
        (
            [row["queue"], *(row[name] for name in STAT_COLUMNS),
             _age(row["oldest_queued_age_seconds"])]
            for row in rows
        ),
        empty="No jobs yet.",
        right=(*STAT_COLUMNS, "oldest queued"),
    )


def worker_status(row: dict[str, Any], now: datetime) -> str:
    """``alive`` while the worker's row lease runs, else ``expired`` (about to be removed)."""
    expires = row.get("lease_expires_at")
    return "alive" if expires is None or expires > now else "expired"


def workers(
    ctx: typer.Context,
    dsn: DsnOption = None,
    embedded: EmbeddedOption = False,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Live worker processes and their heartbeats."""
    context = cli_context(ctx, dsn=dsn, embedded=embedded, schema=schema, json=as_json)
    with context.session() as queue:
        rows = queue.workers()
    now = datetime.now(UTC)
    if context.json:
        print_json([json_ready(row) | {"status": worker_status(row, now)} for row in rows])
        return
    print_table(
        ["id", "hostname", "pid", "queues", "concurrency", "started_at", "last heartbeat",
         "status"],
        (
            [row["id"], row["hostname"], row["pid"], ",".join(row["queues"]) or "(all)",
             row["concurrency"], when(row["started_at"]),
             f"{(now - row['last_heartbeat_at']).total_seconds():.0f}s ago",
             worker_status(row, now)]
            for row in rows
        ),
        empty="No workers running.",
        right=("pid", "concurrency"),
    )


def register(app: typer.Typer) -> None:
    """Add ``stats`` and ``workers`` to ``app``."""
    app.command()(stats)
    app.command()(workers)
