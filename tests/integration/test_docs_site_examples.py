"""The examples of the guides written for the documentation site run, as printed.

Each page's Python blocks run in order in one namespace through ``guide()`` (see
test_docs_examples.py): the examples assert their own results, so a wrong comment or a
changed behaviour fails here. Blocks marked ``<!-- not executed: reason -->`` are skipped
and must say why.
"""

from __future__ import annotations

import re
import shlex

import psycopg
from typer.testing import CliRunner

from tests.integration.test_docs_examples import DOCS, guide

COMING_FROM = ["coming-from/celery", "coming-from/rq", "coming-from/arq",
               "coming-from/bullmq", "coming-from/hand-built"]
PAGES = ["tasks", "enqueueing", "transactions", "retries-and-errors", *COMING_FROM]


def test_every_skipped_block_says_why() -> None:
    for name in PAGES:
        page = DOCS / "guides" / f"{name}.md"
        for marker in re.findall(r"<!-- not executed:([^>]*)-->", page.read_text()):
            assert len(marker.strip()) > 10, (page, marker)


def test_every_pgq_command_of_the_coming_from_pages_parses() -> None:
    """The ``pgq`` lines of their shell blocks (and of the Compose file's ``command:``)
    name commands and options that exist: each is parsed with ``--help`` appended, which
    checks every option name without running anything."""
    from pgqueue.cli.app import app

    pages = [DOCS / "guides" / f"{name}.md" for name in COMING_FROM]
    lines = []
    for page in pages:
        for block in re.findall(r"```(?:bash|yaml)\n(.*?)```", page.read_text(), re.DOTALL):
            for line in block.splitlines():
                command = line.split("#", 1)[0].strip().removeprefix("command:").strip()
                if command.startswith("pgq "):
                    lines.append(command)
    assert len(lines) >= 6
    runner = CliRunner()
    for command in lines:
        result = runner.invoke(app, [*shlex.split(command)[1:], "--help"])
        assert result.exit_code == 0, (command, result.output)


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
    # ran: job, urgent, first (= again), dan and eve twice (task.args, then a tuple and a
    # dict), fay, gus; waiting: new_year; cancelled: in_an_hour
    assert (dead, statuses) == (0, {"succeeded": 9, "queued": 1, "cancelled": 1})


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


def test_coming_from_celery_examples_run(dsn: str) -> None:
    with guide("coming-from/celery", dsn) as namespace:
        assert namespace["flaky"].status == "retrying"
    # job, by_name, the chain's 2 steps, the chord's 4; flaky retrying; later cancelled
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 8, "queued": 1, "cancelled": 1})


def test_coming_from_rq_examples_run(dsn: str) -> None:
    with guide("coming-from/rq", dsn):
        pass
    # job, urgent, the workflow's 3 steps; later and at_noon scheduled
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 5, "queued": 2})


def test_coming_from_arq_examples_run(dsn: str) -> None:
    with guide("coming-from/arq", dsn) as namespace:
        assert namespace["response"]["status"] == "queued"
        assert len(set(namespace["ids"])) == 2
    # the two payload jobs run by the first burst worker, by_name, run_agent_task;
    # later (run_in=30) scheduled; no.such.task retried from dead_jobs
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 3, "queued": 2})


def test_coming_from_bullmq_examples_run(dsn: str) -> None:
    with guide("coming-from/bullmq", dsn):
        pass
    with psycopg.connect(dsn) as conn:
        from_sql = conn.execute("SELECT task, args, priority FROM pgqueue.jobs "
                                "WHERE args->0->>'to' = 'bob@example.com'").fetchall()
    assert from_sql == [("send-email", [{"to": "bob@example.com"}], 10)]
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 1, "queued": 2})


def test_coming_from_a_hand_built_queue_examples_run(dsn: str) -> None:
    with guide("coming-from/hand-built", dsn):
        pass
    assert _dead_and_statuses(dsn) == (0, {"succeeded": 1, "queued": 1})
