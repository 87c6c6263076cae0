"""``pgq queues list|pause|resume|set``: queues as objects (table ``queues``).

Each command prints the queue's state afterwards (``--json``: the object of ``pgq
queues list --json``), so a script sees what it changed.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pgqueue.queues import COUNTS, QueueInfo

from .context import CliContext, connected
from .output import age, output, print_table

app = typer.Typer(
    help="Pause, resume and configure queues; list them with their jobs by status.",
    no_args_is_help=True, rich_markup_mode=None,
)

QueueArgument = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.",
                                              show_default=False)]


def _table(found: list[QueueInfo]) -> None:
    print_table(
        ["queue", "state", "max queued", "aging", *COUNTS, "oldest queued"],
        (
            [info.name, "paused" if info.paused else "running",
             "-" if info.max_queued is None else info.max_queued,
             "-" if info.priority_aging is None else f"{info.priority_aging:g}s",
             *(info.counts[key] for key in COUNTS), age(info.oldest_queued_age_seconds)]
            for info in found
        ),
        empty="No queues yet: a queue appears with its first job or setting.",
        right=("max queued", "aging", *COUNTS, "oldest queued"),
    )


@app.command("list")
@connected(json=True)
def list_queues(context: CliContext) -> None:
    """Every queue that has jobs or settings: state, bound, jobs by status, oldest wait."""
    with context.session() as queue:
        found = queue.queues()
    output(context, found, lambda: _table(found))


@app.command("pause")
@connected(json=True)
def pause(context: CliContext, name: QueueArgument) -> None:
    """Stop workers from claiming QUEUE's jobs (running ones finish; enqueueing goes on)."""
    with context.session() as queue:
        info = queue.pause_queue(name)
    output(context, info, lambda: typer.echo(
        f"Paused queue {info.name!r}: no worker claims its jobs until pgq queues resume "
        f"{info.name} ({info.counts['queued']} ready now)."))


@app.command("resume")
@connected(json=True)
def resume(context: CliContext, name: QueueArgument) -> None:
    """Let workers claim QUEUE's jobs again (idle workers are woken at once)."""
    with context.session() as queue:
        info = queue.resume_queue(name)
    output(context, info, lambda: typer.echo(
        f"Resumed queue {info.name!r} ({info.counts['queued']} ready now)."))


def _max_queued(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise typer.BadParameter(
            f"{text!r} is not a bound: give a whole number of jobs from 1, or none to "
            "remove the bound", param_hint="'--max-queued'")
    return value


@app.command("set")
@connected(json=True)
def set_queue(
    context: CliContext,
    name: QueueArgument,
    max_queued: Annotated[
        str | None,
        typer.Option("--max-queued", metavar="N|none", show_default=False,
                     help="At most N queued (ready, scheduled or retrying) jobs; an enqueue "
                          "beyond it fails with QueueFull. none: no bound."),
    ] = None,
    priority_aging: Annotated[
        str | None,
        typer.Option("--priority-aging", metavar="DURATION|none", show_default=False,
                     help="Raise a waiting job's priority by one for each DURATION it has "
                          "waited (0.1s to a year), so low priorities cannot starve. none: "
                          "no aging."),
    ] = None,
) -> None:
    """Change QUEUE's settings (those not given keep their value)."""
    if max_queued is None and priority_aging is None:
        raise typer.BadParameter("give a setting to change, e.g. --max-queued 10000",
                                 param_hint="'QUEUE'")
    changes: dict[str, Any] = {}
    if max_queued is not None:
        changes["max_queued"] = _max_queued(max_queued)
    if priority_aging is not None:
        changes["priority_aging"] = (None if priority_aging.strip().lower() == "none"
                                     else priority_aging)
    with context.session() as queue:
        info = queue.set_queue(name, **changes)
    output(context, info, lambda: typer.echo(_settings_line(info)))


def _settings_line(info: QueueInfo) -> str:
    bound = "none (unbounded)" if info.max_queued is None else str(info.max_queued)
    aging = ("none" if info.priority_aging is None
             else f"one step per {info.priority_aging:g}s waited")
    return f"Queue {info.name!r}: max queued {bound}; priority aging {aging}."
