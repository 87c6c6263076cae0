"""Helpers the revision files share: which schema to migrate and how to quote it.

Revisions hold SQL with ``{schema}``, ``{schema_name}`` and ``{channel}`` placeholders;
:func:`render` fills them with ``psycopg.sql`` so names are always quoted, never pasted in.
"""

from __future__ import annotations

from collections.abc import Iterable

from alembic import context, op
from psycopg import sql

from pgqueue.db.names import notify_channel
from pgqueue.settings import validate_schema_name

SCHEMA_ATTRIBUTE = "pgqueue_schema"

# Creates the schema only when it is missing. ``CREATE SCHEMA IF NOT EXISTS`` checks the
# CREATE privilege on the database before it checks whether the schema exists, so it
# would fail for a role that owns an existing schema (created for it by an
# administrator, see docs/guides/deployment.md) but may not create new ones.
CREATE_SCHEMA = """
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = {schema_name}) THEN
        CREATE SCHEMA {schema};
    END IF;
END
$$
"""


def schema_name() -> str:
    """The schema being migrated: set by pgqueue's runner, or ``-x pgqueue_schema=...``."""
    config = context.config
    name = config.attributes.get(SCHEMA_ATTRIBUTE)
    if name is None:
        name = context.get_x_argument(as_dictionary=True).get(SCHEMA_ATTRIBUTE, "pgqueue")
    return validate_schema_name(str(name))


def render(statement: str, schema: str) -> str:
    """Fill ``{schema}`` (an identifier), ``{schema_name}`` and ``{channel}`` (literals) in a
    DDL statement."""
    composed = sql.SQL(statement.strip()).format(  # type: ignore[arg-type]
        schema=sql.Identifier(schema), schema_name=sql.Literal(schema),
        channel=sql.Literal(notify_channel(schema)),
    )
    return composed.as_string()


def execute_all(statements: Iterable[str]) -> None:
    """Run a revision's statements, rendered for the schema being migrated, in order."""
    schema = schema_name()
    for statement in statements:
        op.execute(render(statement, schema))
