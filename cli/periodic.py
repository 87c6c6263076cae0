"""``pgq periodic list|add|remove|pause|resume``: periodic schedules (table ``schedules``).

``list`` shows code schedules (``@q.periodic``, declared by the workers) and run-time
ones (``add``) together; ``add`` stores a run-time schedule that running workers pick up
without a restart. Each command that changes a schedule prints it afterwards (``--json``:
the object of ``pgq periodic list --json``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from pgqueue.schedules import ScheduleInfo
from pgqueue.stats import when

from .context import CliContext, connected
from .enqueue import parse_json_option, registered_name
from .options import AppOption, ArgsOption, KwargsOption
from .output import output, print_table

app = typer.Typer(
    help="Periodic jobs: list schedules; add, remove, pause and resume them.",
    no_args_is_help=True, rich_markup_mode=None,
)

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name.",
                                             show_default=False)]


def _table(found: list[ScheduleInfo]) -> None:
    print_table(
        ["name", "cron", "tz", "task", "state", "source", "next run", "last run",
         "last job"],
        (
            [info.name, info.cron, info.tz, info.task, info.state, info.source,
             "-" if info.paused or not info.active else when(info.next_run_at),
             when(info.last_run_at), "-" if info.last_job_id is None else info.last_job_id]
            for info in found
        ),
        empty="No schedules yet: add one with @q.periodic in your code (a worker declares "
              "it) or pgq periodic add.",
        right=("last job",),
    )


def _line(verb: str, info: ScheduleInfo) -> str:
    nxt = f"next run {when(info.next_run_at)}" if info.state == "active" else info.state
    return (f"{verb} schedule {info.name!r}: {info.cron} ({info.tz}) → {info.task} on "
            f"queue {info.queue!r}; {nxt}.")


@app.command("list")
@connected(json=True)
def list_schedules(context: CliContext) -> None:
    """Every schedule: cron, time zone, task, state (active, paused, or inactive: a code
    schedule no running worker declares), source (code or runtime), next and last run,
    last job id."""
    with context.session() as queue:
        found = queue.schedules()
    output(context, found, lambda: _table(found))


@app.command("add")
@connected(json=True)
def add(
    context: CliContext,
    name: NameArgument,
    cron: Annotated[str, typer.Argument(
        metavar="CRON", show_default=False,
        help="5 fields 'minute hour day-of-month month day-of-week' (e.g. '0 3 * * *') or "
             "@hourly, @daily, @weekly, @monthly, @yearly, @annually, @midnight.")],
    task: Annotated[str, typer.Argument(
        metavar="TASK", show_default=False,
        help="Task name, as registered (name= or module.qualname).")],
    args: ArgsOption = "[]",
    kwargs: KwargsOption = "{}",
    tz: Annotated[
        str, typer.Option("--tz", metavar="TZ", help="IANA time zone of CRON.")
    ] = "UTC",
    queue_name: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE", show_default=False,
                     help="Queue of its jobs (default: the task's, else 'default')."),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option("--priority", "-p", metavar="P", show_default=False,
                     help="Priority of its jobs (default: the task's, else 0)."),
    ] = None,
    app: AppOption = None,
) -> None:
    """Add (or replace) the run-time schedule NAME: enqueue TASK at every tick of CRON.

    Running workers pick it up at once, without a restart. With -A the task name and its
    arguments are checked against your code now.
    """
    positional = parse_json_option(args, "--args", list)
    keywords = parse_json_option(kwargs, "--kwargs", dict)
    options: dict[str, Any] = {
        key: value for key, value in (("queue", queue_name), ("priority", priority))
        if value is not None
    }
    with context.session(app) as queue:
        if app:
            task = registered_name(task, queue.tasks, app)
        info = queue.schedule(name, cron, task, args=positional, kwargs=keywords, tz=tz,
                              **options)
    output(context, info, lambda: typer.echo(_line("Added", info)))


@app.command("remove")
@connected(json=True)
def remove(context: CliContext, name: NameArgument) -> None:
    """Delete the schedule NAME. A code schedule comes back when a worker that declares it
    starts: remove it from the code (or pause it) to stop it for good."""
    with context.session() as queue:
        queue.unschedule(name)
    output(context, {"name": name, "removed": True},
           lambda: typer.echo(f"Removed schedule {name!r}."))


@app.command("pause")
@connected(json=True)
def pause(context: CliContext, name: NameArgument) -> None:
    """Enqueue no tick of NAME until it is resumed (code schedules too)."""
    with context.session() as queue:
        info = queue.pause_schedule(name)
    output(context, info, lambda: typer.echo(_line("Paused", info)))


@app.command("resume")
@connected(json=True)
def resume(context: CliContext, name: NameArgument) -> None:
    """Enqueue NAME's ticks again, from the next one (ticks missed while paused never run)."""
    with context.session() as queue:
        info = queue.resume_schedule(name)
    output(context, info, lambda: typer.echo(_line("Resumed", info)))
