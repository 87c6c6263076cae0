"""Claim latency on a large table: does the claim stay flat with millions of finished rows?

Phases, each measuring ``--claims`` executions of the worker's real claim statement
(``claim_jobs_in_queues``, ``LIMIT --limit``, prepared, on a connection with
``synchronous_commit = off`` as the worker's claim connection has):

1. ``empty``    — a fresh jobs table holding only ``--queued`` ready jobs;
2. ``large``    — the same plus ``--finished`` succeeded rows (default 10M) in
   ``pgqueue.jobs`` and ``--dead`` rows (default 1M) in ``pgqueue.dead_jobs``, filled with
   ``generate_series`` and then ``VACUUM ANALYZE``-d (as autovacuum would have);
   ``EXPLAIN (ANALYZE, BUFFERS)`` of one claim is printed (rolled back);
3. ``pinned``   — ``--dead-tuples`` more jobs (default 1M, ahead of the ready ones in claim
   order) are finished while another session holds a transaction open
   (``BEGIN; SELECT txid_current()``): their dead claim-index entries can be neither
   vacuumed nor marked dead, so every claim steps over them;
4. ``released`` — the same table once that transaction has ended.

Filling 10M rows takes a few minutes; ``--finished 20000`` is a smoke run.

    python benchmarks/large_table.py --finished 10M --dead 1M --dead-tuples 1M
"""

from __future__ import annotations

import os
import re
import statistics
import time
from typing import Any

import _common as c
import psycopg

from pgqueue.db.queries import for_schema

QUERIES = for_schema(c.SCHEMA)
CHUNK = 1_000_000

FILL_FINISHED = """
INSERT INTO pgqueue.jobs
    (queue, task, args, status, priority, run_at, attempts, worker_id, result, created_at,
     started_at, finished_at)
SELECT (ARRAY['bench', 'email', 'reports', 'default'])[1 + g %% 4],
       'app.tasks.task_' || (g %% 20), jsonb_build_array(g), 'succeeded', 0,
       t, 1, 'filler-worker', '{"ok": true}'::jsonb, t, t, t + interval '5 ms'
  FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g,
       LATERAL (SELECT now() - interval '1 day'
                       + make_interval(secs => g * 86000.0 / %(total)s)) AS at(t)
"""
FILL_DEAD = """
INSERT INTO pgqueue.dead_jobs
    (id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts, worker_id,
     last_error, meta, result_ttl, created_at, started_at, finished_at, error, failed_at)
SELECT nextval(pg_get_serial_sequence('pgqueue.jobs', 'id')),
       (ARRAY['bench', 'email', 'reports', 'default'])[1 + g %% 4],
       'app.tasks.task_' || (g %% 20), jsonb_build_array(g), '{}'::jsonb, 0, t, 3, 3,
       'filler-worker', e, '{}'::jsonb, 86400, t, t, t, e, t
  FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g,
       LATERAL (SELECT now() - interval '2 days' + make_interval(secs => g %% 86400),
                       'Traceback (most recent call last):\n  File "app/tasks.py", line '
                       || g %% 500 || ', in task\nValueError: row ' || g) AS d(t, e)
"""
# Ready jobs for the claims, queued a minute ago in the benchmark's queue.
FILL_QUEUED = """
INSERT INTO pgqueue.jobs (queue, task, args, run_at, created_at)
SELECT 'bench', 'bench.noop', jsonb_build_array(g), now() - interval '1 minute',
       now() - interval '1 minute'
  FROM generate_series(1, %(count)s) AS g
"""
# Jobs that ran before the ready ones (earlier run_at, so ahead of them in claim order)
# and finished while a transaction was open: dead tuples nobody may remove yet.
FILL_AHEAD = """
INSERT INTO pgqueue.jobs (queue, task, args, run_at, created_at)
SELECT 'bench', 'bench.noop', jsonb_build_array(g), now() - interval '1 hour',
       now() - interval '1 hour'
  FROM generate_series(1, %(count)s) AS g
"""
FINISH_AHEAD = """
UPDATE pgqueue.jobs
   SET status = 'succeeded', attempts = 1, finished_at = now(), started_at = now(),
       result = 'null'::jsonb
 WHERE status = 'queued' AND run_at < now() - interval '30 minutes'
"""
CLAIM_PARAMS: dict[str, Any] = {"worker_id": "bench-claimer", "lease": 30.0, "token": 1,
                                "queues": [c.QUEUE_NAME]}


