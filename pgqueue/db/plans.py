"""One piece of logic for both the sync and the async API.

A *plan* is a generator that yields :class:`Statement` objects and receives each one's
rows; :func:`run_sync` and :func:`run_async` drive it on a psycopg ``Connection`` or
``AsyncConnection``. The logic (retry loops, follow-up reads) is written once; only
these two small drivers know about sync versus async.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.rows import dict_row

T = TypeVar("T")
Row = dict[str, Any]
Fetch = Literal["one", "all", "rowcount"]
Plan = Generator["Statement", Any, T]


@dataclass(frozen=True)
class Statement:
    """A query, its parameters, and what the plan wants back."""

    query: bytes
    params: dict[str, Any] = field(default_factory=dict)
    fetch: Fetch = "one"


def _result(cursor: Any, fetch: Fetch, rows: list[Row] | None) -> Any:
    if fetch == "rowcount":
        return cursor.rowcount
    if fetch == "one":
        return rows[0] if rows else None
    return rows or []


def run_sync(conn: psycopg.Connection[Any], plan: Plan[T]) -> T:
    """Drive ``plan`` on a synchronous connection."""
    try:
        statement = next(plan)
        while True:
            with conn.cursor(row_factory=dict_row) as cursor:
                cursor.execute(statement.query, statement.params)
                rows = cursor.fetchall() if cursor.description is not None else None
                statement = plan.send(_result(cursor, statement.fetch, rows))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(conn: psycopg.AsyncConnection[Any], plan: Plan[T]) -> T:
    """Drive ``plan`` on an asynchronous connection."""
    try:
        statement = next(plan)
        while True:
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(statement.query, statement.params)
                rows = await cursor.fetchall() if cursor.description is not None else None
                statement = plan.send(_result(cursor, statement.fetch, rows))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
