"""Workers behind PgBouncer in transaction mode: idle latency and drain, against direct.

Starts its own PgBouncer (the Debian package; in transaction mode, ``--pool-size``
server connections) in front of the server of ``--dsn``, then measures, for each way of
running ``--workers`` worker processes, interleaved rep by rep:

* ``direct``: ``--dsn`` straight to PostgreSQL (the reference);
* ``pooled_listen``: ``--dsn`` through the pooler with ``pool_mode=transaction``, and
  ``--listen-dsn`` straight to PostgreSQL;
* ``pooled_poll``: through the pooler with ``--no-listen --poll-interval P``.

Each: the idle enqueue→start latency of ``--jobs`` single enqueues ``--gap`` s apart
(as ``latency.py``), and the drain of ``--drain-jobs`` no-op jobs (as ``throughput.py``).
Jobs are enqueued directly in every case, so only the workers' path differs.

    python benchmarks/pgbouncer.py --jobs 200 --drain-jobs 20000 --reps 3
"""

from __future__ import annotations

import sys
from pathlib import Path

import _common as c
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# The one way the project starts a PgBouncer (also the tests' fixture).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._database import DatabaseServer
from tests._pgbouncer import start_pgbouncer

MODES = ("direct", "pooled_listen", "pooled_poll")
LATENCY_KEYS = ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms")


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200, help="single enqueues for the latency")
    p.add_argument("--gap", type=float, default=0.02, help="seconds between enqueues")
    p.add_argument("--drain-jobs", type=int, default=20000)
    p.add_argument("--workers", type=int, default=3, help="worker processes")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--pool-size", type=int, default=4, help="the pooler's server connections")
    p.add_argument("--poll-interval", type=float, default=1.0, help="for pooled_poll")
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()

    direct = make_conninfo(args.dsn)
    params = conninfo_to_dict(direct)
    admin = make_conninfo(direct, dbname="postgres")
    bouncer = start_pgbouncer(DatabaseServer(admin_dsn=admin, backend="external"),
                              pool_size=args.pool_size)
    pooled = bouncer.dsn(direct) + " pool_mode=transaction"
    how = {
        "direct": (direct, []),
        "pooled_listen": (pooled, ["--listen-dsn", direct]),
        "pooled_poll": (pooled, ["--no-listen", "--poll-interval", f"{args.poll_interval:g}"]),
    }
    runs: dict[str, list[dict[str, object]]] = {mode: [] for mode in MODES}
    try:
        with c.bench_session(args.dsn, drop=args.drop) as bench:
            info = c.machine(args.dsn)
            for rep in range(1, args.reps + 1):
                for mode in MODES:
                    worker_dsn, extra = how[mode]
                    run = c.idle_latency(
                        bench, jobs=args.jobs, gap=args.gap, warmup=args.warmup,
                        concurrency=args.concurrency, processes=args.workers,
                        worker_args=extra, worker_dsn=worker_dsn)
                    run |= {"drain": c.drain(
                        bench, jobs=args.drain_jobs, concurrency=args.concurrency,
                        processes=args.workers, worker_args=extra, worker_dsn=worker_dsn)}
                    c.log(f"rep {rep} {mode}: latency p50 {run['p50_ms']} ms, p99 "
                          f"{run['p99_ms']} ms; drain {run['drain']['drain_per_s']} jobs/s")
                    runs[mode].append(run)
    finally:
        bouncer.stop()

    summary = {
        mode: {
            **{key: c.median([r[key] for r in runs[mode]]) for key in LATENCY_KEYS},
            "drain_per_s": c.median([r["drain"]["drain_per_s"] for r in runs[mode]]),
        }
        for mode in MODES
    }
    result = {
        "benchmark": "pgbouncer",
        "jobs": args.jobs,
        "gap_s": args.gap,
        "drain_jobs": args.drain_jobs,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "pool_size": args.pool_size,
        "poll_interval_s": args.poll_interval,
        "reps": args.reps,
        **summary,
        "duplicates": sum(r["duplicates"] + r["drain"]["duplicates"]
                          for mode in MODES for r in runs[mode]),
        "missing": sum(r["missing"] + r["drain"]["missing"] for mode in MODES for r in runs[mode]),
        "complete": all(r["complete"] and r["drain"]["complete"]
                        for mode in MODES for r in runs[mode]),
        "runs": runs,
        "server": {key: params.get(key) for key in ("host", "port", "dbname")},
        "machine": info,
    }
    if not args.quiet:
        c.table(
            f"{args.workers} workers x --concurrency {args.concurrency}; pooler: PgBouncer, "
            f"transaction mode, {args.pool_size} server connections; medians of {args.reps}",
            ["mode", *LATENCY_KEYS, "drain_per_s"],
            [[mode, *(summary[mode][k] for k in LATENCY_KEYS), summary[mode]["drain_per_s"]]
             for mode in MODES],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
