"""The examples of the guides written for the documentation site run, as printed.

Each page's Python blocks run in order in one namespace through ``guide()`` (see
test_docs_examples.py): the examples assert their own results, so a wrong comment or a
changed behaviour fails here. Blocks marked ``<!-- not executed: reason -->`` are skipped
and must say why.
"""

from __future__ import annotations

import re

import psycopg

from tests.integration.test_docs_examples import DOCS, guide

PAGES = ["tasks", "enqueueing", "transactions", "retries-and-errors"]


def test_every_skipped_block_says_why() -> None:
    for name in PAGES:
        page = DOCS / "guides" / f"{name}.md"
        for marker in re.findall(r"<!-- not executed:([^>]*)-->", page.read_text()):
            assert len(marker.strip()) > 10, (page, marker)


def _dead_and_statuses(dsn: str) -> tuple[int, dict[str, int]]:
    with psycopg.connect(dsn) as conn:
        dead = conn.execute("SELECT count(*) FROM pgqueue.dead_jobs").fetchone()
        statuses: dict[str, int] = dict(
            conn.execute("SELECT status, count(*) FROM pgqueue.jobs GROUP BY 1"))
    assert dead is not None
    return dead[0], statuses


def test_tasks_guide_examples_run(dsn: str) -> None:
    with guide("tasks", dsn) as namespace:
        assert namespace["job"].status == "succeeded"
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 2})


def test_enqueueing_guide_examples_run(dsn: str) -> None:
    with guide("enqueueing", dsn) as namespace:
        assert namespace["jobs"][0].args == ["dan@example.com", "digest"]
    dead, statuses = _dead_and_statuses(dsn)
    # ran: job, urgent, first (= again), dan, eve, fay, gus; waiting: new_year;
    # cancelled: in_an_hour
    assert (dead, statuses) == (0, {"succeeded": 7, "queued": 1, "cancelled": 1})


def test_transactions_guide_examples_run(dsn: str) -> None:
    with guide("transactions", dsn) as namespace:
        assert namespace["declined"] not in (namespace["order_id"], namespace["other"])
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 2})


def test_retries_and_errors_guide_examples_run(dsn: str) -> None:
    with guide("retries-and-errors", dsn) as namespace:
        assert namespace["calls"] == ["https://example.com/feed.xml"] * 2
    # fetched; pushed retrying and early scheduled (queued rows); bad retried (queued);
    # slow dead
    assert _dead_and_statuses(dsn) == (1, {"succeeded": 1, "queued": 3})
