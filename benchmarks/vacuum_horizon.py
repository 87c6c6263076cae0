"""A held vacuum horizon: pgqueue at a steady 70 % of its drain rate while a session pins
the xmin horizon for ten minutes — throughput while it is held, time to recover after.

1. Unless ``--dsn`` is given, starts its own PostgreSQL (the embedded server, in a
   temporary directory, deleted at the end) with **autovacuum on** and its defaults, as
   an installation has it (the machine's shared server may run without autovacuum,
   which says nothing about a held horizon).
2. Measures the drain rate: ``--drain-jobs`` no-op jobs into one idle
   ``pgq worker --concurrency C`` (as ``throughput.py``).
3. Measures the rate it sustains while a producer enqueues on the same machine
   (``--calibrate`` minutes of ``soak.py`` at the drain rate, nothing held: a drain of a
   backlog overstates it when the machine is shared) and takes the lower of the two.
4. Runs ``soak.py`` at ``--fraction`` (0.7) of that rate (or ``--rate``) for
   ``--before + --hold-minutes + --after`` minutes, the horizon held in the middle by an
   idle-in-transaction session (``--hold-kind idle-in-transaction``, default) or a
   REPEATABLE READ report (``repeatable-read``).

Reported (stderr table, one JSON line on stdout): the drain rate and the offered rate;
jobs started per minute before, while held and after (their ratio to the offered rate);
the peak backlog while held; the time from the end of the hold until the backlog is back
below two seconds' worth (soak's ``recovered``); the dead tuples of ``pgqueue.jobs`` at
the peak; and the claim's scan from the head of ``jobs_claim_idx`` (pages touched and
time, ``EXPLAIN (ANALYZE, BUFFERS)``) before, at its worst while held, and after — the
cost that grows with the dead tuples a held horizon leaves.

    python benchmarks/vacuum_horizon.py                      # ~17 min
    python benchmarks/vacuum_horizon.py --hold-kind repeatable-read
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from statistics import mean
from typing import Any

import _common as c
from psycopg.conninfo import make_conninfo

HERE = Path(__file__).resolve().parent


@contextlib.contextmanager
def own_server() -> Iterator[str]:
    """An embedded PostgreSQL with autovacuum on, for this run only; its DSN."""
    from pgqueue.embedded import start_server

    directory = Path(tempfile.mkdtemp(prefix="pgqueue-horizon-"))
    server = start_server(directory / "data", delete_on_exit=True)
    try:
        dsn = make_conninfo(server.get_uri(), dbname="pgqueue_horizon")
        yield dsn
    finally:
        server.cleanup()
        shutil.rmtree(directory, ignore_errors=True)


def phase(rows: list[dict[str, Any]], held: bool | None, key: str) -> float | None:
    """Mean of ``key`` over the minutes before (None), while (True) or after (False) the
    hold; the first minute (start-up) and the minute the hold starts or ends in, which
    mix both, are left out."""
    first_held = next((r["minute"] for r in rows if r["held"]), None)
    last_held = max((r["minute"] for r in rows if r["held"]), default=None)
    if first_held is None or last_held is None:
        return None
    if held is None:
        chosen = [r for r in rows if 1 < r["minute"] < first_held]
    elif held:
        chosen = [r for r in rows if first_held < r["minute"] < last_held]
    else:
        # The last minute ends when the producer stops: partial, left out.
        chosen = [r for r in rows if last_held < r["minute"] < len(rows)]
    values = [r[key] for r in chosen if r.get(key) is not None]
    return round(mean(values), 1) if values else None


def soak(dsn: str, args: Any, *, minutes: float, hold: float, rate: float,
         bucket: float, drain_timeout: float) -> dict[str, Any]:
    """One run of soak.py; its JSON result."""
    command = [sys.executable, str(HERE / "soak.py"), "--dsn", dsn,
               "--minutes", f"{minutes:g}", "--hold-minutes", f"{hold:g}",
               "--rate", f"{rate:g}", "--concurrency", str(args.concurrency),
               "--hold-kind", args.hold_kind, "--result-ttl", str(args.result_ttl),
               "--sample", f"{args.sample:g}", "--bucket", f"{bucket:g}",
               "--drain-timeout", f"{drain_timeout:g}"]
    if args.quiet:
        command.append("--quiet")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"soak.py failed with exit status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.set_defaults(dsn=None)
    p.add_argument("--hold-minutes", type=float, default=10.0)
    p.add_argument("--before", type=float, default=3.0,
                   help="minutes of steady load before the hold (and after it)")
    p.add_argument("--after", type=float, default=None,
                   help="minutes after the hold (default: --before)")
    p.add_argument("--fraction", type=float, default=0.7,
                   help="offered load, as a fraction of the measured drain rate")
    p.add_argument("--hold-kind", choices=("idle-in-transaction", "repeatable-read"),
                   default="idle-in-transaction")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--drain-jobs", type=c.human_int, default=20_000)
    p.add_argument("--result-ttl", type=int, default=60)
    p.add_argument("--sample", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--calibrate", type=float, default=1.0,
                   help="minutes of soak at the drain rate to measure the sustained rate "
                        "(0: use the drain rate alone)")
    p.add_argument("--rate", type=float, default=None,
                   help="offer this many jobs/s instead of --fraction of the measured rate")
    p.add_argument("--drain-timeout", type=float, default=600.0,
                   help="after the load stops, wait this long for the backlog to clear")
    args = p.parse_args()
    after = args.before if args.after is None else args.after
    with contextlib.ExitStack() as stack:
        dsn = args.dsn or stack.enter_context(own_server())
        with c.bench_session(dsn, result_ttl=args.result_ttl) as bench:
            info = c.machine(dsn)
            drain = c.drain(bench, jobs=args.drain_jobs, concurrency=args.concurrency)
        if not drain["complete"] or not drain["drain_per_s"]:
            raise SystemExit(f"the drain did not complete: {drain}")
        # A drain of a backlog overstates what the worker keeps up with while a producer
        # enqueues on the same machine: measure that too (a minute of soak at the drain
        # rate, nothing held), and offer the fraction of the lower of the two.
        sustained = None
        if args.calibrate > 0:
            calibration = soak(dsn, args, minutes=args.calibrate, hold=0.0,
                               rate=drain["drain_per_s"], bucket=10.0, drain_timeout=1.0)
            steady = [r["jobs_started"] for r in calibration["per_minute"][1:-1]]
            sustained = round(mean(steady) / 10.0, 1) if steady else None
        base = min(filter(None, [drain["drain_per_s"], sustained]))
        rate = args.rate or round(args.fraction * base, 1)
        minutes = args.before + args.hold_minutes + after
        # soak.py holds the horizon in the middle of its run: equal time before and after.
        side = (minutes - args.hold_minutes) / 2
        c.log(f"drain {drain['drain_per_s']:,.0f} jobs/s; offering {rate:,.0f} jobs/s for "
              f"{minutes:g} min, horizon held ({args.hold_kind}) from {side:g} to "
              f"{side + args.hold_minutes:g} min")
        soaked = soak(dsn, args, minutes=minutes, hold=args.hold_minutes, rate=rate,
                      bucket=60.0, drain_timeout=args.drain_timeout)
    rows = soaked["per_minute"]
    samples = soaked["samples"]
    held_samples = [s for s in samples
                    if soaked["hold_from_s"] <= s["t"] < soaked["hold_from_s"] + soaked["hold_s"]]
    before = [s for s in samples if 60 <= s["t"] < soaked["hold_from_s"]]
    after_samples = [s for s in samples if s["t"] >= soaked["hold_from_s"] + soaked["hold_s"] + 60]
    result = {
        "benchmark": "vacuum_horizon",
        "hold_kind": args.hold_kind,
        "hold_minutes": args.hold_minutes,
        "drain_per_s": drain["drain_per_s"],
        "offered_per_s": rate,
        "drain_timeout": args.drain_timeout,
        "fraction": args.fraction,
        "started_per_min_before": phase(rows, None, "jobs_started"),
        "started_per_min_held": phase(rows, True, "jobs_started"),
        "started_per_min_after": phase(rows, False, "jobs_started"),
        "offered_per_min": round(rate * 60, 1),
        "backlog_max_held": max((s["backlog"] for s in held_samples), default=None),
        "recovered": soaked["recovered"],
        "recovered_s_after_hold": soaked["recovered_s_after_hold"],
        "dead_tuples_max": max((s["n_dead_tup"] for s in samples), default=None),
        "horizon_age_s_max": max((s["horizon_age_s"] or 0 for s in samples), default=None),
        "claim_scan_pages_before": max((s["claim_scan_pages"] for s in before), default=None),
        "claim_scan_pages_held_max": max((s["claim_scan_pages"] for s in held_samples),
                                         default=None),
        "claim_scan_pages_after": max((s["claim_scan_pages"] for s in after_samples),
                                      default=None),
        "claim_scan_ms_held_max": max((s["claim_scan_ms"] for s in held_samples), default=None),
        "p99_ms": soaked["p99_ms"],
        "duplicates": soaked["duplicates"],
        "drained": soaked["drained"],
        "autovacuum": info.get("pg_autovacuum"),
        "sustained_per_s": sustained,
        "soak": soaked,
        "machine": info,
    }
    if not args.quiet:
        offered = result["offered_per_min"]

        def share(value: float | None) -> str:
            return "" if value is None else f"{value / offered:.2f}"

        c.table(
            f"vacuum horizon held {args.hold_minutes:g} min ({args.hold_kind}) at "
            f"{args.fraction:.0%} of the drain rate ({rate:,.0f} of "
            f"{drain['drain_per_s']:,.0f} jobs/s)",
            ["phase", "started / min", "of offered", "claim scan pages (max)"],
            [["before", result["started_per_min_before"],
              share(result["started_per_min_before"]), result["claim_scan_pages_before"]],
             ["held", result["started_per_min_held"],
              share(result["started_per_min_held"]), result["claim_scan_pages_held_max"]],
             ["after", result["started_per_min_after"],
              share(result["started_per_min_after"]), result["claim_scan_pages_after"]]],
        )
        c.log(f"backlog max while held: {result['backlog_max_held']}; recovered "
              f"{result['recovered_s_after_hold']} s after the hold ended; dead tuples max "
              f"{result['dead_tuples_max']}; horizon age max {result['horizon_age_s_max']} s; "
              f"autovacuum {result['autovacuum']}")
    c.emit(result)


if __name__ == "__main__":
    main()
