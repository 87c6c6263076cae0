"""Turning what users pass as ``conn=`` into the psycopg connection pgqueue writes through.

The job is inserted on the user's own connection so it commits or rolls back with the
user's transaction. Accepted: psycopg ``Connection``/``AsyncConnection`` and SQLAlchemy
``Connection``/``Session``/``AsyncConnection``/``AsyncSession`` running on the psycopg 3
driver (``postgresql+psycopg://``). Anything else is a TypeError that lists these.
"""

from __future__ import annotations

from typing import Any

import psycopg

ACCEPTED = (
    "a psycopg Connection or AsyncConnection, or a SQLAlchemy Connection, Session, "
    "AsyncConnection or AsyncSession using the psycopg driver (postgresql+psycopg://)"
)


def _driver_connection(dbapi_connection: Any, what: str) -> Any:
    driver = getattr(dbapi_connection, "driver_connection", None)
    if isinstance(driver, psycopg.Connection | psycopg.AsyncConnection):
        return driver
    raise TypeError(
        f"conn= got a {what} whose driver is {type(driver).__name__}, not psycopg 3; "
        f"pgqueue needs {ACCEPTED}"
    )


def sync_connection(conn: object) -> psycopg.Connection[Any]:
    """The psycopg connection behind ``conn`` for a synchronous enqueue."""
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.orm import Session

    if isinstance(conn, psycopg.Connection):
        return conn
    if isinstance(conn, psycopg.AsyncConnection):
        raise TypeError("conn= is an AsyncConnection: use enqueue_async() inside async code")
    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, SAConnection):
        if not conn.in_transaction():
            # SQLAlchemy autobegins only for statements it runs itself; without this, the
            # user's conn.commit() would not commit our insert (the pool rolls it back).
            conn.begin()
        driver = _driver_connection(conn.connection, "SQLAlchemy Connection")
        if not isinstance(driver, psycopg.Connection):
            raise TypeError("conn= wraps an async driver: use enqueue_async()")
        return driver
    if _is_sqlalchemy_async(conn):
        raise TypeError("conn= is a SQLAlchemy async object: use enqueue_async()")
    raise TypeError(f"conn= got {type(conn).__name__}; pgqueue accepts {ACCEPTED}")


async def async_connection(conn: object) -> psycopg.AsyncConnection[Any]:
    """The psycopg async connection behind ``conn`` for an asynchronous enqueue."""
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if isinstance(conn, psycopg.Connection):
        raise TypeError("conn= is a synchronous Connection: use enqueue() (not enqueue_async)")
    # Imported only now: SQLAlchemy's asyncio extension needs greenlet, which a user of
    # plain psycopg connections need not have.
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if isinstance(conn, SAAsyncConnection):
        if not conn.in_transaction():
            await conn.begin()  # as in sync_connection: make the user's commit() ours too
        raw = await conn.get_raw_connection()
        driver = _driver_connection(raw, "SQLAlchemy AsyncConnection")
        if not isinstance(driver, psycopg.AsyncConnection):
            raise TypeError("conn= wraps a synchronous driver: use enqueue()")
        return driver
    raise TypeError(f"conn= got {type(conn).__name__}; pgqueue accepts {ACCEPTED}")


def _is_sqlalchemy_async(conn: object) -> bool:
    try:
        from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
        from sqlalchemy.ext.asyncio import AsyncSession
    except ImportError:  # no greenlet: then conn cannot be a SQLAlchemy async object either
        return False
    return isinstance(conn, SAAsyncConnection | AsyncSession)
