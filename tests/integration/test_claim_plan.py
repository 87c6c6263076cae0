"""The hot queries use their partial indexes on a large, realistic jobs table.

A queue table is mostly finished rows: a million rows of which 98% succeeded and about
1% are queued. The claim must find its few queued rows through ``jobs_claim_idx``
without reading the finished ones, whatever the table's size; the rescuer and the pruner
have their own indexes. A sequential scan here would make every claim O(table).

Plans are checked twice where it matters:

* the *custom* plan, with the parameter values bound (what ``EXPLAIN`` with parameters
  shows, and what the first executions of a statement get);
* the *generic* plan, which PostgreSQL switches to for a prepared statement after five
  executions when it looks no worse (psycopg prepares statements it sees five times).

Each ``EXPLAIN ANALYZE`` runs inside a transaction that is rolled back, so the data is
the same for every test of the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pgqueue.db.queries import for_schema
from pgqueue.worker.completer import outcome_params
from pgqueue.worker.connections import COMPLETIONS
from pgqueue.worker.outcome import Outcome
from tests._database import DatabaseFactory, DatabaseServer, TemplateCache
from tests._prepared import as_prepared

ROWS = 1_000_000
QUERIES = for_schema("pgqueue")

# Per 1,000 consecutive ids: 980 succeeded, 5 cancelled, 5 running (a third of their
# leases expired), 10 queued (3 of them due in the future). Queues and priorities vary.
# (%% is psycopg's escape for the modulo operator in a statement with parameters.)
FILL_JOBS = """
INSERT INTO pgqueue.jobs
    (queue, task, args, status, priority, run_at, attempts, lease_expires_at, worker_id,
     result, created_at, started_at, finished_at, expires_at)
SELECT (ARRAY['default', 'email', 'reports', 'high'])[1 + g %% 4],
       'app.tasks.task_' || (g %% 20),
       jsonb_build_array(g),
       CASE WHEN r < 980 THEN 'succeeded' WHEN r < 985 THEN 'cancelled'
            WHEN r < 990 THEN 'running' ELSE 'queued' END,
       (g %% 3)::smallint,
       CASE WHEN r >= 997 THEN now() + make_interval(secs => 60 + g %% 3600)
            ELSE now() - make_interval(secs => g %% 172800) END,
       CASE WHEN r < 990 THEN 1 ELSE 0 END,
       CASE WHEN r >= 985 AND r < 990 THEN now() + make_interval(secs => g %% 90 - 30) END,
       CASE WHEN r >= 985 AND r < 990 THEN 'worker-' || (g %% 8) END,
       CASE WHEN r < 980 THEN '{"ok": true}'::jsonb END,
       now() - interval '3 days',
       CASE WHEN r < 990 THEN now() - interval '3 days' END,
       CASE WHEN r < 985 THEN now() - make_interval(secs => g %% 172800) END,
       CASE WHEN r < 985 THEN now() - make_interval(secs => g %% 172800)
                              + interval '1 day' END
  FROM generate_series(1, %(rows)s) AS g, LATERAL (SELECT g %% 1000 AS r) AS position
"""

CLAIM_PARAMS: dict[str, Any] = {"limit": 10, "start": 10, "worker_id": "worker-plan-test",
                                "lease": 30.0, "token": 1}


@pytest.fixture(scope="module")
def big_queue(
    database_server: DatabaseServer, templates: TemplateCache, session_token: str
) -> Iterator[str]:
    """A migrated database whose jobs table holds a million rows, analysed and vacuumed."""
    factory = DatabaseFactory(database_server, templates, session_token)
    try:
        dsn = factory.migrated("pgqueue")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(FILL_JOBS, {"rows": ROWS})
            conn.execute("VACUUM ANALYZE pgqueue.jobs")
        yield dsn
    finally:
        factory.drop_all()


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _explain(dsn: str, query: bytes, params: dict[str, Any]) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of ``query``, rolled back afterwards."""
    with psycopg.connect(dsn) as conn:
        try:
            explain = b"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query
            row = conn.execute(explain, params).fetchone()
        finally:
            conn.rollback()
    assert row is not None
    result: dict[str, Any] = row[0][0]
    return result


def _explain_generic(dsn: str, query: bytes, params: dict[str, Any]) -> dict[str, Any]:
    """The generic plan PostgreSQL would cache for ``query`` once it is prepared."""
    text, names = as_prepared(query)
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        try:
            conn.execute(b"PREPARE plan_under_test AS " + text)
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            arguments = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
            row = conn.execute(
                sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE plan_under_test({})").format(arguments)
            ).fetchone()
        finally:
            conn.rollback()
    assert row is not None
    result: dict[str, Any] = row[0][0]
    return result


def _describe(plan: dict[str, Any]) -> str:
    lines = []

    def walk(node: dict[str, Any], depth: int) -> None:
        label = node["Node Type"]
        if "Relation Name" in node:
            label += f" on {node['Relation Name']}"
        if "Index Name" in node:
            label += f" using {node['Index Name']}"
        for key in ("Index Cond", "Filter", "Actual Rows", "Rows Removed by Filter"):
            if key in node:
                label += f" [{key}: {node[key]}]"
        lines.append("  " * depth + label)
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    walk(plan["Plan"], 0)
    return "\n".join(lines)


