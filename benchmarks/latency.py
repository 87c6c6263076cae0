"""Idle enqueue→start latency: single enqueues, 20 ms apart, into an idle worker.

One ``pgq worker --concurrency C`` is started, registered and left idle for a warm-up;
then ``--jobs`` jobs are enqueued one by one with ``task.enqueue(i)`` (one transaction
each), ``--gap`` seconds apart. Latency = the job's start time (recorded by the task with
``time.time()``) minus the time right after ``enqueue`` returned (the commit). The path
measured is commit → NOTIFY → listener → producer claim → executor → task.

    python benchmarks/latency.py --jobs 200 --gap 0.02
"""

from __future__ import annotations

import _common as c


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--gap", type=float, default=0.02, help="seconds between enqueues")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--warmup", type=float, default=1.5, help="seconds the worker idles first")
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()

    runs = []
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            run = c.idle_latency(bench, jobs=args.jobs, gap=args.gap, warmup=args.warmup,
                                 concurrency=args.concurrency)
            c.log(f"rep {rep}: p50 {run['p50_ms']} ms, p99 {run['p99_ms']} ms")
            runs.append(run)

    result = {
        "benchmark": "latency",
        "jobs": args.jobs,
        "gap_s": args.gap,
        "concurrency": args.concurrency,
        "reps": args.reps,
        **{key: c.median([r[key] for r in runs])
           for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms",
                       "enqueue_call_p50_ms")},
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "complete": all(r["complete"] for r in runs),
        "runs": runs,
        "machine": info,
    }
    if not args.quiet:
        keys = ["p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "enqueue_call_p50_ms"]
        c.table(
            f"latency: {args.jobs} single enqueues {args.gap * 1000:.0f} ms apart into an "
            f"idle pgq worker --concurrency {args.concurrency}",
            ["rep", *keys, "dup", "missing"],
            [[i + 1, *(r[k] for k in keys), r["duplicates"], r["missing"]]
             for i, r in enumerate(runs)],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
