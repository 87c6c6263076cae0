"""One piece of logic for both the sync and the async API.

A *plan* is a generator that yields :class:`Statement` objects and receives each one's
rows; :func:`run_sync` and :func:`run_async` drive it on a psycopg ``Connection`` or
``AsyncConnection``. The logic (retry loops, follow-up reads) is written once; only
these two small drivers know about sync versus async.

A plan may also yield :data:`CAN_COPY` (is ``COPY ... FROM STDIN`` usable here, inside
one transaction?) and :class:`Copy` (stream rows into a table): bulk enqueue uses them.

Whether a statement is prepared on the server is the connection's choice
(``prepare_threshold``), never the plan's: behind PgBouncer in transaction mode a
prepared statement can land on a server connection that lacks it, or that holds another
client's statement of the same name. The Queue's own connections stop preparing when its
DSN says ``pool_mode=transaction``; a caller's connection (``conn=``) follows its own
``prepare_threshold``, which a client of such a pooler sets to None for its own queries
anyway (docs/guides/deployment.md).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

T = TypeVar("T")
Row = dict[str, Any]
Fetch = Literal["one", "all", "rowcount"]
Plan = Generator["Step", Any, T]


@dataclass(frozen=True)
class Statement:
    """A query, its parameters, and what the plan wants back.

    ``binary`` asks for results in PostgreSQL's binary format: cheaper to read for a
    large array (the ids a bulk enqueue reads back), no different for anything else.
    """

    query: bytes
    params: dict[str, Any] = field(default_factory=dict)
    fetch: Fetch = "one"
    binary: bool = False


@dataclass(frozen=True)
class Copy:
    """``COPY ... FROM STDIN`` of ``data``, already in COPY's text format; sends back None."""

    query: bytes
    data: bytes


class _CanCopy:
    """The question :data:`CAN_COPY` asks the driver."""

    def __repr__(self) -> str:
        return "CAN_COPY"


# Sends back True when COPY can run on this connection inside the same transaction as
# the plan's other statements: not in autocommit mode (each statement would be its own
# transaction, so now() would differ between them) and not in pipeline mode (where
# libpq refuses COPY).
CAN_COPY: Final = _CanCopy()

Step = Statement | Copy | _CanCopy


def can_copy(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """The answer to :data:`CAN_COPY` for ``conn``."""
    return not conn.autocommit and conn.pgconn.pipeline_status == pq.PipelineStatus.OFF


def _result(cursor: Any, fetch: Fetch, rows: list[Row] | None) -> Any:
    if fetch == "rowcount":
        return cursor.rowcount
    if fetch == "one":
        return rows[0] if rows else None
    return rows or []


def run_sync(conn: psycopg.Connection[Any], plan: Plan[T]) -> T:
    """Drive ``plan`` on a synchronous connection.

    On a connection in pipeline mode (the caller's), each statement ends with a sync
    point: a plan reads every statement's rows before it decides on the next one.
    """
    try:
        step = next(plan)
        while True:
            step = plan.send(_run_step_sync(conn, step))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _run_step_sync(conn: psycopg.Connection[Any], step: Step) -> Any:
    if isinstance(step, _CanCopy):
        return can_copy(conn)
    if isinstance(step, Copy):
        with conn.cursor() as cursor, cursor.copy(step.query) as copy:
            copy.write(step.data)
        return None
    with conn.cursor(row_factory=dict_row, binary=step.binary) as cursor:
        if conn.pgconn.pipeline_status == pq.PipelineStatus.OFF:
            cursor.execute(step.query, step.params)
        else:
            with conn.pipeline() as pipeline:  # the caller's own pipeline, one level in
                cursor.execute(step.query, step.params)
                pipeline.sync()
        rows = cursor.fetchall() if cursor.description is not None else None
        return _result(cursor, step.fetch, rows)


async def run_async(conn: psycopg.AsyncConnection[Any], plan: Plan[T]) -> T:
    """Drive ``plan`` on an asynchronous connection."""
    try:
        step = next(plan)
        while True:
            step = plan.send(await _run_step_async(conn, step))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _run_step_async(conn: psycopg.AsyncConnection[Any], step: Step) -> Any:
    if isinstance(step, _CanCopy):
        return can_copy(conn)
    if isinstance(step, Copy):
        async with conn.cursor() as cursor, cursor.copy(step.query) as copy:
            await copy.write(step.data)
        return None
    async with conn.cursor(row_factory=dict_row, binary=step.binary) as cursor:
        if conn.pgconn.pipeline_status == pq.PipelineStatus.OFF:
            await cursor.execute(step.query, step.params)
        else:
            async with conn.pipeline() as pipeline:
                await cursor.execute(step.query, step.params)
                await pipeline.sync()
        rows = await cursor.fetchall() if cursor.description is not None else None
        return _result(cursor, step.fetch, rows)
