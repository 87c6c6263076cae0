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
from pgqueue.errors import first_line


class CommandError(Exception):
    """A value error found by the CLI itself (bad ``-A``, invalid JSON, unknown id)."""


def one_line_error(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or None for a bug (keep its traceback)."""
    if isinstance(exc, CommandError | PgQueueError):
        return first_line(exc)
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        # alembic (pgq migrate) reaches the database through SQLAlchemy.
        return one_line_error(exc.orig) or first_line(exc.orig)
    if isinstance(exc, psycopg_pool.PoolTimeout) or is_connection_error(exc):
        return f"cannot reach the database: {first_line(exc)}"
    if isinstance(exc, psycopg.Error):
        return f"database error: {first_line(exc)}"
    return None


# SQLSTATEs that mean the server is not there for us: a connection exception (class 08),
# too many connections, or a server shutting down, crashed or still starting.
_UNREACHABLE_STATES = frozenset({"53300", "57P01", "57P02", "57P03"})


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached (or went away).

    psycopg's OperationalError also covers errors of a statement on a working connection
    (an index row too large, a statement timeout, out of disk): those are reported as
    database errors, not as a connection problem. A connection failure that libpq reports
    before any server answered has no SQLSTATE.
    """
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _UNREACHABLE_STATES
