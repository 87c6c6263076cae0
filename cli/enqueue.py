"""``pgq enqueue``: put one job on a queue from the shell.

Without ``-A`` the task is enqueued by name as given (the worker that knows it validates
nothing more); with ``-A`` the user's Queue is loaded and a registered task checks its
arguments here, at enqueue time, exactly as ``task.enqueue(...)`` would in Python.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from pgqueue.options import JobOptions

from .context import CliContext, connected
from .errors import CommandError
from .options import AppOption, ArgsOption, KwargsOption
from .output import job_summary, output

# The options of a job whose task sets none (a task's own defaults win over these).
_DEFAULTS = JobOptions()


def parse_json_option(text: str, option: str, expected: type[list[Any] | dict[str, Any]]) -> Any:
    """Parse ``--args``/``--kwargs``; a bad value is one line naming the option."""
    example = '\'[1, "a"]\'' if expected is list else '\'{"user_id": 7}\''
    kind = "array" if expected is list else "object"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"invalid {option}: not JSON ({exc.msg} at column {exc.colno}); "
            f"expected a JSON {kind}, e.g. {option} {example}"
        ) from None
    if not isinstance(value, expected):
        raise CommandError(
            f"invalid {option}: expected a JSON {kind}, got {type(value).__name__}; "
            f"e.g. {option} {example}"
        )
    return value


@connected(json=True)
def enqueue(
    context: CliContext,
    task: Annotated[
        str,
        typer.Argument(metavar="TASK",
                       help="Task name, as registered (name= or module.qualname)."),
    ],
    args: ArgsOption = "[]",
    kwargs: KwargsOption = "{}",
    queue_name: Annotated[
        str | None,
        typer.Option("--queue", "-q", metavar="QUEUE",
                     help=f"Queue (default: the task's, else {_DEFAULTS.queue!r}).",
                     show_default=False),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option("--priority", "-p", metavar="P", show_default=False,
                     help=f"Higher runs first (default {_DEFAULTS.priority})."),
    ] = None,
    run_in: Annotated[
        str | None,
        typer.Option("--run-in", metavar="DURATION", show_default=False,
                     help="Delay before it may run: 30s, 15m, 1h, 7d or seconds."),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", metavar="KEY", show_default=False,
                     help="Dedupe key: while a job with this key is live, return that job."),
    ] = None,
    max_attempts: Annotated[
        int | None,
        typer.Option("--max-attempts", metavar="N", show_default=False,
                     help="Attempts before the job is dead (default: the task's, else "
                     f"{_DEFAULTS.max_attempts})."),
    ] = None,
    app: AppOption = None,
) -> None:
    """Enqueue a job for TASK and print it."""
    positional = parse_json_option(args, "--args", list)
    keywords = parse_json_option(kwargs, "--kwargs", dict)
    given: dict[str, Any] = {
        "queue": queue_name,
        "priority": priority,
        "run_in": run_in,
        "idempotency_key": idempotency_key,
        "max_attempts": max_attempts,
    }
    # Only what was given: a registered task keeps its own defaults for the rest.
    options = {name: value for name, value in given.items() if value is not None}
    with context.session(app) as queue:
        if app:
            task = registered_name(task, queue.tasks, app)
        job = queue.enqueue_by_name(task, args=positional, kwargs=keywords, **options)
    if not app:
        # Without the user's Queue there is no task to check against.
        typer.echo(f"note: not validated: without -A the task name, arguments and "
                   f"options of {task!r} are stored as given (pass -A module:queue to "
                   "check them)", err=True)
    output(context, job, lambda: typer.echo(f"Enqueued {job_summary(job)}"))


def register(app: typer.Typer) -> None:
    """Add ``enqueue`` to ``app``."""
    app.command()(enqueue)


def registered_name(name: str, tasks: Mapping[str, object], app: str) -> str:
    """The registered task ``name`` means: itself, or the one task whose last dotted part
    it is (``send_email`` for ``myapp.tasks.send_email``). With ``-A`` an unknown name is
    refused at once, with the close matches, instead of dying later in a worker."""
    if name in tasks:
        return name
    by_short_name = [full for full in tasks if full.rsplit(".", 1)[-1] == name]
    if len(by_short_name) == 1:
        return by_short_name[0]
    close = difflib.get_close_matches(name, list(tasks), n=3, cutoff=0.6) or by_short_name
    hint = f"did you mean {', '.join(map(repr, close))}?" if close else \
        f"registered: {', '.join(sorted(tasks)) or 'none'}"
    raise CommandError(f"no task {name!r} in {app}: {hint}")
