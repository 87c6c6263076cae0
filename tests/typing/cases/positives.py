"""Calls that must type-check without a single error or ``type: ignore``."""

from __future__ import annotations

from typing import Any, assert_type

from pgqueue import Job, TaskSignature, chain, chord, group
from pgqueue.task import EnqueuedJobs

from .tasks import add, any_first, ctx_first, ctx_last, nightly, send, takes_anything, untyped


def sync_calls(conn: Any) -> None:
    assert_type(add.enqueue(1), Job)
    assert_type(add.enqueue(1, 2), Job)
    assert_type(add.enqueue(a=1, b=2), Job)
    assert_type(add.using(priority=5, run_in=30).enqueue(1, b=2), Job)
    assert_type(add.using(conn=conn).enqueue(1), Job)
    # The ctx parameter is the worker's to pass, not the caller's.
    assert_type(ctx_first.enqueue(42), Job)
    assert_type(ctx_first.enqueue(order_id=42), Job)
    # JobContext elsewhere than first: enqueue is not checked (runtime checks it).
    assert_type(ctx_last.enqueue(42), Job)
    assert_type(ctx_last.enqueue(order_id=42), Job)
    # Parameters typed object or Any, or not typed: any argument.
    takes_anything.enqueue({"any": ["json"]})
    untyped.enqueue(1, 2)
    any_first.enqueue("x", 2)
    assert_type(nightly.enqueue(), Job)
    # Direct calls run the function: its own signature and return type.
    assert_type(add(1, 2), int)
    assert_type(ctx_last(1, None), str)
    # Workflow steps: every argument, or (a step after another, which receives its
    # result first) every argument but the first positional one.
    assert_type(add.s(1), TaskSignature)
    assert_type(add.s(1, 2), TaskSignature)
    assert_type(add.s(a=1, b=2), TaskSignature)
    assert_type(add.s(), TaskSignature)
    assert_type(add.s(b=2), TaskSignature)
    assert_type(add.using(priority=1).s(1, 2), TaskSignature)
    assert_type(add.using(priority=1).s(), TaskSignature)
    assert_type(send.s("a@x", subject="hi"), TaskSignature)
    assert_type(send.s(subject="hi", cc=["b@x"]), TaskSignature)
    assert_type(ctx_first.s(42), TaskSignature)
    assert_type(ctx_first.s(), TaskSignature)
    assert_type(nightly.s(), TaskSignature)
    untyped.s("anything", 1)
    chain(add.s(1, 2), add.s(10), add.s())
    chord(group(add.s(1), add.s(2)), takes_anything.s())
    # Batches: typed items (task.args, every argument), or tuples and dicts (unchecked).
    assert_type(add.args(1, b=2).args, tuple[Any, ...])
    assert_type(add.enqueue_many([add.args(1, 2), add.args(3), add.args(a=4)]), EnqueuedJobs)
    assert_type(add.enqueue_many(add.args(n) for n in range(3)), EnqueuedJobs)
    assert_type(add.using(priority=2).enqueue_many([add.args(1), (2,), {"a": 3}]),
                EnqueuedJobs)
    assert_type(add.enqueue_many([(1, 2), (3,), {"a": 4}]), EnqueuedJobs)
    assert_type(ctx_first.enqueue_many([ctx_first.args(order_id=1)]), EnqueuedJobs)
    untyped.enqueue_many([untyped.args(1, 2)])


async def async_calls(conn: Any) -> None:
    assert_type(await send.enqueue_async("a@example.com", subject="hi"), Job)
    assert_type(await send.using(conn=conn).enqueue_async("a@x", subject="s", cc=["b@x"]),
                Job)
    assert_type(await add.enqueue_async(1), Job)
    assert_type(await ctx_first.enqueue_async(1), Job)
    assert_type(await add.enqueue_many_async([(1,)]), EnqueuedJobs)
    assert_type(await send.enqueue_many_async([send.args("a@x", subject="s")]), EnqueuedJobs)
