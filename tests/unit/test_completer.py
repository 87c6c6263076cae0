"""How the completer merges what it is given before writing (no database).

Progress reports and the final outcome of one claim (job id + lease token) end up as one
row of the next batch: the final outcome wins, carrying the newest progress with it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

import pytest

from pgqueue.db.queries import for_schema
from pgqueue.worker.completer import Completer
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.prefetch import Prefetch

if TYPE_CHECKING:
    from pgqueue.worker.executor import Execution


@pytest.fixture
def completer() -> Completer:
    # The unit tests write nothing: the link is never called (there is no server).
    return Completer(connect=WorkerConnections("host=/nonexistent", "unit").link(),
                     queries=for_schema("pgqueue"),
                     ledger=Ledger(concurrency=2, prefetch=Prefetch(None, concurrency=2)),
                     on_recorded=lambda outcome, recorded: None,
                     on_started=lambda job: None,
                     start_params={"worker_id": "unit", "lease": 30.0, "queues": []})


def progress(value: str, job_id: int = 1, token: int = 1) -> Outcome:
    return Outcome(job_id, 1, token, "progress", progress=value)


def test_submit_marks_the_completer_busy(completer: Completer) -> None:
    assert completer.idle
    completer.submit(progress("1"))
    assert not completer.idle
    assert list(completer._pending) == [(1, 1)]


def test_newer_progress_replaces_older_progress(completer: Completer) -> None:
    completer.submit(progress("1"))
    completer.submit(progress("2"))
    assert completer._pending == {(1, 1): progress("2")}
    assert completer._pending[(1, 1)].progress == "2"


@pytest.mark.parametrize("kind", ["succeeded", "retry", "snooze", "release", "cancelled",
                                  "dead", "result"])
def test_a_final_outcome_takes_the_progress_reported_before_it(
    completer: Completer, kind: str
) -> None:
    completer.submit(progress('{"step": 1}'))
    completer.submit(progress('{"step": 2}'))
    final = Outcome(1, 1, 1, kind, result='"r"', error="e", delay=3.0)  # type: ignore[arg-type]
    completer.submit(final)
    merged = completer._pending[(1, 1)]
    assert (merged.kind, merged.result, merged.error, merged.delay) == (kind, '"r"', "e", 3.0)
    assert merged.progress == '{"step": 2}'
    assert len(completer._pending) == 1


def test_progress_after_the_final_outcome_rides_along_without_replacing_it(
    completer: Completer,
) -> None:
    completer.submit(Outcome(1, 1, 1, "succeeded", result="42"))
    completer.submit(progress('"late"'))
    merged = completer._pending[(1, 1)]
    assert (merged.kind, merged.result, merged.progress) == ("succeeded", "42", '"late"')


def test_a_final_outcome_keeps_its_own_progress(completer: Completer) -> None:
    completer.submit(progress('"old"'))
    completer.submit(Outcome(1, 1, 1, "succeeded", result="1", progress='"own"'))
    assert completer._pending[(1, 1)].progress == '"own"'


def test_claims_and_jobs_are_kept_apart(completer: Completer) -> None:
    completer.submit(progress('"a1"', job_id=1, token=7))
    # The same job and attempt number under another claim (say, claimed again after a
    # claim was lost in a PostgreSQL crash): a different token, a different outcome.
    completer.submit(Outcome(1, 1, 8, "succeeded", result="2"))
    completer.submit(Outcome(2, 1, 7, "retry", error="boom", delay=1.0))
    assert sorted(completer._pending) == [(1, 7), (1, 8), (2, 7)]
    assert completer._pending[(1, 8)].progress is None  # the first claim's progress stays its own
    assert completer._pending[(1, 7)].kind == "progress"


def test_batches_take_everything_pending_in_order(completer: Completer) -> None:
    for job_id in range(5):
        completer.submit(Outcome(job_id, 1, 1, "succeeded"))
    batch = completer._take_batch()
    assert [o.job_id for o in batch] == [0, 1, 2, 3, 4]
    assert completer._pending == {}


def test_outcome_finality() -> None:
    assert not progress("1").final
    assert not progress("1").holds_slot
    for kind in ("succeeded", "result", "retry", "snooze", "release", "cancelled", "dead"):
        assert Outcome(1, 1, 1, kind).final
        assert Outcome(1, 1, 1, kind).holds_slot
    # A held job given back never started: it ends the claim, and held no slot.
    assert Outcome(1, 0, 1, "unclaim").final
    assert not Outcome(1, 0, 1, "unclaim").holds_slot


def test_holdings_are_the_claims_of_the_outcomes_not_yet_written(
    completer: Completer,
) -> None:
    completer.submit(Outcome(1, 1, 7, "succeeded"))
    completer.submit(Outcome(2, 0, 7, "unclaim"))
    completer._batch = completer._take_batch()[:1]
    completer.submit(Outcome(3, 1, 9, "retry"))
    assert sorted(completer.holdings()) == [(1, 7), (3, 9)]


async def test_outcomes_ending_a_few_loop_turns_apart_share_one_batch() -> None:
    # Executions started by one statement end a turn or two of the event loop apart: the
    # completer waits for them while each turn brings more, so that one statement records
    # all of them (and starts as many held jobs as slots free) instead of the first only.
    ledger = Ledger(concurrency=3, prefetch=Prefetch(None, concurrency=3))
    completer = Completer(connect=WorkerConnections("host=/nonexistent", "unit").link(),
                          queries=for_schema("pgqueue"), ledger=ledger,
                          on_recorded=lambda outcome, recorded: None,
                          on_started=lambda job: None,
                          start_params={"worker_id": "unit", "lease": 30.0, "queues": []},
                          flush_interval=0)
    for job_id in (1, 2, 3):
        ledger.executions[job_id] = cast("Execution", object())

    async def execution(job_id: int, turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)
        del ledger.executions[job_id]
        completer.submit(Outcome(job_id, 1, 7, "succeeded"))

    ends = [asyncio.create_task(execution(job_id, job_id)) for job_id in (1, 2, 3)]
    await completer.wait()
    assert sorted(completer._pending) == [(1, 7), (2, 7), (3, 7)]
    await asyncio.gather(*ends)


async def test_a_long_execution_does_not_hold_back_the_batch_of_the_ended_ones() -> None:
    ledger = Ledger(concurrency=2, prefetch=Prefetch(None, concurrency=2))
    completer = Completer(connect=WorkerConnections("host=/nonexistent", "unit").link(),
                          queries=for_schema("pgqueue"), ledger=ledger,
                          on_recorded=lambda outcome, recorded: None,
                          on_started=lambda job: None,
                          start_params={"worker_id": "unit", "lease": 30.0, "queues": []},
                          flush_interval=0)
    ledger.executions[2] = cast("Execution", object())  # runs for ever
    completer.submit(Outcome(1, 1, 7, "succeeded"))
    await asyncio.wait_for(completer.wait(), 5)
    assert list(completer._pending) == [(1, 7)]
