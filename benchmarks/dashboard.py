"""Dashboard response times on a large table: does the overview stay under 200 ms?

Fills ``pgqueue.jobs`` with ``--jobs`` rows (default 1M: mostly succeeded and cancelled,
plus ready, scheduled, retrying and running ones on four queues) and ``pgqueue.dead_jobs``
with ``--dead`` rows (default 100k), all with ``generate_series``; adds an hour of
per-minute counts to ``job_counts`` and a few worker rows; ``VACUUM ANALYZE``s (as
autovacuum would have). Then serves a real ``pgq dashboard`` and times ``--requests``
HTTP GETs of each page and API endpoint over one keep-alive connection, the first one
separately (it opens pool connections and plans the statements).

``/api/stats`` is ``pgq stats``: it counts finished jobs too, so it reads the whole
table; the overview and ``/metrics`` read only indexes (``overview_counts``).

    python benchmarks/dashboard.py --jobs 1M --dead 100k --requests 30
    python benchmarks/dashboard.py --no-fill --backlog-index --requests 30
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

import _common as c
import httpx

from pgqueue.db.queries import for_schema

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/pgqueue_bench_dashboard"
QUERIES = for_schema(c.SCHEMA)
QUEUES = "(ARRAY['default', 'email', 'reports', 'bench'])[1 + mod(g, 4)]"
# Shares of the live rows by status, for a backlog (unfinished jobs) of 10%; --backlog
# scales the last three (the rest succeeded).
SHARES = {"cancelled": 0.05, "ready": 0.06, "scheduled": 0.03, "retrying": 0.01}
# An index that would let the overview count the backlog per queue from the index alone
# (no heap visits): not in the schema; --backlog-index creates it to measure what it buys.
BACKLOG_INDEX = ("CREATE INDEX IF NOT EXISTS jobs_queue_backlog_idx ON pgqueue.jobs "
                 "(queue, run_at) INCLUDE (attempts) WHERE status = 'queued'")
RUNNING = 200

FILL_JOBS = f"""
INSERT INTO pgqueue.jobs
    (queue, task, args, status, priority, run_at, attempts, worker_id, result, created_at,
     started_at, finished_at, lease_expires_at, last_error)
SELECT {QUEUES}, 'app.tasks.task_' || mod(g, 20), jsonb_build_array(g),
       s.status, 0, s.run_at, s.attempts, s.worker, s.result, t, s.started, s.finished,
       s.lease, s.error
  FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g,
       LATERAL (SELECT now() - interval '1 day'
                       + make_interval(secs => g * 86000.0 / %(total)s)) AS at(t),
       LATERAL (SELECT
           CASE WHEN k < %(c)s THEN 'cancelled' WHEN k < %(q)s THEN 'queued'
                WHEN k < %(s)s THEN 'queued' WHEN k < %(r)s THEN 'queued'
                ELSE 'succeeded' END AS status,
           CASE WHEN k < %(c)s THEN t WHEN k < %(q)s THEN t
                WHEN k < %(r)s THEN now() + interval '1 hour' ELSE t END AS run_at,
           CASE WHEN k >= %(s)s AND k < %(r)s THEN 1 WHEN k >= %(r)s THEN 1 ELSE 0 END
               AS attempts,
           CASE WHEN k >= %(r)s THEN 'filler-worker' END AS worker,
           CASE WHEN k >= %(r)s THEN '{{"ok": true}}'::jsonb END AS result,
           CASE WHEN k >= %(r)s THEN t END AS started,
           CASE WHEN k < %(c)s OR k >= %(r)s THEN t + interval '5 ms' END AS finished,
           NULL::timestamptz AS lease,
           CASE WHEN k >= %(s)s AND k < %(r)s THEN 'ValueError: try again' END AS error
         FROM (SELECT mod(g * 7919, 10000) / 10000.0 AS k) AS u) AS s