def fill(conn: psycopg.Connection[Any], statement: str, total: int, what: str) -> float:
    t0 = time.perf_counter()
    for start in range(1, total + 1, CHUNK):
        stop = min(total, start + CHUNK - 1)
        conn.execute(statement, {"start": start, "stop": stop, "total": total})
        c.log(f"  {what}: {stop:,} / {total:,} ({time.perf_counter() - t0:.0f} s)")
    return time.perf_counter() - t0


def measure_claims(dsn: str, claims: int, limit: int) -> dict[str, Any]:
    """Time ``claims`` claim statements (first one separately: it prepares and plans)."""
    query = QUERIES.claim_jobs_in_queues.sql
    params = CLAIM_PARAMS | {"limit": limit, "start": limit}
    times: list[float] = []
    claimed = 0
    with c.connect(dsn, options="-c synchronous_commit=off") as conn:
        for _ in range(claims):
            t0 = time.perf_counter()
            rows = conn.execute(query, params, prepare=True).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
            claimed += len(rows)
    rest = times[1:] or times
    return {
        "load_1m": round(os.getloadavg()[0], 2),
        "claims": claims,
        "claimed": claimed,
        "first_ms": c.rounded(times[0], 3) if times else None,
        "p50_ms": c.rounded(c.percentile(rest, 0.5), 3),
        "p90_ms": c.rounded(c.percentile(rest, 0.9), 3),
        "p99_ms": c.rounded(c.percentile(rest, 0.99), 3),
        "max_ms": c.rounded(max(rest, default=None), 3),
        "mean_ms": c.rounded(statistics.mean(rest) if rest else None, 3),
    }


