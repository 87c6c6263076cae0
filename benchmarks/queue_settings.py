"""What queue settings cost: the claim with and without its checks of paused and limited
queues, limited and paused tasks and paused keys, and an enqueue into an unbounded and
into a bounded queue.

Claims (the worker's real statement ``claim_jobs_any_queue``, ``LIMIT 8``, prepared, on a
connection with the claim connection's settings, each rolled back so that every claim
meets the same table), interleaved round by round:

* ``no_check``  — the statement without those checks (the claim of revision 0005, for
  reference: what queues and limits cost a queue that uses neither);
* ``no_settings`` — today's statement, table ``queues`` empty;
* ``paused_other`` — a paused queue with no ready job;
* ``paused_ahead`` — a paused queue whose ``--paused-ahead`` ready jobs come first in
  claim order (higher priority): every claim walks over them.

Enqueues (``task.enqueue()``, the public API, one transaction each), interleaved:
``unbounded`` and ``bounded`` (``max_queued`` above what is queued, with ``--queued``
jobs already in the bounded queue: the insert trigger locks the queue's row and counts
them).

    python benchmarks/queue_settings.py --ready 20000 --claims 300 --enqueues 300
"""

from __future__ import annotations

import time
from typing import Any

import _common as c
import psycopg

from pgqueue.db.queries import for_schema
from pgqueue.worker.connections import CLAIMS

QUERIES = for_schema(c.SCHEMA)
CLAIM_PARAMS: dict[str, Any] = {"worker_id": "bench-claimer", "lease": 30.0, "token": 1,
                                "limit": 8, "start": 8}
# The claim's checks of queue settings and limits (paused or limited queues, limited or
# paused tasks, paused keys): from the first of them to ORDER BY. "no_check" drops them.
CHECKS_START = b"\nAND queue <> ALL (ARRAY(SELECT name FROM"
CHECKS_END = b"\nORDER BY"
CLAIM_VARIANTS = ("no_check", "no_settings", "paused_other", "paused_ahead")


def _fill(conn: psycopg.Connection[Any], queue: str, count: int, priority: int) -> None:
    conn.execute(
        "INSERT INTO pgqueue.jobs (queue, task, args, priority, run_at, created_at) "
        "SELECT %s, 'bench.noop', jsonb_build_array(g), %s, now() - interval '1 minute', "
        "now() - interval '1 minute' FROM generate_series(1, %s) g",
        (queue, priority, count))


def _settings(conn: psycopg.Connection[Any], variant: str) -> None:
    conn.execute("DELETE FROM pgqueue.queues")
    if variant == "paused_other":
        conn.execute("INSERT INTO pgqueue.queues (name, paused) VALUES ('idle', true)")
    elif variant == "paused_ahead":
        conn.execute("INSERT INTO pgqueue.queues (name, paused) VALUES ('ahead', true)")


def measure_claims(dsn: str, *, ready: int, ahead: int, claims: int) -> dict[str, Any]:
    statement = QUERIES.claim_jobs_any_queue.sql
    assert CHECKS_START in statement, "the claim's queue-settings checks moved"
    start, end = statement.index(CHECKS_START), statement.index(CHECKS_END)
    texts = {variant: statement for variant in CLAIM_VARIANTS}
    texts["no_check"] = statement[:start] + statement[end:]
    times: dict[str, list[float]] = {variant: [] for variant in CLAIM_VARIANTS}
    with c.connect(dsn) as setup:
        _fill(setup, c.QUEUE_NAME, ready, 0)
        _fill(setup, "ahead", ahead, 10)  # paused in paused_ahead; in the others, claimed
        setup.execute("VACUUM ANALYZE pgqueue.jobs")
    # Not autocommit: each claim is rolled back. The claim connection's settings.
    with c.session_connection(dsn, CLAIMS) as conn, c.connect(dsn) as setup:
        for _ in range(claims):
            for variant in CLAIM_VARIANTS:
                if variant in ("paused_other", "paused_ahead", "no_settings"):
                    _settings(setup, variant)
                t0 = time.perf_counter()
                rows = conn.execute(texts[variant], CLAIM_PARAMS, prepare=True).fetchall()
                times[variant].append((time.perf_counter() - t0) * 1000)
                conn.rollback()
                assert len(rows) == 8
        _settings(setup, "no_settings")
    return {variant: {"p50_ms": c.rounded(c.percentile(values[1:], 0.5), 3),
                      "p90_ms": c.rounded(c.percentile(values[1:], 0.9), 3)}
            for variant, values in times.items()}


def measure_enqueues(bench: c.Bench, *, queued: int, enqueues: int) -> dict[str, Any]:
    assert bench.module is not None
    with c.connect(bench.dsn) as setup:
        _fill(setup, "bounded", queued, 0)
        setup.execute("INSERT INTO pgqueue.queues (name, max_queued) VALUES ('bounded', %s)",
                      (queued + enqueues + 10,))
        setup.execute("VACUUM ANALYZE pgqueue.jobs")
    tasks = {"unbounded": bench.module.noop.using(queue="unbounded"),
             "bounded": bench.module.noop.using(queue="bounded")}
    times: dict[str, list[float]] = {name: [] for name in tasks}
    for i in range(enqueues):
        for name, task in tasks.items():
            t0 = time.perf_counter()
            task.enqueue(i)
            times[name].append((time.perf_counter() - t0) * 1000)
    return {name: {"p50_ms": c.rounded(c.percentile(values[1:], 0.5), 3),
                   "p90_ms": c.rounded(c.percentile(values[1:], 0.9), 3)}
            for name, values in times.items()}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--ready", type=int, default=20000, help="ready jobs in the claimed queue")
    p.add_argument("--paused-ahead", type=int, default=10000,
                   help="ready jobs of the paused queue, ahead in claim order")
    p.add_argument("--claims", type=int, default=300, help="claims per variant")
    p.add_argument("--queued", type=int, default=10000,
                   help="jobs already in the bounded queue")
    p.add_argument("--enqueues", type=int, default=300, help="enqueues per variant")
    args = p.parse_args()

    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        claims = measure_claims(args.dsn, ready=args.ready, ahead=args.paused_ahead,
                                claims=args.claims)
        assert bench.module is not None
        bench.module.q.close()
        c.reset_schema(args.dsn)
        enqueues = measure_enqueues(bench, queued=args.queued, enqueues=args.enqueues)
    result = {
        "benchmark": "queue_settings",
        "ready": args.ready, "paused_ahead": args.paused_ahead, "claims": args.claims,
        "queued": args.queued, "enqueues": args.enqueues,
        "claim": claims, "enqueue": enqueues,
        "machine": info,
    }
    if not args.quiet:
        c.table(f"claim (LIMIT 8) with {args.ready:,} ready jobs, {args.claims} per variant, "
                "interleaved", ["variant", "p50_ms", "p90_ms"],
                [[v, claims[v]["p50_ms"], claims[v]["p90_ms"]] for v in CLAIM_VARIANTS])
        c.table(f"enqueue(), {args.enqueues} per variant, interleaved; bounded queue holds "
                f"{args.queued:,}", ["variant", "p50_ms", "p90_ms"],
                [[v, enqueues[v]["p50_ms"], enqueues[v]["p90_ms"]] for v in enqueues])
    c.emit(result)


if __name__ == "__main__":
    main()
