"""``pgq queues list|pause|resume|set``: queues as objects (table ``queues``).

Each command prints the queue's state afterwards (``--json``: the object of ``pgq
queues list --json``), so a script sees what it changed.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pgqueue.limits import Pause, TaskLimits
from pgqueue.queues import COUNTS, QueueInfo
from pgqueue.stats import age

from .context import CliContext, connected
from .output import output, print_table

app = typer.Typer(
    help="Pause, resume and configure queues; list them with their jobs by status.",
    no_args_is_help=True, rich_markup_mode=None,
)

QueueArgument = Annotated[str, typer.Argument(metavar="QUEUE", help="The queue's name.",
                                              show_default=False)]


def _limits(info: QueueInfo) -> str:
    parts = [f"{info.concurrency} running" if info.concurrency else "",
             f"{info.key_concurrency} per key" if info.key_concurrency else "",
             info.rate_limit or "", "fair" if info.fair else ""]
    return ", ".join(p for p in parts if p) or "-"


def _table(found: list[QueueInfo]) -> None:
    print_table(
        ["queue", "state", "max queued", "aging", "limits", *COUNTS, "oldest queued"],
        (
            [info.name, "paused" if info.paused else "running",
             "-" if info.max_queued is None else info.max_queued,
             "-" if info.priority_aging is None else f"{info.priority_aging:g}s",
             _limits(info), *(info.counts[key] for key in COUNTS),
             age(info.oldest_queued_age_seconds)]
            for info in found
        ),
        empty="No queues yet: a queue appears with its first job or setting.",
        right=("max queued", "aging", *COUNTS, "oldest queued"),
    )


def _task_limits(tasks: dict[str, TaskLimits], pauses: list[Pause]) -> None:
    """Task limits and scopes paused by RateLimited, below the queues (text output only)."""
    if tasks:
        typer.echo("\nTask limits:")
        print_table(["task", "global concurrency", "per key", "rate"], (
            [task, lim.global_concurrency or "-", lim.key_concurrency or "-",
             lim.rate.text if lim.rate else "-"] for task, lim in tasks.items()), empty="")
    if pauses:
        typer.echo("\nPaused by RateLimited:")
        print_table(["scope", "until"], ([p.scope, p.until.isoformat(timespec="seconds")]
                                         for p in pauses), empty="")


@app.command("list")
@connected(json=True)
def list_queues(context: CliContext) -> None:
    """Every queue that has jobs or settings: state, bound, jobs by status, oldest wait."""
    with context.session() as queue:
        found = queue.queues()
        tasks, pauses = queue.limits()

    def show() -> None:
        _table(found)
        _task_limits(tasks, pauses)

    output(context, found, show)


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


def _count(text: str, option: str, what: str) -> int | None:
    """A whole number from 1 given to ``option``, or None for ``none``."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise typer.BadParameter(
            f"{text!r} is not {what}: give a whole number from 1, or none to remove it",
            param_hint=f"'{option}'")
    return value


def _none_or(text: str) -> str | None:
    return None if text.strip().lower() == "none" else text


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
    concurrency: Annotated[
        str | None,
        typer.Option("--concurrency", metavar="N|none", show_default=False,
                     help="At most N running jobs of QUEUE across all workers. none: no "
                          "limit."),
    ] = None,
    key_concurrency: Annotated[
        str | None,
        typer.Option("--key-concurrency", metavar="N|none", show_default=False,
                     help="At most N running jobs of QUEUE per concurrency_key. none: no "
                          "limit."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", metavar="RATE|none", show_default=False,
                     help="At most RATE job starts, spread evenly: 100/m, 10/s, 5/10s; or "
                          "units of cost: '90000 tokens/m'. none: no rate limit."),
    ] = None,
    fair: Annotated[
        bool | None,
        typer.Option("--fair/--no-fair", show_default=False,
                     help="Claims take QUEUE's concurrency keys in turn, so a key with many "
                          "jobs cannot starve one with few."),
    ] = None,
) -> None:
    """Change QUEUE's settings and limits (those not given keep their value)."""
    given = (max_queued, priority_aging, concurrency, key_concurrency, rate, fair)
    if all(value is None for value in given):
        raise typer.BadParameter("give a setting to change, e.g. --max-queued 10000 or "
                                 "--concurrency 5", param_hint="'QUEUE'")
    changes: dict[str, Any] = {}
    if max_queued is not None:
        changes["max_queued"] = _count(max_queued, "--max-queued", "a bound")
    if priority_aging is not None:
        changes["priority_aging"] = _none_or(priority_aging)
    if concurrency is not None:
        changes["concurrency"] = _count(concurrency, "--concurrency", "a concurrency limit")
    if key_concurrency is not None:
        changes["key_concurrency"] = _count(key_concurrency, "--key-concurrency",
                                            "a concurrency limit")
    if rate is not None:
        changes["rate_limit"] = _none_or(rate)
    if fair is not None:
        changes["fair"] = fair
    with context.session() as queue:
        info = queue.set_queue(name, **changes)
    output(context, info, lambda: typer.echo(_settings_line(info)))


def _settings_line(info: QueueInfo) -> str:
    bound = "none (unbounded)" if info.max_queued is None else str(info.max_queued)
    aging = ("none" if info.priority_aging is None
             else f"one step per {info.priority_aging:g}s waited")
    limits = _limits(info)
    return (f"Queue {info.name!r}: max queued {bound}; priority aging {aging}; "
            f"limits {'none' if limits == '-' else limits}.")
