"""Tasks the typing cases enqueue: one of each shape ``@q.task`` types differently.

Never run: the typing test only hands these files to mypy and pyright. The Queue below
would connect on first use, and nothing uses it.
"""

from __future__ import annotations

from typing import Any

from pgqueue import JobContext, Queue

q = Queue(dsn="postgresql://typing@127.0.0.1:1/never")


@q.task
def add(a: int, b: int = 0) -> int:
    return a + b


@q.task(queue="emails", max_attempts=3)
async def send(to: str, *, subject: str, cc: list[str] | None = None) -> None: ...


@q.task
def ctx_first(ctx: JobContext, order_id: int) -> str:
    return str(order_id)


@q.task(name="ctx_last")
def ctx_last(order_id: int, ctx: JobContext) -> str:
    return str(order_id)


@q.task
def takes_anything(value: object) -> None: ...


@q.task
def untyped(a, b):  # type: ignore[no-untyped-def]
    return a


@q.task
def any_first(a: Any, b: int) -> int:
    return b


@q.periodic("@daily")
@q.task
def nightly() -> None: ...
