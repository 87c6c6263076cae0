"""Bulk enqueue: ``enqueue_many`` against a raw ``INSERT ... SELECT FROM unnest`` in one run.

Variants, interleaved in every repetition, each inserting ``--jobs`` rows in one call and
one transaction into an empty table (no worker running):

* ``annotated``   — ``noop.enqueue_many([(i,), ...])`` for ``async def noop(i: int)``
  (arguments validated by pydantic); from ``COPY_MIN_JOBS`` jobs on, the rows go in
  with COPY;
* ``annotated_insert`` — the same call with COPY turned off: one ``INSERT ... SELECT``
  (what every batch did before COPY, and what a batch below ``COPY_MIN_JOBS`` does);
* ``plain``       — the same as ``annotated`` for ``async def noop_plain(i)`` (no
  annotation);
* ``raw_minimal`` — psycopg, ``INSERT INTO raw_jobs (payload) SELECT jsonb_build_object('i',
  g) FROM unnest(%s::int[]) g`` into the shared harness's minimal table (id, status,
  priority, run_at, attempts, payload, one partial index) — the harness's "raw" loop;
* ``raw_shaped``  — the same statement into a table shaped like ``pgqueue.jobs``
  (``LIKE pgqueue.jobs INCLUDING ALL``: same columns, defaults, checks, indexes; no trigger).

The timed span is the API call (or the raw statement plus its commit) with the input
list already built; connections are opened before timing. Rates are medians.

    python benchmarks/bulk_enqueue.py --jobs 100000 --reps 5
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import _common as c

import pgqueue.operations

RAW_MINIMAL = """
DROP TABLE IF EXISTS public.raw_jobs;
CREATE TABLE public.raw_jobs (
    id bigserial PRIMARY KEY,
    status text NOT NULL DEFAULT 'queued',
    priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    attempts int NOT NULL DEFAULT 0,
    payload jsonb NOT NULL
);
CREATE INDEX raw_jobs_queued ON public.raw_jobs (priority, run_at, id) WHERE status = 'queued';
"""
RAW_MINIMAL_INSERT = (
    "INSERT INTO public.raw_jobs (payload) "
    "SELECT jsonb_build_object('i', g) FROM unnest(%s::int[]) g"
)
RAW_SHAPED = """
DROP TABLE IF EXISTS public.raw_shaped_jobs;
CREATE TABLE public.raw_shaped_jobs (LIKE pgqueue.jobs INCLUDING ALL);
"""
RAW_SHAPED_INSERT = (
    "INSERT INTO public.raw_shaped_jobs (queue, task, args) "
    "SELECT 'bench', 'bench.noop', jsonb_build_array(g) FROM unnest(%s::int[]) g"
)
VARIANTS = ("annotated", "annotated_insert", "plain", "raw_minimal", "raw_shaped")


def without_copy(call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` with bulk enqueue's COPY path turned off (the INSERT path, for comparison)."""

    def run() -> None:
        threshold = pgqueue.operations.COPY_MIN_JOBS
        pgqueue.operations.COPY_MIN_JOBS = sys.maxsize
        try:
            call()
        finally:
            pgqueue.operations.COPY_MIN_JOBS = threshold

    return run


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=100_000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with c.bench_session(args.dsn, drop=args.drop) as bench, c.connect(args.dsn) as conn:
        assert bench.module is not None
        info = c.machine(args.dsn)
        conn.execute(RAW_MINIMAL)
        conn.execute(RAW_SHAPED)
        tasks = bench.module
        items = [(i,) for i in range(args.jobs)]
        numbers = list(range(args.jobs))
        tasks.q.workers()  # open the enqueue pool before timing

        def raw(statement: str) -> Callable[[], Any]:
            def insert() -> None:
                with conn.transaction():
                    conn.execute(statement, (numbers,))
            return insert

        calls: dict[str, Callable[[], Any]] = {
            "annotated": lambda: tasks.noop.enqueue_many(items),
            "annotated_insert": without_copy(lambda: tasks.noop.enqueue_many(items)),
            "plain": lambda: tasks.noop_plain.enqueue_many(items),
            "raw_minimal": raw(RAW_MINIMAL_INSERT),
            "raw_shaped": raw(RAW_SHAPED_INSERT),
        }
        for rep in range(1, args.reps + 1):
            order = VARIANTS if rep % 2 else tuple(reversed(VARIANTS))
            for name in order:
                conn.execute("TRUNCATE pgqueue.jobs, public.raw_jobs, public.raw_shaped_jobs")
                c.checkpoint(args.dsn)
                t0 = time.perf_counter()
                calls[name]()
                elapsed = time.perf_counter() - t0
                rates[name].append(args.jobs / elapsed)
            c.log(f"rep {rep}: " + ", ".join(f"{n} {c.fmt(rates[n][-1])}/s" for n in VARIANTS))

    medians = {name: c.median(values) for name, values in rates.items()}
    result: dict[str, Any] = {
        "benchmark": "bulk_enqueue",
        "jobs": args.jobs,
        "reps": args.reps,
        **{f"{name}_per_s": c.rounded(medians[name], 1) for name in VARIANTS},
    }
    for name in ("annotated", "annotated_insert", "plain"):
        for raw_name in ("raw_minimal", "raw_shaped"):
            ratio = (medians[name] or 0) / (medians[raw_name] or 1)
            result[f"{name}_vs_{raw_name}"] = round(ratio, 3)
    result["runs"] = {name: [round(r, 1) for r in values] for name, values in rates.items()}
    result["machine"] = info
    if not args.quiet:
        c.table(
            f"bulk enqueue: {args.jobs:,} jobs per call, median of {args.reps}",
            ["variant", "jobs/s (median)", "min", "max", "÷ raw_minimal", "÷ raw_shaped"],
            [[name, medians[name], min(rates[name]), max(rates[name]),
              (medians[name] or 0) / (medians["raw_minimal"] or 1),
              (medians[name] or 0) / (medians["raw_shaped"] or 1)] for name in VARIANTS],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
