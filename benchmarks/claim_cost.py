"""PostgreSQL's CPU per claim and per batch of outcomes, by batch size.

The statements the worker runs, each on a connection with its worker session's settings:
``--ready`` jobs enqueued, then claimed ``size`` at a time (resuming behind the last job
claimed, as the producer does) and each claim's jobs completed with one
``complete_jobs`` batch, until none is left. The backend's CPU time (``/proc``, so the
server must run on this machine) is read around every statement. A statement's cost is
mostly its own, not its rows': what the measured prefetch (``pgqueue/worker/prefetch.py``)
and the producer's claim batches are built on.

    python benchmarks/claim_cost.py --ready 20000 --sizes 10,50,100
"""

from __future__ import annotations

import secrets
from typing import Any

import _common as c
import psycopg

from pgqueue.db.queries import for_schema
from pgqueue.worker.completer import outcome_params
from pgqueue.worker.connections import CLAIMS, COMPLETIONS
from pgqueue.worker.outcome import Outcome


def cpu_seconds(pid: int) -> float:
    """The backend's CPU seconds so far (it runs on this machine: see the docstring)."""
    seconds = c.cpu_seconds(pid)
    if seconds is None:
        raise SystemExit("the server's backends are not on this machine: no /proc to read")
    return seconds


def backend_pid(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


def measure(bench: c.Bench, ready: int, size: int) -> dict[str, Any]:
    """Claim and complete ``ready`` jobs ``size`` at a time: server µs per statement."""
    assert bench.module is not None
    queries = for_schema("pgqueue")
    bench.module.q.close()
    c.reset_schema(bench.dsn)
    bench.module.noop.enqueue_many([(i,) for i in range(ready)])
    bench.module.q.close()
    # Each statement on a connection with its worker session's settings, as in a worker.
    with c.session_connection(bench.dsn, CLAIMS, autocommit=True) as conn, \
            c.session_connection(bench.dsn, COMPLETIONS, autocommit=True) as completions:
        conn.execute("ANALYZE pgqueue.jobs")
        conn.execute("INSERT INTO pgqueue.workers (id, hostname, pid, queues, concurrency, "
                     "lease_expires_at) VALUES ('bench', 'bench', 0, '{}', 8, "
                     "now() + interval '1 hour')")
        claimer, completer = (backend_pid(conn), backend_pid(completions))
        claim_cpu = complete_cpu = 0.0
        statements = done = 0
        after: dict[str, Any] | None = None
        while done < ready:
            token = secrets.randbits(63)
            params = {"worker_id": "bench", "lease": 60.0, "queues": [c.QUEUE_NAME],
                      "limit": size, "start": size, "token": token}
            query = queries.claim_jobs_in_queues if after is None \
                else queries.claim_jobs_in_queues_after
            before = cpu_seconds(claimer)
            with conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
                cursor.execute(query.sql, params | (after or {}), prepare=True)
                rows = cursor.fetchall()
            claim_cpu += cpu_seconds(claimer) - before
            if not rows:
                raise SystemExit(f"a claim found nothing after {done} of {ready} jobs")
            before = cpu_seconds(completer)
            completions.execute(queries.complete_jobs.sql, outcome_params(
                [Outcome(r["id"], 1, token, "succeeded") for r in rows]), prepare=True)
            complete_cpu += cpu_seconds(completer) - before
            statements += 1
            done += len(rows)
            last = max(rows, key=lambda r: (-r["priority"], r["run_at"], r["id"]))
            after = {"after_priority": last["priority"], "after_run_at": last["run_at"],
                     "after_id": last["id"]}
    return {
        "size": size,
        "claims": statements,
        "claim_us_per_statement": round(claim_cpu / statements * 1e6),
        "claim_us_per_job": round(claim_cpu / done * 1e6, 1),
        "complete_us_per_statement": round(complete_cpu / statements * 1e6),
        "complete_us_per_job": round(complete_cpu / done * 1e6, 1),
    }


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--ready", type=c.human_int, default=20_000)
    p.add_argument("--sizes", type=c.int_list, default=[10, 50, 100])
    args = p.parse_args()
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        results = [measure(bench, args.ready, size) for size in args.sizes]
        info = c.machine(args.dsn)
    if not args.quiet:
        c.table("server CPU per claim and per batch of outcomes (µs; /proc, one backend)",
                ["size", "claim/stmt", "claim/job", "complete/stmt", "complete/job"],
                [[r["size"], r["claim_us_per_statement"], r["claim_us_per_job"],
                  r["complete_us_per_statement"], r["complete_us_per_job"]]
                 for r in results])
    c.emit({"benchmark": "claim_cost", "ready": args.ready, "results": results,
            "machine": info})


if __name__ == "__main__":
    main()
