"""The worker's ledger of slots and held jobs (pgqueue/worker/ledger.py), without a
database: what is free, what a start may take, in which order held jobs start."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pgqueue.db.queries import ClaimedJob
from pgqueue.worker.ledger import Ledger
from pgqueue.worker.outcome import Outcome
from pgqueue.worker.prefetch import Prefetch

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, *, priority: int = 0, queue: str = "default", seconds: int = 0,
        started: bool = False) -> ClaimedJob:
    return ClaimedJob(job_id, queue, "t", [], {}, priority, 0, 3, None, {},
                      T0 + timedelta(seconds=seconds), T0, 7, started=started)


class FakeExecution:
    def __init__(self, claimed: ClaimedJob) -> None:
        self.job = claimed


def ledger(concurrency: int = 2, **kwargs: Any) -> Ledger:
    return Ledger(concurrency=concurrency, prefetch=Prefetch(4, concurrency=concurrency),
                  **kwargs)


def test_a_slot_is_taken_from_the_start_until_the_outcome_is_recorded() -> None:
    book = ledger()
    assert book.free_slots() == 2
    assert book.reserve(5) == 2  # no more than the free slots
    assert book.free_slots() == 0
    execution: Any = FakeExecution(job(1, started=True))
    book.began(execution)
    book.unreserve(2)
    assert (book.executing, book.free_slots()) == (1, 1)
    outcome = Outcome.of(execution.job, "succeeded")
    book.finished(execution, outcome)
    # Ended, its outcome not committed: SQL still shows it running.
    assert (book.executing, book.ended, book.free_slots()) == (0, 1, 1)
    book.recorded(outcome)
    assert (book.ended, book.free_slots()) == (0, 2)


def test_an_attempt_with_nothing_to_record_frees_its_slot_at_once() -> None:
    book = ledger()
    execution: Any = FakeExecution(job(1, started=True))
    book.began(execution)
    book.finished(execution, None)  # its lease was lost
    assert book.free_slots() == 2


def test_a_start_in_the_statement_that_records_outcomes_may_take_their_slots() -> None:
    book = ledger()
    executions: list[Any] = [FakeExecution(job(n, started=True)) for n in (1, 2)]
    for execution in executions:
        book.began(execution)
        book.finished(execution, Outcome.of(execution.job, "succeeded"))
    assert book.free_slots() == 0
    assert book.reserve(2) == 0
    assert book.reserve(2, freeing=2) == 2


def test_held_jobs_are_offered_in_claim_order_with_the_priority_to_beat() -> None:
    book = ledger(concurrency=8)
    book.hold([job(1, seconds=5), job(2, priority=5), job(3, seconds=1), job(4, priority=5,
                                                                            seconds=2)])
    offered, floor = book.offer(3)
    assert [j.id for j in offered] == [2, 4, 3]
    assert floor == 0
    assert book.held == 4  # offered, not taken: held until the start answers
    assert sorted(j.id for j in book.drop_held({2, 4})) == [2, 4]
    assert [j.id for j in book.offer(8)[0]] == [3, 1]
    assert book.offer(0) == ([], 32767)


def test_held_jobs_of_several_queues_start_queue_by_queue() -> None:
    book = ledger(concurrency=8, queue_rank={"high": 0, "low": 1})
    book.hold([job(1, queue="low", priority=9), job(2, queue="high")])
    assert [j.id for j in book.offer(2)[0]] == [2, 1]


def test_the_allowance_and_the_room_to_hold() -> None:
    book = ledger()
    assert (book.allowance, book.hold_room()) == (4, 4)
    book.hold([job(1), job(2), job(3)])
    assert book.hold_room() == 1
    book.hold_paused = True  # a limit concerns this worker: it holds nothing ahead
    assert (book.allowance, book.hold_room()) == (0, 0)
    assert ledger(queue_slots={"a": 1}).allowance == 0


def test_the_holdings_are_every_held_and_executing_claim() -> None:
    book = ledger()
    book.hold([job(1)])
    execution: Any = FakeExecution(job(2, started=True))
    book.began(execution)
    assert sorted(book.holdings()) == [(1, 7), (2, 7)]
    assert [j.id for j in book.take_all_held()] == [1]
    assert book.holdings() == [(2, 7)]


def test_demand_goes_to_the_completer_while_jobs_are_held() -> None:
    calls: list[str] = []
    book = ledger()
    book.on_start_demand = lambda: calls.append("start")
    book.on_claim_demand = lambda: calls.append("claim")
    book.hold([job(1)])
    assert calls == ["start", "claim"]
    calls.clear()
    book.draining = True
    book.slot_freed()
    assert calls == []


def test_dropping_held_jobs_from_the_tail_the_middle_or_not_held_at_all() -> None:
    book = ledger(concurrency=8)
    book.hold([job(n, priority=n) for n in range(1, 7)])  # start order: 6, 5, ..., 1
    assert [j.id for j in book.drop_held({6, 5})] == [6, 5]  # the next to start
    assert sorted(j.id for j in book.drop_held({4, 2, 99})) == [2, 4]  # 99: not held
    assert [j.id for j in book.offer(8)[0]] == [3, 1]
    assert book.drop_held({99}) == []
    assert book.held == 2