def explain(dsn: str, limit: int) -> tuple[str, dict[str, Any]]:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim, rolled back; the text and key numbers."""
    query = QUERIES.claim_jobs_in_queues.sql
    with psycopg.connect(dsn) as conn:
        try:
            rows = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + query,
                                CLAIM_PARAMS | {"limit": limit, "start": limit}).fetchall()
        finally:
            conn.rollback()
    text = "\n".join(row[0] for row in rows)
    numbers: dict[str, Any] = {
        "uses_claim_index": "jobs_claim_idx" in text,
        "seq_scan_on_jobs": bool(re.search(r"Seq Scan on jobs", text)),
    }
    found = re.search(r"Execution Time: ([\d.]+) ms", text)
    numbers["execution_ms"] = float(found.group(1)) if found else None
    buffers = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", text)
    if buffers:
        numbers["top_shared_hit"] = int(buffers.group(1))
        numbers["top_shared_read"] = int(buffers.group(2) or 0)
    return text, numbers


def table_sizes(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    row = conn.execute("""
        SELECT (SELECT count(*) FROM pgqueue.jobs),
               (SELECT count(*) FROM pgqueue.dead_jobs),
               pg_total_relation_size('pgqueue.jobs'),
               pg_relation_size('pgqueue.jobs_claim_idx')
    """).fetchone()
    assert row is not None
    return {"jobs_rows": row[0], "dead_jobs_rows": row[1],
            "jobs_total_mb": round(row[2] / 2**20, 1), "claim_index_kb": row[3] // 1024}


def prepare(dsn: str, *, finished: int, dead: int, queued: int) -> dict[str, Any]:
    c.reset_schema(dsn)
    timings: dict[str, Any] = {}
    with c.connect(dsn, options="-c synchronous_commit=off") as conn:
        if finished:
            timings["fill_finished_s"] = round(fill(conn, FILL_FINISHED, finished,
                                                    "finished rows"), 1)
        if dead:
            timings["fill_dead_s"] = round(fill(conn, FILL_DEAD, dead, "dead jobs"), 1)
        conn.execute(FILL_QUEUED, {"count": queued})
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        conn.execute("VACUUM ANALYZE pgqueue.dead_jobs")
        timings["vacuum_analyze_s"] = round(time.perf_counter() - t0, 1)
        timings.update(table_sizes(conn))
    c.checkpoint(dsn)
    return timings


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--finished", type=c.human_int, default=10_000_000,
                   help="succeeded rows in pgqueue.jobs (10M; 20000 for a smoke run)")
    p.add_argument("--dead", type=c.human_int, default=None,
                   help="rows in pgqueue.dead_jobs (default: finished / 10)")
    p.add_argument("--dead-tuples", type=c.human_int, default=None,
                   help="jobs finished under an open transaction (default: finished / 10)")
    p.add_argument("--queued", type=c.human_int, default=20_000, help="ready jobs to claim")
    p.add_argument("--claims", type=int, default=2_000)
    p.add_argument("--pinned-claims", type=int, default=20,
                   help="claims measured while the transaction is open (each may be slow)")
    p.add_argument("--limit", type=int, default=8, help="jobs per claim (free slots)")
    args = p.parse_args()
    dead = args.finished // 10 if args.dead is None else args.dead
    dead_tuples = args.finished // 10 if args.dead_tuples is None else args.dead_tuples
    if args.queued < args.claims * args.limit:
        args.queued = args.claims * args.limit + (args.pinned_claims * 2 + 10) * args.limit

    phases: dict[str, dict[str, Any]] = {}
    pinned_plan = ""
    with c.bench_session(args.dsn, drop=args.drop):
        info = c.machine(args.dsn)
        c.log("empty: preparing")
        phases["empty"] = prepare(args.dsn, finished=0, dead=0, queued=args.queued)
        _, phases["empty"]["explain"] = explain(args.dsn, args.limit)
        phases["empty"] |= measure_claims(args.dsn, args.claims, args.limit)
        c.log(f"empty: p50 {phases['empty']['p50_ms']} ms")

        c.log(f"large: filling {args.finished:,} finished rows and {dead:,} dead jobs")
        phases["large"] = prepare(args.dsn, finished=args.finished, dead=dead,
                                  queued=args.queued)
        plan_text, phases["large"]["explain"] = explain(args.dsn, args.limit)
        phases["large"] |= measure_claims(args.dsn, args.claims, args.limit)
        c.log(f"large: p50 {phases['large']['p50_ms']} ms")

        if dead_tuples:
            with c.connect(args.dsn) as holder, c.connect(args.dsn) as conn:
                holder.execute("BEGIN")
                holder.execute("SELECT txid_current()")
                conn.execute(FILL_AHEAD, {"count": dead_tuples})
                conn.execute(FINISH_AHEAD)
                phases["pinned"] = {"dead_tuples_ahead": dead_tuples}
                pinned_plan, phases["pinned"]["explain"] = explain(args.dsn, args.limit)
                phases["pinned"] |= measure_claims(args.dsn, args.pinned_claims, args.limit)
                c.log(f"pinned: p50 {phases['pinned']['p50_ms']} ms")
                holder.execute("COMMIT")
            phases["released"] = {"dead_tuples_ahead": dead_tuples}
            phases["released"] |= measure_claims(args.dsn, args.pinned_claims, args.limit)
            c.log(f"released: first {phases['released']['first_ms']} ms, "
                  f"p50 {phases['released']['p50_ms']} ms")

    empty, large = phases["empty"], phases["large"]
    ratio_p50 = (large["p50_ms"] or 0) / (empty["p50_ms"] or 1)
    ratio_p99 = (large["p99_ms"] or 0) / (empty["p99_ms"] or 1)
    result = {
        "benchmark": "large_table",
        "finished": args.finished,
        "dead": dead,
        "dead_tuples": dead_tuples,
        "queued": args.queued,
        "limit": args.limit,
        "empty_p50_ms": empty["p50_ms"],
        "empty_p99_ms": empty["p99_ms"],
        "large_p50_ms": large["p50_ms"],
        "large_p99_ms": large["p99_ms"],
        "large_vs_empty_p50": round(ratio_p50, 2),
        "large_vs_empty_p99": round(ratio_p99, 2),
        # "flat": the median claim on the large table within 1.5x of the empty one's,
        # and the claim reads the claim index, never the whole table.
        "flat": ratio_p50 <= 1.5 and large["explain"]["uses_claim_index"]
        and not large["explain"]["seq_scan_on_jobs"],
        "pinned_p50_ms": phases.get("pinned", {}).get("p50_ms"),
        "released_p50_ms": phases.get("released", {}).get("p50_ms"),
        "phases": phases,
        "machine": info,
    }
    if not args.quiet:
        c.log("\nEXPLAIN (ANALYZE, BUFFERS) of one claim on the large table:\n" + plan_text + "\n")
        if dead_tuples:
            c.log("... and while a transaction pins the dead tuples ahead of the ready jobs:\n"
                  + pinned_plan + "\n")
        c.table(
            f"claim latency (ms), LIMIT {args.limit}, {args.claims:,} claims "
            f"({args.pinned_claims} in pinned/released)",
            ["phase", "rows in jobs", "dead_jobs", "first", "p50", "p90", "p99", "max",
             "plan ms"],
            [[name, ph.get("jobs_rows"), ph.get("dead_jobs_rows"), ph["first_ms"], ph["p50_ms"],
              ph["p90_ms"], ph["p99_ms"], ph["max_ms"], ph.get("explain", {}).get("execution_ms")]
             for name, ph in phases.items()],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
