"""What ``pgq worker --metrics-port`` costs: the drain of N no-op jobs with and without it.

Interleaved in one run (off, on, off, on, …) so both see the same machine. With the
endpoint on, a scraper reads ``/metrics`` every ``--scrape-interval`` seconds during the
drain (Prometheus scrapes every 15 s by default; 1 s is harsher). Per drain it measures
the wall-clock rate (jobs/s, timed as ``throughput.py`` does) and the worker process's
CPU time per job (user + system from ``/proc/<pid>/stat`` at the enqueue's commit and at
the end of the drain): on a machine shared with other work the wall clock swings by tens
of percent between drains, the worker's own CPU time much less, and the CPU per job is
what the metrics add. Reports medians and the on/off ratios.

    python benchmarks/metrics_overhead.py --jobs 20000 --concurrency 8 --reps 7

The hooks alone (claimed, ended, recorded: what the worker calls per job) cost 1.8 µs of
CPU per job, measured in a loop with ``time.process_time()``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.request
from typing import Any

import _common as c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int, interval: float, stop: threading.Event, counts: list[int]) -> None:
    while not stop.wait(interval):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                r.read()
            counts[0] += 1
        except OSError:
            pass  # not up yet


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drain(bench: c.Bench, *, jobs: int, concurrency: int, timeout: float,
           worker_args: list[str]) -> dict[str, Any]:
    """``c.drain`` with the worker's CPU time over the drain."""
    assert bench.module is not None
    bench.module.q.close()
    c.reset_schema(bench.dsn)
    bench.clear_records()
    c.checkpoint(bench.dsn)
    items = [(i,) for i in range(jobs)]
    bench.module.q.workers()
    workers = c.Workers(bench, count=1, concurrency=concurrency, extra=worker_args)
    workers.start()
    try:
        with c.connect(bench.dsn) as conn:
            (pid,) = workers.pids()
            bench.module.noop.enqueue_many(items)
            t1, cpu1 = time.perf_counter(), _cpu_seconds(pid)
            complete = bench.wait_for(jobs, timeout)
            while complete and c.unfinished(conn):
                time.sleep(0.005)
            t2, cpu2 = time.perf_counter(), _cpu_seconds(pid)
    finally:
        workers.stop()
    duplicates, missing = c.check_once(bench.read(), jobs)
    assert complete and not duplicates and not missing, (complete, duplicates, missing)
    return {"drain_per_s": round(jobs / (t2 - t1), 1),
            "cpu_us_per_job": round((cpu2 - cpu1) / jobs * 1e6, 1)}


def _ratio(on: float | None, off: float | None) -> float | None:
    return None if on is None or not off else on / off


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=20_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--scrape-interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()

    off: list[dict[str, Any]] = []
    on: list[dict[str, Any]] = []
    scrapes = [0]
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            off.append(_drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                              timeout=args.timeout, worker_args=[]))
            port = _free_port()
            stop = threading.Event()
            scraper = threading.Thread(target=_scrape,
                                       args=(port, args.scrape_interval, stop, scrapes))
            scraper.start()
            try:
                on.append(_drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                                 timeout=args.timeout,
                                 worker_args=["--metrics-port", str(port)]))
            finally:
                stop.set()
                scraper.join()
            c.log(f"rep {rep}: off {c.fmt(off[-1]['drain_per_s'])} jobs/s "
                  f"{off[-1]['cpu_us_per_job']} us/job, on {c.fmt(on[-1]['drain_per_s'])} "
                  f"jobs/s {on[-1]['cpu_us_per_job']} us/job")

    def med(runs: list[dict[str, Any]], key: str) -> float | None:
        return c.median([r[key] for r in runs])

    def paired(key: str) -> float | None:
        return c.rounded(c.median([_ratio(b[key], a[key]) for a, b in zip(off, on, strict=True)]),
                         4)

    result = {
        "benchmark": "metrics_overhead",
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "drain_per_s_off": med(off, "drain_per_s"),
        "drain_per_s_on": med(on, "drain_per_s"),
        "drain_ratio_on_off": c.rounded(_ratio(med(on, "drain_per_s"),
                                               med(off, "drain_per_s")), 4),
        "drain_ratio_paired_median": paired("drain_per_s"),
        "cpu_us_per_job_off": med(off, "cpu_us_per_job"),
        "cpu_us_per_job_on": med(on, "cpu_us_per_job"),
        "cpu_ratio_on_off": c.rounded(_ratio(med(on, "cpu_us_per_job"),
                                             med(off, "cpu_us_per_job")), 4),
        "cpu_ratio_paired_median": paired("cpu_us_per_job"),
        "off": off,
        "on": on,
        "scrapes": scrapes[0],
        "machine": info,
    }
    if not args.quiet:
        c.table(
            f"metrics overhead: {args.jobs:,} no-op jobs, pgq worker --concurrency "
            f"{args.concurrency}, --metrics-port off vs on (scraped every "
            f"{args.scrape_interval:g} s)",
            ["rep", "off jobs/s", "on jobs/s", "off CPU us/job", "on CPU us/job"],
            [[i + 1, a["drain_per_s"], b["drain_per_s"], a["cpu_us_per_job"],
              b["cpu_us_per_job"]] for i, (a, b) in enumerate(zip(off, on, strict=True))]
            + [["median", result["drain_per_s_off"], result["drain_per_s_on"],
                result["cpu_us_per_job_off"], result["cpu_us_per_job_on"]],
               ["on/off", "", result["drain_ratio_on_off"], "", result["cpu_ratio_on_off"]],
               ["on/off paired", "", result["drain_ratio_paired_median"], "",
                result["cpu_ratio_paired_median"]]],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