def _assert_uses_index(plan: dict[str, Any], index: str) -> list[dict[str, Any]]:
    nodes = list(_nodes(plan["Plan"]))
    described = _describe(plan)
    seq_scans = [
        n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"
    ]
    assert seq_scans == [], f"sequential scan on jobs:\n{described}"
    using = [n for n in nodes if n.get("Index Name") == index]
    assert using, f"{index} not used:\n{described}"
    return using


def test_the_table_looks_like_a_busy_queue(big_queue: str) -> None:
    with psycopg.connect(big_queue) as conn:
        counts: dict[str, int] = dict(
            conn.execute(
                """
                SELECT CASE WHEN status = 'queued' AND run_at > now() THEN 'scheduled'
                            ELSE status END, count(*)
                  FROM pgqueue.jobs GROUP BY 1
                """
            ).fetchall()
        )
        expired = conn.execute(
            "SELECT count(*) FROM pgqueue.jobs"
            " WHERE status = 'running' AND lease_expires_at < now()"
        ).fetchone()
    assert sum(counts.values()) == ROWS
    assert counts["succeeded"] == ROWS * 98 // 100
    assert counts["queued"] == ROWS * 7 // 1000
    assert counts["scheduled"] == ROWS * 3 // 1000
    assert expired is not None and expired[0] > 0


@pytest.mark.parametrize(
    ("query", "params"),
    [
        (QUERIES.claim_jobs_any_queue.sql, CLAIM_PARAMS),
        (QUERIES.claim_jobs_in_queues.sql, {**CLAIM_PARAMS, "queues": ["email"]}),
        (QUERIES.claim_jobs_in_queues.sql,
         {**CLAIM_PARAMS, "queues": ["reports", "no-such-queue"]}),
    ],
    ids=["any-queue", "one-queue", "two-queues"],
)
def test_claim_reads_only_queued_rows_through_the_claim_index(
    big_queue: str, query: bytes, params: dict[str, Any]
) -> None:
    plan = _explain(big_queue, query, params)
    (scan,) = _assert_uses_index(plan, "jobs_claim_idx")
    described = _describe(plan)
    # The claim really claimed, and its index scan stopped after the few rows it needed
    # (all queued ones are due-or-not within one index; the finished 98% are not in it).
    assert plan["Plan"]["Actual Rows"] == params["limit"], described
    assert scan["Actual Rows"] == params["limit"], described
    assert scan.get("Rows Removed by Filter", 0) < 1000, described
    assert plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"] < 2000, described


@pytest.mark.parametrize(
    ("query", "params"),
    [
        (QUERIES.claim_jobs_any_queue.sql, CLAIM_PARAMS),
        (QUERIES.claim_jobs_in_queues.sql, {**CLAIM_PARAMS, "queues": ["email"]}),
    ],
    ids=["any-queue", "in-queues"],
)
def test_claim_keeps_the_claim_index_as_a_generic_prepared_plan(
    big_queue: str, query: bytes, params: dict[str, Any]
) -> None:
    _assert_uses_index(_explain_generic(big_queue, query, params), "jobs_claim_idx")


