"""The ``pgq`` application: the root group, its shared options, and the command groups.

Each command group lives in its own module and registers itself on :data:`app` here.
Failures a user can cause are turned into one ``error: …`` line in exactly one place,
:meth:`PgqGroup.invoke`, which wraps every subcommand's invocation.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperGroup

import pgqueue

from . import (
    dashboard,
    dead,
    demo,
    enqueue,
    health,
    jobs,
    migrate,
    monitoring,
    periodic,
    queues,
    roles,
    top,
    worker,
    workflows,
)
from .context import CliContext, connected
from .errors import one_line_error
from .logs import configure_logging


def _usage_name(argument: TyperArgument) -> str:
    """An argument as the usage line names it: ``ID`` when required, ``[ID]`` when not,
    ``...`` when repeated: the convention of click, man pages and ``--help`` elsewhere.
    typer 0.29 writes a required one as ``{ID}``, which reads as literal braces (issue
    18.13)."""
    name = argument.display_name_raw
    if not argument.required:
        name = f"[{name}]"
    return f"{name}..." if argument.nargs != 1 else name


if hasattr(TyperArgument, "_usage_display_name"):
    TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign,assignment]


class PgqGroup(TyperGroup):
    """The root group; turns expected exceptions into a one-line error, exit status 1.

    Click's own exceptions (usage errors, ``Exit``, ``Abort``) pass through untouched, as
    does any unexpected exception: a bug deserves its traceback.
    """

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except Exception as exc:
            # Click's own exceptions (usage errors, Exit, Abort) are not ours: they get
            # None here and keep click's handling.
            message = one_line_error(exc)
            if message is None:
                raise
            print(f"error: {message}", file=sys.stderr, flush=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=PgqGroup,
    name="pgq",
    help="pgqueue: a durable background-job queue on PostgreSQL.",
    no_args_is_help=True,
    # Plain click output: usage errors keep click's format, and ``error: …`` stays one line.
    rich_markup_mode=None,
    # Never print local variables (they hold DSNs and passwords) in a traceback.
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pgq (pgqueue) {pgqueue.__version__}")
        raise typer.Exit()


@app.callback()
@connected(json=False)
def root(
    context: CliContext,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Connection options given here apply to the command that follows."""
    configure_logging("warning")


migrate.register(app)
worker.register(app)
enqueue.register(app)
app.add_typer(jobs.app, name="jobs")
app.add_typer(dead.app, name="dead")
app.add_typer(queues.app, name="queues")
app.add_typer(workflows.app, name="workflows")
app.add_typer(periodic.app, name="periodic")
monitoring.register(app)
dashboard.register(app)
health.register(app)
top.register(app)
roles.register(app)
demo.register(app)


def main() -> None:
    """Console-script entry point (``pgq``)."""
    app(prog_name="pgq")