"""
FILL_RUNNING = f"""
INSERT INTO pgqueue.jobs (queue, task, args, status, run_at, attempts, worker_id,
                          started_at, lease_expires_at, lease_token)
SELECT {QUEUES}, 'app.tasks.task_' || mod(g, 20), jsonb_build_array(g), 'running',
       now() - interval '1 minute', 1, 'bench-worker-' || mod(g, 8), now() - interval '5 s',
       now() + interval '1 day', g
  FROM generate_series(1, {RUNNING}) AS g
"""
FILL_DEAD = f"""
INSERT INTO pgqueue.dead_jobs
    (id, queue, task, args, kwargs, priority, run_at, attempts, max_attempts, worker_id,
     last_error, meta, result_ttl, created_at, started_at, finished_at, error, failed_at)
SELECT nextval(pg_get_serial_sequence('pgqueue.jobs', 'id')), {QUEUES},
       'app.tasks.task_' || mod(g, 20), jsonb_build_array(g), '{{}}'::jsonb, 0, t, 3, 3,
       'filler-worker', e, '{{}}'::jsonb, 86400, t, t, t, e, t
  FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g,
       LATERAL (SELECT now() - interval '2 days' + make_interval(secs => mod(g, 86400)),
                       'Traceback (most recent call last):' || chr(10)
                       || '  File "app/tasks.py", line ' || mod(g, 500) || ', in task'
                       || chr(10) || 'ValueError: row ' || g) AS d(t, e)
"""
FILL_COUNTS = f"""
INSERT INTO pgqueue.job_counts (minute, queue, task, outcome, worker_id, count)
SELECT date_trunc('minute', now()) - make_interval(mins => m), {QUEUES},
       'app.tasks.task_' || mod(g, 20), o, 'bench-worker-' || w, 10 + mod(g * m, 50)
  FROM generate_series(0, 59) AS m, generate_series(0, 19) AS g,
       unnest(ARRAY['succeeded', 'failed']) AS o, generate_series(0, 7) AS w
"""
FILL_WORKERS = """
INSERT INTO pgqueue.workers (id, hostname, pid, queues, concurrency, started_at,
                             last_heartbeat_at, lease_expires_at)
SELECT 'bench-worker-' || g, 'bench-host', 1000 + g, ARRAY[]::text[], 8,
       now() - interval '1 hour', now(), now() + interval '1 day'
  FROM generate_series(0, 7) AS g
