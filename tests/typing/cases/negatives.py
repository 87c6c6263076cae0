"""Calls that must fail type checking, each with the errors it must raise.

A line's ``# expect:`` comment lists the mypy error codes and the pyright rules expected
on it; tests/typing/test_typing.py compares them with what the checkers say, exactly.
"""

from __future__ import annotations

from .tasks import add, ctx_first, nightly, send


def sync_calls() -> None:
    add.enqueue("1")  # expect: mypy[arg-type] pyright[reportArgumentType]
    add.enqueue()  # expect: mypy[call-arg] pyright[reportCallIssue]
    add.enqueue(1, c=3)  # expect: mypy[call-arg] pyright[reportCallIssue]
    add.enqueue(1, 2, 3)  # expect: mypy[call-arg] pyright[reportCallIssue]
    add.using(priority=5).enqueue("1")  # expect: mypy[arg-type] pyright[reportArgumentType]
    send.enqueue("a@x")  # expect: mypy[call-arg] pyright[reportCallIssue]
    send.enqueue("a@x", "hi")  # expect: mypy[call-arg] pyright[reportCallIssue]
    ctx_first.enqueue("42")  # expect: mypy[arg-type] pyright[reportArgumentType]
    ctx_first.enqueue(None, 42)  # expect: mypy[call-arg, arg-type] pyright[reportCallIssue]
    nightly.enqueue(1)  # expect: mypy[call-arg] pyright[reportCallIssue]
    total: str = add(1)  # expect: mypy[assignment] pyright[reportAssignmentType]
    del total


def workflow_steps() -> None:
    # Neither every argument nor every argument but the first fits.
    add.s("x")  # expect: mypy[call-overload] pyright[reportCallIssue, reportArgumentType]
    add.s(1, 2, 3)  # expect: mypy[call-overload] pyright[reportCallIssue]
    add.s(b="x")  # expect: mypy[call-overload] pyright[reportArgumentType]
    add.s(c=1)  # expect: mypy[call-overload] pyright[reportCallIssue]
    add.using(priority=1).s(1, "2")  # expect: mypy[call-overload] pyright[reportArgumentType]
    send.s(subject=1)  # expect: mypy[call-overload] pyright[reportArgumentType]
    send.s("a@x", "hi")  # expect: mypy[call-overload] pyright[reportCallIssue]
    ctx_first.s("42")  # expect: mypy[call-overload] pyright[reportArgumentType]
    nightly.s(1)  # expect: mypy[call-overload] pyright[reportCallIssue]


def batches() -> None:
    add.args("1")  # expect: mypy[arg-type] pyright[reportArgumentType]
    add.args()  # expect: mypy[call-arg] pyright[reportCallIssue]
    add.args(1, 2, 3)  # expect: mypy[call-arg] pyright[reportCallIssue]
    send.args("a@x")  # expect: mypy[call-arg] pyright[reportCallIssue]
    add.enqueue_many([send.args("a@x", subject="s")])  # expect: mypy[list-item] pyright[reportArgumentType]
    add.enqueue_many([add.s(1, 2)])  # expect: mypy[list-item] pyright[reportArgumentType]
    add.enqueue_many([add.args(1), 2])  # expect: mypy[list-item] pyright[reportArgumentType]


async def async_calls() -> None:
    await send.enqueue_async(1, subject="s")  # expect: mypy[arg-type] pyright[reportArgumentType]
    await send.using().enqueue_async("a@x", subject=1)  # expect: mypy[arg-type] pyright[reportArgumentType]
    await add.enqueue_async(b=2)  # expect: mypy[call-arg] pyright[reportCallIssue]
    await add.enqueue_many_async([add.args(a="1")])  # expect: mypy[arg-type] pyright[reportArgumentType]