def _cursor_in_the_middle(dsn: str, queue: str | None) -> dict[str, Any]:
    """The claim-order key of a ready job well inside its priority."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT priority, run_at, id FROM pgqueue.jobs"
            " WHERE status = 'queued' AND run_at <= now() AND priority = 1"
            " AND (%(queue)s::text IS NULL OR queue = %(queue)s)"
            " ORDER BY run_at, id OFFSET 100 LIMIT 1",
            {"queue": queue},
        ).fetchone()
    assert row is not None
    return {"after_priority": row[0], "after_run_at": row[1], "after_id": row[2]}


@pytest.mark.parametrize(
    ("query", "queues"),
    [(QUERIES.claim_jobs_any_queue_after.sql, None),
     (QUERIES.claim_jobs_in_queues_after.sql, ["email"])],
    ids=["any-queue", "in-queues"],
)
def test_a_resumed_claim_starts_behind_its_cursor_inside_the_claim_index(
    big_queue: str, query: bytes, queues: list[str] | None
) -> None:
    params = CLAIM_PARAMS | _cursor_in_the_middle(big_queue, queues[0] if queues else None)
    if queues:
        params["queues"] = queues
    plan = _explain(big_queue, query, params)
    (scan,) = _assert_uses_index(plan, "jobs_claim_idx")
    described = _describe(plan)
    # The cursor is a bound of the index scan, not a filter applied to every entry.
    assert "ROW(run_at, id) >" in scan["Index Cond"], described
    assert "priority =" in scan["Index Cond"], described
    assert plan["Plan"]["Actual Rows"] == params["limit"], described
    assert scan.get("Rows Removed by Filter", 0) < 1000, described
    generic = _explain_generic(big_queue, query, params)
    (generic_scan,) = _assert_uses_index(generic, "jobs_claim_idx")
    assert "ROW(run_at, id) >" in generic_scan["Index Cond"], _describe(generic)


def test_rescuer_finds_expired_leases_through_the_lease_index(big_queue: str) -> None:
    plan = _explain(big_queue, QUERIES.rescue_expired_jobs.sql, {"limit": 100})
    _assert_uses_index(plan, "jobs_lease_idx")
    generic = _explain_generic(big_queue, QUERIES.rescue_expired_jobs.sql, {"limit": 100})
    _assert_uses_index(generic, "jobs_lease_idx")


def test_pruner_finds_finished_rows_through_the_finished_index(big_queue: str) -> None:
    plan = _explain(big_queue, QUERIES.prune_finished_jobs.sql, {"limit": 100})
    _assert_uses_index(plan, "jobs_expires_idx")


@pytest.mark.parametrize("queues", [[], ["email"]], ids=["any-queue", "in-queues"])
def test_idle_worker_finds_the_next_scheduled_job_through_the_scheduled_index(
    big_queue: str, queues: list[str]
) -> None:
    params = {"queues": queues}
    plan = _explain(big_queue, QUERIES.next_run_at.sql, params)
    _assert_uses_index(plan, "jobs_scheduled_idx")
    assert plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"] < 100, \
        _describe(plan)
    _assert_uses_index(_explain_generic(big_queue, QUERIES.next_run_at.sql, params),
                       "jobs_scheduled_idx")
    with psycopg.connect(big_queue) as conn:
        found = conn.execute(QUERIES.next_run_at.sql, params).fetchone()
        # The seconds until it is due, by the server's clock (read in one statement).
        expected = conn.execute(
            "SELECT extract(epoch FROM min(run_at) - clock_timestamp())::float8"
            "  FROM pgqueue.jobs WHERE status = 'queued' AND run_at > now()"
            " AND (cardinality(%(queues)s::text[]) = 0 OR queue = ANY(%(queues)s::text[]))",
            params,
        ).fetchone()
    assert found is not None and expected is not None
    assert found[0] is not None and found[0] == pytest.approx(expected[0], abs=0.5)


def test_a_job_enqueued_to_run_now_enters_no_scheduled_index_entry(dsn: str) -> None:
    """Only jobs due later than they were created are in jobs_scheduled_idx: an enqueue
    for now writes two index entries (primary key, claim index), not three."""
    from pgqueue import Queue

    q = Queue(dsn)

    @q.task(name="plan.now")
    def now_task(i: int) -> None:
        pass

    now_task.enqueue_many([(i,) for i in range(50)])
    now_task.enqueue(50)
    later = now_task.using(run_in=60).enqueue(51)
    q.close()
    query = "SELECT id FROM pgqueue.jobs WHERE status = 'queued' AND run_at > created_at"
    with psycopg.connect(dsn) as conn:
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = conn.execute("EXPLAIN (FORMAT JSON) " + query).fetchone()
        rows = conn.execute(query).fetchall()
    assert plan is not None and "jobs_scheduled_idx" in str(plan[0]), plan
    assert [row[0] for row in rows] == [later.id]


# The completer's statement, prepared while the table is nearly empty (a new deployment:
# psycopg prepares it on its sixth batch). PostgreSQL may then cache a generic plan made
# from those tiny statistics and keep it while the table grows: a sequential scan of
# jobs for every batch. The completer's connection therefore plans with
# enable_seqscan = off (connections.COMPLETIONS), which leaves the primary key as the only way
# to reach a row.
COMPLETE_PARAMS: dict[str, Any] = outcome_params([
    Outcome(1, 1, 1, "succeeded", "1"), Outcome(2, 1, 1, "dead", error="boom"),
])


@pytest.mark.parametrize("completer_settings", [True, False], ids=["completer", "defaults"])
def test_complete_jobs_generic_plan_made_on_an_empty_table_reaches_rows_by_primary_key(
    dsn: str, completer_settings: bool
) -> None:
    text, names = as_prepared(QUERIES.complete_jobs.sql)
    with psycopg.connect(dsn, cursor_factory=psycopg.ClientCursor) as conn:
        if completer_settings:  # what the completer's connection runs first
            conn.execute(*COMPLETIONS.first_statement())
        conn.execute(b"PREPARE plan_under_test AS " + text)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        arguments = sql.SQL(", ").join(sql.Literal(COMPLETE_PARAMS[name]) for name in names)
        row = conn.execute(
            sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE plan_under_test({})").format(arguments)
        ).fetchone()
        conn.rollback()
    assert row is not None
    plan: dict[str, Any] = row[0][0]
    if completer_settings:
        _assert_uses_index(plan, "jobs_pkey")
    else:
        # Why the setting exists: PostgreSQL's own choice here scans the whole table.
        scanned = [n.get("Relation Name") for n in _nodes(plan["Plan"])
                   if n["Node Type"] == "Seq Scan"]
        assert "jobs" in scanned, _describe(plan)