"""
CHUNK = 1_000_000


def fill(dsn: str, jobs: int, dead: int, backlog: float) -> dict[str, Any]:
    c.reset_schema(dsn)
    bounds: dict[str, float] = {}
    edge = 0.0
    for key, name in (("cancelled", "c"), ("ready", "q"), ("scheduled", "s"),
                      ("retrying", "r")):
        edge += SHARES[key] * (1 if key == "cancelled" else backlog / 0.10)
        bounds[name] = edge
    t0 = time.perf_counter()
    with c.connect(dsn) as conn:
        for start in range(1, jobs + 1, CHUNK):
            stop = min(jobs, start + CHUNK - 1)
            conn.execute(FILL_JOBS.encode(), bounds | {"start": start, "stop": stop,
                                                       "total": jobs})
        conn.execute(FILL_RUNNING.encode())
        for start in range(1, dead + 1, CHUNK):
            conn.execute(FILL_DEAD.encode(), {"start": start, "stop": min(dead, start + CHUNK - 1)})
        conn.execute(FILL_COUNTS.encode())
        conn.execute(FILL_WORKERS.encode())
        conn.execute("VACUUM ANALYZE pgqueue.jobs")
        conn.execute("VACUUM ANALYZE pgqueue.dead_jobs")
        conn.execute("VACUUM ANALYZE pgqueue.job_counts")
        rows = conn.execute("SELECT status, count(*) FROM pgqueue.jobs GROUP BY 1 ORDER BY 1"
                            ).fetchall()
    c.log(f"filled in {time.perf_counter() - t0:.0f} s: {dict(rows)}, dead {dead:,}")
    return {"fill_seconds": round(time.perf_counter() - t0, 1),
            "by_status": {status: count for status, count in rows}}


def explain_overview(dsn: str) -> str:
    with c.connect(dsn) as conn:
        plan = conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + QUERIES.overview_counts)
        return "\n".join(row[0] for row in plan.fetchall())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_endpoints(dsn: str, requests: int) -> list[dict[str, Any]]:
    port = _free_port()
    server = subprocess.Popen([*c.pgq_command(), "dashboard", "--dsn", dsn, "--port",
                               str(port)], stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=base, timeout=60) as client:
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the dashboard did not start")
                time.sleep(0.2)
            middle = client.get("/api/jobs", params={"limit": 1}).json()["jobs"][0]["id"] // 2
            deep = client.get("/api/jobs", params={"cursor": str(middle)}).json()
            dead_id = client.get("/api/dead", params={"limit": 1}).json()["jobs"][0]["id"]
            paths = [
                "/", "/api/overview", "/metrics", "/jobs", "/api/jobs",
                "/api/jobs?status=queued&queue=email",
                f"/api/jobs?cursor={deep['next_cursor']}",
                "/api/jobs?status=dead&queue=email", "/dead", f"/jobs/{dead_id}",
                "/queues", "/api/stats",
            ]
            results = []
            for path in paths:
                times = []
                for _ in range(requests):
                    t0 = time.perf_counter()
                    response = client.get(path)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert response.status_code == 200, (path, response.text[:200])
                rest = times[1:] or times
                results.append({
                    "path": path, "first_ms": c.rounded(times[0], 1),
                    "p50_ms": c.rounded(c.percentile(rest, 0.5), 1),
                    "p90_ms": c.rounded(c.percentile(rest, 0.9), 1),
                    "max_ms": c.rounded(max(rest), 1),
                })
                c.log(f"  {path}: p50 {results[-1]['p50_ms']} ms")
            return results
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.set_defaults(dsn=DEFAULT_DSN)
    p.add_argument("--jobs", type=c.human_int, default=1_000_000)
    p.add_argument("--dead", type=c.human_int, default=100_000)
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--backlog", type=float, default=0.10,
                   help="share of the jobs not finished (ready, scheduled, retrying)")
    p.add_argument("--backlog-index", action="store_true",
                   help="create jobs_queue_backlog_idx (not in the schema) first")
    p.add_argument("--no-fill", action="store_true", help="reuse the tables as they are")
    args = p.parse_args()
    c.ensure_database(args.dsn)
    filled = {} if args.no_fill else fill(args.dsn, args.jobs, args.dead, args.backlog)
    with c.connect(args.dsn) as conn:
        conn.execute("DROP INDEX IF EXISTS pgqueue.jobs_queue_backlog_idx")
        if args.backlog_index:
            conn.execute(BACKLOG_INDEX)
            conn.execute("VACUUM ANALYZE pgqueue.jobs")
    plan = explain_overview(args.dsn)
    if not args.quiet:
        c.log(plan)
    results = time_endpoints(args.dsn, args.requests)
    if not args.quiet:
        c.table(f"dashboard, {args.jobs:,} jobs ({args.backlog:.0%} unfinished) and "
                f"{args.dead:,} dead jobs, backlog index {'on' if args.backlog_index else 'off'}"
                f" ({args.requests} GETs each)",
                ["path", "first ms", "p50 ms", "p90 ms", "max ms"],
                [[r["path"], r["first_ms"], r["p50_ms"], r["p90_ms"], r["max_ms"]]
                 for r in results])
    c.emit({"benchmark": "dashboard", "jobs": args.jobs, "dead": args.dead,
            "backlog": args.backlog, "backlog_index": args.backlog_index,
            "requests": args.requests, **filled, "machine": c.machine(args.dsn),
            "results": results})
    if args.drop:
        c.drop_database(args.dsn)


if __name__ == "__main__":
    main()
