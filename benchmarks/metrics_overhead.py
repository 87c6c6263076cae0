"""What ``pgq worker --metrics-port`` costs: the drain of N no-op jobs with and without it.

Interleaved in one run (off, on, off, on, …) so both see the same machine. With the
endpoint on, a scraper reads ``/metrics`` every ``--scrape-interval`` seconds during the
drain (Prometheus scrapes every 15 s by default; 1 s is harsher). Reports the median
drain rate of each and their ratio (on / off).

    python benchmarks/metrics_overhead.py --jobs 20000 --concurrency 8 --reps 5
"""

from __future__ import annotations

import socket
import threading
import urllib.request

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


def _ratio(on: float | None, off: float | None) -> float | None:
    return None if on is None or not off else on / off


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--jobs", type=c.human_int, default=20_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--scrape-interval", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()

    off: list[float] = []
    on: list[float] = []
    scrapes = [0]
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        for rep in range(1, args.reps + 1):
            run = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                          timeout=args.timeout)
            off.append(run["drain_per_s"])
            port = _free_port()
            stop = threading.Event()
            scraper = threading.Thread(target=_scrape,
                                       args=(port, args.scrape_interval, stop, scrapes))
            scraper.start()
            try:
                run = c.drain(bench, jobs=args.jobs, concurrency=args.concurrency,
                              timeout=args.timeout, worker_args=["--metrics-port", str(port)])
            finally:
                stop.set()
                scraper.join()
            on.append(run["drain_per_s"])
            c.log(f"rep {rep}: off {c.fmt(off[-1])} jobs/s, on {c.fmt(on[-1])} jobs/s")

    result = {
        "benchmark": "metrics_overhead",
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "reps": args.reps,
        "drain_per_s_off": c.median(off),
        "drain_per_s_on": c.median(on),
        "ratio_on_off": c.rounded(_ratio(c.median(on), c.median(off)), 4),
        # Each rep's on/off pair ran back to back: the median of their ratios is less
        # sensitive to a machine whose load drifts between reps.
        "ratio_paired_median": c.rounded(c.median(
            [_ratio(b, a) for a, b in zip(off, on, strict=True)]), 4),
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
            ["rep", "off jobs/s", "on jobs/s"],
            [[i + 1, a, b] for i, (a, b) in enumerate(zip(off, on, strict=True))]
            + [["median", result["drain_per_s_off"], result["drain_per_s_on"]],
               ["on/off", "", result["ratio_on_off"]],
               ["on/off paired", "", result["ratio_paired_median"]]],
        )
    c.emit(result)


if __name__ == "__main__":
    main()
