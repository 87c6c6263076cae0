"""ctx.step's checks, which run before anything touches the database or calls ``fn``.

No database here: the context's connections refuse to be used, so every test shows that
the refusal happened first. What a step stores and returns is in
tests/integration/test_steps.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue import JobContext, LeaseLost
from pgqueue.db.queries import for_schema
from pgqueue.job import Job


class NoConnections:
    def sync_pool(self) -> Any:
        raise AssertionError("a refused step must not reach the database")

    async def async_pool(self) -> Any:
        raise AssertionError("a refused step must not reach the database")


def context(*, asynchronous: bool = False) -> JobContext:
    now = datetime.now(UTC)
    job = Job(id=42, queue="default", task="t", args=[], kwargs={}, status="running",
              priority=0, run_at=now, attempts=1, max_attempts=3, created_at=now)
    return JobContext(job, worker_id="w1", queries=for_schema("pgqueue"),
                      report_progress=lambda value: None, connections=NoConnections(),
                      lease_token=7, asynchronous=asynchronous)


def never(*args: Any) -> None:
    raise AssertionError("fn must not be called")


@pytest.mark.parametrize(("name", "problem"), [
    ("", "invalid step name '': must not be empty (a step name is 1 to 200 printable "
         "characters)"),
    ("  ", "invalid step name '  ': must not be empty"),
    (" padded", "must not start or end with whitespace"),
    ("x" * 201, "is 201 characters long; the limit is 200"),
    ("tab\there", "contains '\\t'"),
    (None, "invalid step name None: expected a string, got NoneType"),
])
def test_a_bad_name_raises_one_line_naming_it(name: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid step name ") as raised:
        context().step(name, never)
    assert problem in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_longest_name_is_accepted_by_the_checks() -> None:
    ctx = context()
    ctx._steps.begin("x" * 200, never)  # the next thing would be the database


def test_fn_must_be_callable() -> None:
    with pytest.raises(TypeError, match=r"^step 'charge-card': expected a function to call, "
                                        r"got 'not a function'$"):
        context().step("charge-card", "not a function")  # type: ignore[arg-type]


def test_a_name_started_twice_in_one_run_raises_before_calling_fn() -> None:
    ctx = context()
    ctx._steps.begin("charge-card", never)
    with pytest.raises(ValueError) as raised:
        ctx.step("charge-card", never)
    assert str(raised.value) == (
        "step 'charge-card' is used twice in job 42: each step of a job needs its own name "
        "(for repeated work, put a number or key in it: 'charge-card:2')")


def test_a_worker_that_knows_it_lost_the_lease_calls_nothing() -> None:
    ctx = context(asynchronous=True)
    ctx.lease_lost = True  # what the heartbeat sets
    with pytest.raises(LeaseLost, match="step 'late' was not recorded"):
        ctx.step("late", never)


def test_a_step_after_the_transaction_committed_is_refused() -> None:
    ctx = context()
    ctx.completed_in_transaction = True
    with pytest.raises(RuntimeError, match=r"^step 'after' started after ctx\.transaction"):
        ctx.step("after", never)


async def test_an_async_task_gets_an_awaitable_and_the_name_is_checked_at_once() -> None:
    ctx = context(asynchronous=True)
    with pytest.raises(ValueError, match="must not be empty"):
        ctx.step("", never)  # raised by the call itself, not when awaited
    pending = ctx.step("fetch", never)
    assert hasattr(pending, "__await__")
    pending.close()  # never awaited: it would reach the (refusing) database
