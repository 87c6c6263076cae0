"""Option aliases shared by the commands, so ``--dsn`` means the same thing everywhere."""

from __future__ import annotations

from typing import Annotated

import typer

CONNECTION_PANEL = "Connection"

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        metavar="DSN",
        help="PostgreSQL DSN (postgresql://…, key=value, or a SQLAlchemy URL). "
        "Default: PGQUEUE_DSN, then DATABASE_URL.",
        show_default=False,
        rich_help_panel=CONNECTION_PANEL,
    ),
]
EmbeddedOption = Annotated[
    bool,
    typer.Option(
        "--embedded",
        help="Use the local embedded PostgreSQL (data in .pgqueue/ in this directory).",
        rich_help_panel=CONNECTION_PANEL,
    ),
]
SchemaOption = Annotated[
    str | None,
    typer.Option(
        "--schema",
        metavar="SCHEMA",
        help="Schema holding pgqueue's tables. Default: PGQUEUE_SCHEMA, then 'pgqueue'.",
        show_default=False,
        rich_help_panel=CONNECTION_PANEL,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")
]
AppOption = Annotated[
    str | None,
    typer.Option(
        "-A",
        "--app",
        envvar="PGQUEUE_APP",
        metavar="MODULE:QUEUE",
        help="Your Queue as module:attribute (e.g. myapp.tasks:queue). Default: PGQUEUE_APP.",
        show_default=False,
    ),
]
QueueFilterOption = Annotated[
    str | None, typer.Option("--queue", "-q", metavar="QUEUE", help="Only this queue.",
                               show_default=False)
]
LimitOption = Annotated[
    int, typer.Option("--limit", "-n", min=1, metavar="N", help="At most this many rows.")
]

# A job's arguments as JSON text (pgq enqueue, pgq periodic add); parsed by
# enqueue.parse_json_option, whose errors name the option.
ArgsOption = Annotated[
    str, typer.Option("--args", metavar="JSON", help="Positional arguments, a JSON array.")
]
KwargsOption = Annotated[
    str, typer.Option("--kwargs", metavar="JSON", help="Keyword arguments, a JSON object.")
]
