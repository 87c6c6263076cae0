"""The slot bound: how fast ``--concurrency C`` can drain no-op jobs while SQL tells the truth.

A worker shows a job ``running`` only from the commit that starts it to the commit that
records its outcome, and never more ``running`` rows than it has slots (held jobs read
``claimed``). A slot therefore passes at most one job per commit round trip: the
statement that records a job's outcome is the one that starts the slot's next job. By
Little's law a worker drains at most ``C / round trip`` no-op jobs per second, whatever
it holds ahead. This measures the round trip of the cheapest statement that could do it
(an ``UPDATE`` of C rows by primary key, committed) and, with ``--drain``, the real drain
of a ``pgq worker --concurrency C`` next to that ceiling, in the same run.

    python benchmarks/slot_bound.py --concurrency 8,32,128 --drain --jobs 20000
"""

from __future__ import annotations

import time

import _common as c


def round_trip(dsn: str, rows: int, statements: int) -> float:
    """Median seconds of one committed ``UPDATE`` of ``rows`` rows by primary key."""
    with c.connect(dsn) as conn:
        conn.execute("DROP TABLE IF EXISTS slot_bound")
        conn.execute("CREATE TABLE slot_bound (id int PRIMARY KEY, n int NOT NULL)")
        conn.execute("INSERT INTO slot_bound SELECT g, 0 FROM generate_series(1, 100000) g")
        times = []
        for i in range(statements):
            first = (i * rows) % (100_000 - rows)
            ids = list(range(first + 1, first + rows + 1))
            t0 = time.perf_counter()
            conn.execute("UPDATE slot_bound SET n = n + 1 WHERE id = ANY(%s)", (ids,))
            times.append(time.perf_counter() - t0)
        conn.execute("DROP TABLE slot_bound")
    median = c.median(times)
    assert median is not None
    return median


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=c.int_list, default=[8, 32, 128])
    p.add_argument("--statements", type=int, default=3000,
                   help="committed statements timed per concurrency")
    p.add_argument("--drain", action="store_true",
                   help="also drain --jobs no-op jobs with pgq worker --concurrency C")
    p.add_argument("--jobs", type=c.human_int, default=20_000)
    args = p.parse_args()

    c.ensure_database(args.dsn)
    info = c.machine(args.dsn)
    rows = []
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        for concurrency in args.concurrency:
            trip = round_trip(args.dsn, concurrency, args.statements)
            ceiling = concurrency / trip
            drained = (c.drain(bench, jobs=args.jobs, concurrency=concurrency)["drain_per_s"]
                       if args.drain else None)
            c.log(f"--concurrency {concurrency}: round trip {trip * 1e3:.3f} ms, "
                  f"ceiling {ceiling:,.0f} jobs/s, drained {c.fmt(drained)} jobs/s")
            rows.append({
                "concurrency": concurrency,
                "round_trip_ms": round(trip * 1e3, 3),
                "ceiling_per_s": round(ceiling, 1),
                "drain_per_s": drained,
                "drain_of_ceiling": round(drained / ceiling, 3) if drained else None,
            })
    if not args.quiet:
        c.table("the slot bound: one commit round trip per job and slot",
                ["--concurrency", "round trip ms", "ceiling jobs/s", "drain jobs/s",
                 "drain ÷ ceiling"],
                [[r["concurrency"], r["round_trip_ms"], r["ceiling_per_s"], r["drain_per_s"],
                  r["drain_of_ceiling"]] for r in rows])
    c.emit({"benchmark": "slot_bound", "statements": args.statements, "jobs": args.jobs,
            "rows": rows, "machine": info})


if __name__ == "__main__":
    main()
