"""Drain throughput: N no-op jobs through one ``pgq worker --concurrency C`` process.

Per repetition: fresh schema, one worker started and registered (not timed), N jobs
inserted with one ``enqueue_many`` call (timed as the enqueue rate), then the drain is
timed from that commit until every job has recorded its start and no row is left queued
or running. Reports the median of the repetitions.

    python benchmarks/throughput.py --jobs 20000 --concurrency 8 --reps 3
"""

from __future__ import annotations

import shlex

import _common as c


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=20_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per drain")
    p.add_argument("--worker-args", default="",
                   help="extra pgq worker options, e.g. '--prefetch 0'")
    args = p.parse_args()

    runs = []
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            run = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                          timeout=args.timeout, worker_args=shlex.split(args.worker_args))
            c.log(f"rep {rep}: drain {c.fmt(run['drain_per_s'])} jobs/s, "
                  f"enqueue {c.fmt(run['enqueue_per_s'])} jobs/s")
            runs.append(run)

    drains = [r["drain_per_s"] for r in runs]
    result = {
        "benchmark": "throughput",
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "worker_args": args.worker_args,
        "processes": 1,
        "reps": args.reps,
        "drain_per_s": c.median(drains),
        "drain_per_s_min": min((d for d in drains if d is not None), default=None),
        "drain_per_s_max": max((d for d in drains if d is not None), default=None),
        "drain_s": c.median([r["drain_s"] for r in runs]),
        "enqueue_per_s": c.median([r["enqueue_per_s"] for r in runs]),
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "complete": all(r["complete"] for r in runs),
        "runs": runs,
        "machine": info,
    }
    if not args.quiet:
        c.table(
            f"throughput: {args.jobs:,} no-op jobs, pgq worker --concurrency "
            f"{args.concurrency}, 1 process",
            ["rep", "enqueue jobs/s", "drain s", "drain jobs/s", "dup", "missing"],
            [[i + 1, r["enqueue_per_s"], r["drain_s"], r["drain_per_s"], r["duplicates"],
              r["missing"]] for i, r in enumerate(runs)]
            + [["median", result["enqueue_per_s"], result["drain_s"], result["drain_per_s"],
                result["duplicates"], result["missing"]]],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
