"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

from alembic import op

from pgqueue.migrations._ddl import render, schema_name

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

UPGRADE: list[str] = []
DOWNGRADE: list[str] = []


def upgrade() -> None:
    schema = schema_name()
    for statement in UPGRADE:
        op.execute(render(statement, schema))


def downgrade() -> None:
    schema = schema_name()
    for statement in DOWNGRADE:
        op.execute(render(statement, schema))
