"""``pgq migrate``: create or upgrade the pgqueue schema, or print its DDL."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .context import CliContext, connected


@connected(json=False)
def migrate(
    context: CliContext,
    sql: Annotated[
        bool,
        typer.Option(
            "--sql",
            help="Print the DDL instead of running it (no database needed); "
            "pipe it to psql -v ON_ERROR_STOP=1.",
        ),
    ] = False,
) -> None:
    """Create or upgrade the pgqueue schema (safe to run again)."""
    queue = context.queue()
    if sql:
        # Only the schema name matters here: the SQL is rendered offline by alembic.
        sys.stdout.write(queue.migrate_sql())
        return
    typer.echo(queue.migrate().describe())


def register(app: typer.Typer) -> None:
    """Add ``migrate`` to ``app``."""
    app.command()(migrate)
