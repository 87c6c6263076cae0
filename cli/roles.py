"""``pgq roles``: the database roles pgqueue needs and, with ``--sql``, their GRANTs.

Printing needs no database: the statements come from the privileges each role's code
paths use (``pgqueue.db.roles``), rendered for the schema named with ``--schema``.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from pgqueue.db.migrate import head_revision
from pgqueue.db.roles import DEFAULT_ROLE_NAMES, RoleNames, describe, grants_sql
from pgqueue.settings import resolve_schema

from .context import cli_context
from .options import SchemaOption
from .output import print_table


def roles(
    ctx: typer.Context,
    sql: Annotated[
        bool,
        typer.Option("--sql", help="Print the GRANT statements (run them as the owner, after "
                     "pgq migrate) instead of the summary."),
    ] = False,
    owner: Annotated[
        str, typer.Option("--owner", metavar="ROLE",
                          help="Role that runs pgq migrate and owns the schema.")
    ] = DEFAULT_ROLE_NAMES["owner"],
    worker: Annotated[
        str, typer.Option("--worker", metavar="ROLE", help="Role of pgq worker processes.")
    ] = DEFAULT_ROLE_NAMES["worker"],
    web: Annotated[
        str, typer.Option("--web", metavar="ROLE", help="Role of an application that enqueues.")
    ] = DEFAULT_ROLE_NAMES["web"],
    monitor: Annotated[
        str, typer.Option("--monitor", metavar="ROLE", help="Read-only monitoring role.")
    ] = DEFAULT_ROLE_NAMES["monitor"],
    schema: SchemaOption = None,
) -> None:
    """The least-privilege roles (owner, worker, web, monitor) and their GRANTs."""
    context = cli_context(ctx, schema=schema)
    names = RoleNames(owner=owner, worker=worker, web=web, monitor=monitor)
    if sql:
        sys.stdout.write(grants_sql(resolve_schema(context.schema), names, head_revision()))
        return
    print_table(["kind", "role", "may"], [list(row) for row in describe(names)], empty="")

def register(app: typer.Typer) -> None:
    """Add ``roles`` to ``app``."""
    app.command()(roles)
