"""Printing: JSON for machines (``--json``), compact tables and lines for people.

JSON goes through :func:`print_json` only, so every command emits the same shapes as
the contract's §8: job objects are ``Job.to_dict()`` (the table's columns plus
``status``), datetimes in ISO 8601.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from pgqueue import Job


def console() -> Console:
    """The stdout console; highlighting off so that ids and numbers print plainly.

    Piped output (``| grep``, a file) gets no width limit: rich would otherwise squeeze
    tables to 80 columns and cut queue names short.
    """
    plain = Console(highlight=False)
    return plain if plain.is_terminal else Console(highlight=False, width=1000)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def print_json(data: Any) -> None:
    """Write ``data`` as indented JSON to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default, ensure_ascii=False))
    sys.stdout.write("\n")


def json_ready(row: dict[str, Any]) -> dict[str, Any]:
    """A database row with datetimes as ISO strings (as ``Job.to_dict()`` does)."""
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}


def when(value: datetime | None) -> str:
    """A timestamp for a table cell: UTC to the second, or ``-``."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def last_line(text: str | None) -> str:
    """The last line of a traceback: the exception itself, which is what a table needs."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "-"


def attempts(job: Job) -> str:
    """``attempts/max_attempts``, e.g. ``2/3``."""
    return f"{job.attempts}/{job.max_attempts}"


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    empty: str,
    right: Iterable[str] = (),
) -> None:
    """A borderless table, or ``empty`` when there are no rows."""
    materialized = [[str(cell) for cell in row] for row in rows]
    if not materialized:
        console().print(empty)
        return
    right_aligned = set(right)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in right_aligned else "left")
    for row in materialized:
        table.add_row(*row)
    console().print(table)


def job_summary(job: Job) -> str:
    """One line about a job, e.g. after ``pgq enqueue``."""
    line = f"job {job.id} {job.status}: {job.task} on queue {job.queue!r}"
    if job.status in ("scheduled", "retrying") and job.run_at is not None:
        line += f", runs at {when(job.run_at)}"
    return line
