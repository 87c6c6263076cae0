"""OutcomeCounts: the worker's in-memory throughput counts (worker/counts.py)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from pgqueue.db.queries import for_schema
from pgqueue.worker.counts import OutcomeCounts, parameters


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeConnection:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.executed: list[tuple[bytes, dict[str, Any]]] = []

    async def execute(self, query: bytes, params: dict[str, Any]) -> None:
        self.executed.append((query, params))
        if self.error is not None:
            raise self.error


def test_outcomes_count_by_minute_queue_and_outcome() -> None:
    clock = Clock(120.5)
    counts = OutcomeCounts(clock)
    counts.add("a", "t", "succeeded")
    counts.add("a", "t", "result")  # ctx.transaction() success: counts as succeeded
    counts.add("a", "t", "retry")
    counts.add("b", "t", "dead")
    counts.add("b", "t", "release")  # a shutdown release is not an outcome
    counts.add("b", "t", "progress")
    clock.now = 180.0
    counts.add("a", "t", "succeeded")
    counts.add("b", "t", "snooze")
    counts.add("b", "t", "cancelled")
    assert counts.take() == {
        (120, "a", "t", "succeeded"): 2, (120, "a", "t", "failed"): 1,
        (120, "b", "t", "dead"): 1, (180, "a", "t", "succeeded"): 1,
        (180, "b", "t", "snoozed"): 1, (180, "b", "t", "cancelled"): 1,
    }
    assert not counts


def test_counts_given_back_add_to_those_counted_since() -> None:
    counts = OutcomeCounts(Clock(60.0))
    counts.add("a", "t", "succeeded")
    taken = counts.take()
    counts.add("a", "t", "succeeded")
    counts.give_back(taken)
    counts.add("a", "other", "succeeded")
    assert counts.take() == {(60, "a", "t", "succeeded"): 2, (60, "a", "other", "succeeded"): 1}


def test_parameters_are_parallel_arrays() -> None:
    params = parameters({(60, "a", "t1", "succeeded"): 2, (120, "b", "t2", "dead"): 1}, "w1")
    assert params == {
        "worker_id": "w1",
        "minutes": [datetime(1970, 1, 1, 0, 1, tzinfo=UTC), datetime(1970, 1, 1, 0, 2, tzinfo=UTC)],
        "queues": ["a", "b"], "tasks": ["t1", "t2"], "outcomes": ["succeeded", "dead"],
        "counts": [2, 1],
    }


async def test_a_lost_connection_keeps_the_counts_for_the_next_write() -> None:
    counts = OutcomeCounts(Clock(60.0))
    counts.add("a", "t", "succeeded")
    conn = FakeConnection(psycopg.OperationalError("server closed the connection"))
    with pytest.raises(psycopg.OperationalError):
        await counts.write(conn, for_schema("pgqueue"), "w1")  # type: ignore[arg-type]
    assert counts.take() == {(60, "a", "t", "succeeded"): 1}


async def test_any_other_error_drops_the_counts_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counts = OutcomeCounts(Clock(60.0))
    counts.add("a", "t", "succeeded")
    conn = FakeConnection(psycopg.errors.InsufficientPrivilege("permission denied"))
    with caplog.at_level(logging.WARNING, "pgqueue.worker"):
        await counts.write(conn, for_schema("pgqueue"), "w1")  # type: ignore[arg-type]
    assert not counts
    assert "Could not record 1 outcome count(s) in job_counts (permission denied)" in caplog.text


async def test_nothing_counted_writes_nothing() -> None:
    conn = FakeConnection()
    await OutcomeCounts().write(conn, for_schema("pgqueue"), "w1")  # type: ignore[arg-type]
    assert conn.executed == []
