"""Add jobs.lease_token: a random number per claim that fences every outcome.

Revision ID: 0002_lease_token
Revises: 0001_initial
Create Date: 2026-12-02

Until now an outcome was fenced on (id, attempts, worker_id). That triple can repeat:
if PostgreSQL crashes before a claim reaches disk, the row is ``queued`` again with the
old ``attempts``, and the *same* worker may claim it again under the same triple, so an
outcome of the pre-crash run would be accepted for the new claim. A random token drawn
for each claim cannot repeat, which is what lets workers commit claims asynchronously.

Adding a nullable column without a default rewrites nothing and takes a brief lock.
Workers of 0.1.0 that are still running keep fencing on the triple and never set the
token, so a rolling deploy is safe.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0002_lease_token"
down_revision = "0001_initial"
branch_labels = None
depends_on = None

UPGRADE = [
    "ALTER TABLE {schema}.jobs ADD COLUMN lease_token bigint",
    "COMMENT ON COLUMN {schema}.jobs.lease_token IS "
    "'Random per claim; with id it fences every outcome of that claim. NULL while queued.'",
    "COMMENT ON COLUMN {schema}.jobs.attempts IS "
    "'Number of claims that counted (snoozes and shutdown releases give theirs back).'",
]
DOWNGRADE = [
    "COMMENT ON COLUMN {schema}.jobs.attempts IS "
    "'Number of claims; the (id, attempts, worker_id) triple fences every outcome.'",
    "ALTER TABLE {schema}.jobs DROP COLUMN IF EXISTS lease_token",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
