"""Multi-process scaling: total drain rate with 1, 2, 3 ``pgq worker`` processes.

Same drain as ``throughput.py`` (N jobs enqueued with one ``enqueue_many`` into idle,
registered workers; timed from the commit until every job started and no row is
unfinished), with k worker processes of ``--concurrency C`` each competing for the same
queue. Three processes stand for "three hosts' worth" of workers: on one machine they
share its cores with PostgreSQL, so the question is whether claim contention makes the
total *fall*, not whether it grows. Process counts are interleaved per repetition.

    python benchmarks/scaling.py --jobs 30000 --processes 1,2,3 --reps 3
"""

from __future__ import annotations

import _common as c


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=30_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--processes", type=c.int_list, default=[1, 2, 3])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()

    runs: dict[int, list[dict[str, object]]] = {k: [] for k in args.processes}
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            order = args.processes if rep % 2 else list(reversed(args.processes))
            for k in order:
                run = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                              processes=k, timeout=args.timeout)
                runs[k].append(run)
                c.log(f"rep {rep}: {k} process(es): {c.fmt(run['drain_per_s'])} jobs/s")

    base = c.median([r["drain_per_s"] for r in runs[args.processes[0]]])  # type: ignore[misc]
    per_count = []
    for k in args.processes:
        rate = c.median([r["drain_per_s"] for r in runs[k]])  # type: ignore[misc]
        per_count.append({
            "processes": k,
            "drain_per_s": rate,
            "ratio_to_first": round(rate / base, 3) if rate and base else None,
            "runs": [r["drain_per_s"] for r in runs[k]],
            "duplicates": sum(int(r["duplicates"]) for r in runs[k]),  # type: ignore[call-overload]
            "missing": sum(int(r["missing"]) for r in runs[k]),  # type: ignore[call-overload]
            # PostgreSQL CPU per job (enqueue + claim + completion), this database's
            # backends and the server's background processes: 1e6 / it is how many
            # jobs/s one core of the server sustains.
            "pg_cpu_us_per_job": c.median([r["pg_cpu_us_per_job"] for r in runs[k]]),  # type: ignore[misc]
        })
    rates = [entry["drain_per_s"] for entry in per_count]
    result = {
        "benchmark": "scaling",
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "results": per_count,
        # "does not fall": no larger process count is more than 10% below the smallest one.
        "does_not_fall": all(r is not None and base and r >= 0.9 * base for r in rates),
        "machine": info,
    }
    if not args.quiet:
        c.table(
            f"scaling: {args.jobs:,} no-op jobs, k x pgq worker --concurrency {args.concurrency}",
            ["processes", "drain jobs/s (median)", f"÷ {args.processes[0]} process(es)",
             "runs", "PG CPU µs/job", "dup", "missing"],
            [[e["processes"], e["drain_per_s"], e["ratio_to_first"],
              " / ".join(c.fmt(r) for r in e["runs"]), e["pg_cpu_us_per_job"],
              e["duplicates"], e["missing"]]
             for e in per_count],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
