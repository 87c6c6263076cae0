"""Helpers the revision files share: which schema to migrate and how to quote it.

Revisions hold SQL with ``{schema}`` and ``{channel}`` placeholders; :func:`render` fills
them with ``psycopg.sql`` so names are always quoted, never pasted in.
"""

from __future__ import annotations

from collections.abc import Iterable

from alembic import context, op
from psycopg import sql

from pgqueue.db.names import notify_channel
from pgqueue.settings import validate_schema_name

SCHEMA_ATTRIBUTE = "pgqueue_schema"


def schema_name() -> str:
    """The schema being migrated: set by pgqueue's runner, or ``-x pgqueue_schema=...``."""
    config = context.config
    name = config.attributes.get(SCHEMA_ATTRIBUTE)
    if name is None:
        name = context.get_x_argument(as_dictionary=True).get(SCHEMA_ATTRIBUTE, "pgqueue")
    return validate_schema_name(str(name))


def render(statement: str, schema: str) -> str:
    """Fill ``{schema}`` (an identifier) and ``{channel}`` (a literal) in a DDL statement."""
    composed = sql.SQL(statement.strip()).format(  # type: ignore[arg-type]
        schema=sql.Identifier(schema), channel=sql.Literal(notify_channel(schema))
    )
    return composed.as_string()


def execute_all(statements: Iterable[str]) -> None:
    """Run a revision's statements, rendered for the schema being migrated, in order."""
    schema = schema_name()
    for statement in statements:
        op.execute(render(statement, schema))
