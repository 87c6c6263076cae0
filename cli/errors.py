"""The one place where errors become a single ``error: …`` line and exit status 1.

Usage mistakes (unknown option, missing argument) stay click's: its usage text and exit
status 2. Everything else a user can cause — a malformed DSN, an unreachable database,
an unknown id, invalid JSON — is a :class:`CommandError` or a library exception, and
:func:`one_line_error` gives the line to print for it.
"""

from __future__ import annotations

import psycopg
import psycopg_pool
import sqlalchemy.exc

from pgqueue import PgQueueError


class CommandError(Exception):
    """A value error found by the CLI itself (bad ``-A``, invalid JSON, unknown id)."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (libpq's run to several)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def one_line_error(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or None for a bug (keep its traceback)."""
    if isinstance(exc, CommandError | PgQueueError):
        return first_line(exc)
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        # alembic (pgq migrate) reaches the database through SQLAlchemy.
        return one_line_error(exc.orig) or first_line(exc.orig)
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg.OperationalError):
        return f"cannot reach the database: {first_line(exc)}"
    if isinstance(exc, psycopg.Error):
        return f"database error: {first_line(exc)}"
    return None
