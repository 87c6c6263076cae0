"""What enqueueing without server-side prepared statements costs, per single enqueue.

pgqueue never prepares the statements of its enqueue path (they must work behind
PgBouncer in transaction mode, see pgqueue/db/plans.py). This measures, interleaved in
one run: ``task.enqueue(i)`` through pgqueue (one transaction each, never prepared), and
the same ``insert_job`` statement executed directly with psycopg, once prepared
(``prepare=True``) and once not, each in its own transaction. The difference between the
two direct variants is what preparing would save; the first column puts it in
proportion to a whole enqueue.

    python benchmarks/prepared_statements.py --jobs 2000 --reps 5
"""

from __future__ import annotations

import time
from typing import Any

import _common as c
import psycopg

from pgqueue import Queue
from pgqueue.options import JobOptions
from pgqueue.serialization import dumps


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2000, help="enqueues per variant and rep")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    c.ensure_database(args.dsn)
    c.reset_schema(args.dsn)
    queue = Queue(dsn=args.dsn)

    @queue.task(name="noop")
    def noop(i: int) -> None: ...

    statement = queue.queries.insert_job
    params: dict[str, Any] = JobOptions().as_params() | {
        "task": "noop", "args": dumps([1]), "kwargs": "{}",
    }

    def through_pgqueue() -> None:
        for i in range(args.jobs):
            noop.enqueue(i)

    def direct(prepare: bool) -> None:
        with psycopg.connect(args.dsn) as conn:
            for _ in range(args.jobs):
                conn.execute(statement, params, prepare=prepare)
                conn.commit()

    variants = {
        "pgqueue enqueue (not prepared)": through_pgqueue,
        "insert_job, prepared": lambda: direct(True),
        "insert_job, not prepared": lambda: direct(False),
    }
    timings: dict[str, list[float]] = {name: [] for name in variants}
    through_pgqueue()  # warm the pool and the caches
    try:
        for _ in range(args.reps):
            for name, run in variants.items():
                started = time.perf_counter()
                run()
                timings[name].append((time.perf_counter() - started) / args.jobs * 1e6)
    finally:
        queue.close()
    result = {name: c.rounded(c.median(values), 1) for name, values in timings.items()}
    prepared = result["insert_job, prepared"] or 0.0
    unprepared = result["insert_job, not prepared"] or 0.0
    whole = result["pgqueue enqueue (not prepared)"] or 1.0
    result["saving_us"] = c.rounded(unprepared - prepared, 1)
    result["saving_share_of_enqueue"] = c.rounded((unprepared - prepared) / whole, 3)
    if not args.quiet:
        c.table(f"µs per enqueue (median of {args.reps}, {args.jobs} each)",
                ["variant", "µs"], [[name, value] for name, value in result.items()])
    c.emit({"jobs": args.jobs, "reps": args.reps, **result, "machine": c.machine(args.dsn)})


if __name__ == "__main__":
    main()
