"""Add workers.stuck: threads of a worker stuck in sync calls whose attempt already ended.

Revision ID: 0004_workers_stuck
Revises: 0003_leaner_enqueue
Create Date: 2026-12-04

Python cannot stop a thread: a sync task that ignores its timeout keeps running after its
attempt has failed, and the worker keeps that slot taken until the call returns (issue
10.4). Each heartbeat writes how many such threads the worker has, so ``pgq workers`` and
SQL show a worker that claims less than its concurrency, and why.

A column with a constant default is added without rewriting the table (PostgreSQL 11+).
Workers of earlier versions still running leave it at 0, so a rolling deploy is safe.
"""

from __future__ import annotations

from pgqueue.migrations._ddl import execute_all

revision = "0004_workers_stuck"
down_revision = "0003_leaner_enqueue"
branch_labels = None
depends_on = None

UPGRADE = [
    "ALTER TABLE {schema}.workers ADD COLUMN stuck integer NOT NULL DEFAULT 0",
    "COMMENT ON COLUMN {schema}.workers.stuck IS "
    "'Threads stuck in a sync call whose attempt already ended (their slots stay taken); "
    "written by each heartbeat.'",
]
DOWNGRADE = [
    "ALTER TABLE {schema}.workers DROP COLUMN IF EXISTS stuck",
]


def upgrade() -> None:
    execute_all(UPGRADE)


def downgrade() -> None:
    execute_all(DOWNGRADE)
