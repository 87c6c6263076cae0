"""What periodic jobs cost: a tick, the wake-up for it, and nothing per claim.

* ``round``: a scheduler round with one due tick (read the due schedules, the tick
  statement that inserts the job and advances the schedule, read the next tick), timed
  ``--ticks`` times on a standalone scheduler; each tick a different minute, so every
  round inserts one job (``duplicates``/``missing`` count the jobs against the ticks).
* ``lag``: an in-process worker sleeping until a tick ``--lead`` s ahead (set in SQL,
  notified like any schedule change): the tick's ``jobs.created_at - jobs.run_at``, the
  time from the tick to the insert's transaction start, ``--lag-ticks`` times.
* ``claims``: an in-process worker whose Queue has no periodic task drains ``--jobs``
  no-op jobs: its claim statements, and the scheduler rounds it ran meanwhile.

    python benchmarks/periodic.py --ticks 300 --lag-ticks 5 --jobs 5000
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import _common as c

from pgqueue.worker import Worker, WorkerSettings
from pgqueue.worker.connections import WorkerConnections
from pgqueue.worker.scheduler import Scheduler


async def measure_rounds(bench: c.Bench, ticks: int) -> dict[str, Any]:
    assert bench.module is not None
    q = bench.module.q
    await asyncio.to_thread(q.schedule, "bench", "* * * * *", "bench.noop", args=[0])
    connections = WorkerConnections(bench.dsn, "bench-scheduler")
    conn = await connections.connect()
    scheduler = Scheduler(connect=lambda: _same(conn), queries=q.queries, specs=[], lease=30)
    times: list[float] = []
    try:
        for i in range(ticks):
            await conn.execute("UPDATE pgqueue.schedules SET next_run_at = "
                               "date_trunc('minute', now()) - make_interval(mins => %s) "
                               "WHERE name = 'bench'", (i + 1,))
            t0 = time.perf_counter()
            await scheduler.round()
            times.append((time.perf_counter() - t0) * 1000)
        cursor = await conn.execute("SELECT count(*), count(DISTINCT run_at) FROM pgqueue.jobs")
        jobs, distinct = await cursor.fetchone() or (0, 0)
        await conn.execute("DELETE FROM pgqueue.schedules")
    finally:
        await conn.close()
    return {"p50_ms": c.rounded(c.percentile(times[1:], 0.5), 3),
            "p90_ms": c.rounded(c.percentile(times[1:], 0.9), 3),
            "duplicates": jobs - distinct, "missing": ticks - distinct}


async def _same(conn: Any) -> Any:
    return conn


async def measure_lag(bench: c.Bench, ticks: int, lead: float) -> dict[str, Any]:
    assert bench.module is not None
    q = bench.module.q
    await asyncio.to_thread(q.schedule, "lag", "@yearly", "bench.noop", args=[0])
    worker = Worker(q, WorkerSettings(concurrency=2, install_signal_handlers=False,
                                      queues=["nowhere"]))
    run = asyncio.create_task(worker.run())
    lags: list[float] = []
    conn = await WorkerConnections(bench.dsn, "bench-lag").connect()
    try:
        await asyncio.wait_for(worker.ready.wait(), 30)
        for _ in range(ticks):
            cursor = await conn.execute(
                "UPDATE pgqueue.schedules SET paused = false, next_run_at = "
                "clock_timestamp() + make_interval(secs => %s) WHERE name = 'lag' "
                "RETURNING next_run_at", (lead,))
            row = await cursor.fetchone()
            assert row is not None
            tick = row[0]
            deadline = time.monotonic() + lead + 10
            while time.monotonic() < deadline:
                cursor = await conn.execute(
                    "SELECT extract(epoch FROM created_at - run_at) FROM pgqueue.jobs "
                    "WHERE task = 'bench.noop' AND run_at = %s", (tick,))
                found = await cursor.fetchone()
                if found:
                    lags.append(float(found[0]) * 1000)
                    break
                await asyncio.sleep(0.05)
            else:
                raise SystemExit("a tick was not enqueued")
    finally:
        await conn.close()
        worker.request_stop()
        await run
    return {"p50_ms": c.rounded(c.percentile(lags, 0.5), 2),
            "max_ms": c.rounded(max(lags), 2), "ticks": len(lags)}


async def measure_claims(bench: c.Bench, jobs: int) -> dict[str, Any]:
    assert bench.module is not None
    q = bench.module.q
    await asyncio.to_thread(q.unschedule, "lag")
    await asyncio.to_thread(q.purge_queue, c.QUEUE_NAME)
    worker = Worker(q, WorkerSettings(concurrency=8, install_signal_handlers=False))
    assert worker.scheduler is not None and not q.periodic_tasks
    counts = {"claims": 0, "scheduler_rounds": 0}
    claim, scheduler_round = worker.producer._claim, worker.scheduler.round

    async def counted_claim(*args: Any, **kwargs: Any) -> Any:
        counts["claims"] += 1
        return await claim(*args, **kwargs)

    async def counted_round() -> None:
        counts["scheduler_rounds"] += 1
        await scheduler_round()

    worker.producer._claim = counted_claim  # type: ignore[method-assign]
    worker.scheduler.round = counted_round  # type: ignore[method-assign]
    await asyncio.to_thread(bench.module.noop.enqueue_many, [(i,) for i in range(jobs)])
    run = asyncio.create_task(worker.run())
    started = time.perf_counter()
    with c.connect(bench.dsn) as conn:
        while c.unfinished(conn):
            await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    worker.request_stop()
    await run
    return counts | {"jobs": jobs, "drain_s": c.rounded(elapsed, 2)}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--ticks", type=int, default=300, help="timed scheduler rounds")
    p.add_argument("--lag-ticks", type=int, default=5, help="ticks a sleeping worker enqueues")
    p.add_argument("--lead", type=float, default=0.5, help="seconds from setting to tick")
    p.add_argument("--jobs", type=int, default=5000, help="jobs drained without schedules")
    args = p.parse_args()

    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        rounds = asyncio.run(measure_rounds(bench, args.ticks))
        lag = asyncio.run(measure_lag(bench, args.lag_ticks, args.lead))
        claims = asyncio.run(measure_claims(bench, args.jobs))
    result = {
        "benchmark": "periodic", "ticks": args.ticks, "round": rounds, "lag": lag,
        "claims": claims, "duplicates": rounds["duplicates"], "missing": rounds["missing"],
        "machine": info,
    }
    if not args.quiet:
        c.table(f"scheduler round with one due tick, {args.ticks} rounds",
                ["p50_ms", "p90_ms", "duplicates", "missing"],
                [[rounds["p50_ms"], rounds["p90_ms"], rounds["duplicates"], rounds["missing"]]])
        c.table("tick → job inserted (created_at - run_at), sleeping worker",
                ["ticks", "p50_ms", "max_ms"], [[lag["ticks"], lag["p50_ms"], lag["max_ms"]]])
        c.table(f"worker without periodic tasks draining {args.jobs} jobs",
                ["claims", "scheduler_rounds", "drain_s"],
                [[claims["claims"], claims["scheduler_rounds"], claims["drain_s"]]])
    c.emit(result)


if __name__ == "__main__":
    main()
