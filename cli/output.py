"""Printing: JSON for machines (``--json``), compact tables and lines for people.

Every command prints its result through :func:`output`: with ``--json`` the result's own
``to_dict()`` (the shape an HTTP API serves too, the contract's §8: job objects are the
table's columns plus ``status``, datetimes in ISO 8601), else the words the command gives.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from pgqueue import Job
from pgqueue.stats import when

from .context import CliContext


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


class JsonReady(Protocol):
    """A result of the management layer (``Job``, ``QueueStats``, ``WorkerInfo``, …)."""

    def to_dict(self) -> dict[str, Any]: ...


Result = JsonReady | Sequence[JsonReady] | Mapping[str, Any]


def output(context: CliContext, result: Result, text: Callable[[], object]) -> None:
    """``result`` as JSON with ``--json``; otherwise call ``text`` to print it for people.

    A mapping is printed as it is (a count, say); anything else through ``to_dict()``.
    """
    if not context.json:
        text()
    elif isinstance(result, Mapping):
        print_json(result)
    elif isinstance(result, Sequence):
        print_json([item.to_dict() for item in result])
    else:
        print_json(result.to_dict())


def attempts(job: Job) -> str:
    """``attempts/max_attempts``, e.g. ``2/3``."""
    return f"{job.attempts}/{job.max_attempts}"


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    empty: str,
    right: Iterable[str] = (),
    clip: Iterable[str] = (),
    more: str | None = None,
) -> None:
    """A borderless table, or ``empty`` when there are no rows.

    ``clip`` columns (free text such as an error) are cut at ``CLIP`` characters with an
    ellipsis, so one long message does not make every row hundreds of columns wide;
    ``more``, when given, is printed under the table (rows exist beyond the limit).
    """
    materialized = [[str(cell) for cell in row] for row in rows]
    if not materialized:
        console().print(empty)
        return
    right_aligned = set(right)
    clipped = set(clip)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in right_aligned else "left",
                         max_width=CLIP if column in clipped else None,
                         no_wrap=column in clipped, overflow="ellipsis")
    for row in materialized:
        table.add_row(*row)
    out = console()
    out.print(table)
    if more:
        out.print(more, markup=False)


# The widest a free-text column is printed (pgq jobs show has the whole text).
CLIP = 60


def more_line(found: int, limit: int, what: str, narrow: str) -> str | None:
    """The line under a table cut at ``limit`` rows, or None if nothing was cut (the
    caller fetched ``limit + 1`` rows to know)."""
    if found <= limit:
        return None
    return f"(the first {limit} {what}; more exist: raise --limit or narrow with {narrow})"


def job_summary(job: Job, *, status: bool = True) -> str:
    """One line about a job, e.g. after ``pgq enqueue``: ``job 6: add on queue 'default'
    (queued)``; without ``status`` when the sentence already says it."""
    line = f"job {job.id}: {job.task} on queue {job.queue!r}"
    if status:
        state = job.status
        if job.status in ("scheduled", "retrying") and job.run_at is not None:
            state += f", runs at {when(job.run_at)}"
        line += f" ({state})"
    return line
