"""What workflows cost: a group and a chord of N no-op members against N plain jobs, and
a chain of K steps, through one ``pgq worker --concurrency C`` process.

Per repetition, interleaved: fresh schema, the worker started and registered (not
timed), then one enqueue (timed) and the drain, timed from the enqueue's commit until
every job has recorded its start and no row is left waiting, queued or running:

* ``plain`` — N jobs, one ``enqueue_many`` (what ``throughput.py`` measures);
* ``group`` — ``group(noop.s(0), ..., noop.s(N-1))``: the same N jobs as workflow steps
  (their completions take the workflow path: successors locked, edges resolved);
* ``chord`` — that group plus a callback that receives the N results: its release is
  the fan-in, done by the last member's completion; ``fan_in_ms`` is the time from the
  last member's start to the callback's start;
* ``chain`` — K steps, each released by the previous one's completion: ``per_step_ms``
  is the drain time divided by K (one claim, run, completion and wake-up per step).

    python benchmarks/workflows.py --members 10000 --chain 200 --reps 3
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import _common as c

from pgqueue import chain, chord, group


def _run(bench: c.Bench, *, expected: int, enqueue: Callable[[], Any], concurrency: int,
         timeout: float) -> dict[str, Any]:
    assert bench.module is not None
    bench.module.q.close()
    c.reset_schema(bench.dsn)
    bench.clear_records()
    c.checkpoint(bench.dsn)
    bench.module.q.workers()  # opens the enqueue pool outside the timing
    with c.Workers(bench, concurrency=concurrency), c.connect(bench.dsn) as conn:
        t0 = time.perf_counter()
        enqueue()
        t1 = time.perf_counter()
        complete = bench.wait_for(expected, timeout)
        while complete and c.unfinished(conn):
            time.sleep(0.005)
        t_done = time.perf_counter()
    records = bench.read()
    duplicates, missing = c.check_once(records, expected)
    return {"enqueue_s": t1 - t0, "drain_s": t_done - t1 if complete else None,
            "duplicates": duplicates, "missing": missing, "records": records}


def main() -> None:
    p = c.parser(__doc__.splitlines()[0])
    p.add_argument("--members", type=c.human_int, default=10_000,
                   help="jobs in plain, group and chord")
    p.add_argument("--chain", type=int, default=200, help="steps of the chain")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args()
    n = args.members

    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in ("plain", "group", "chord", "chain")}
    with c.bench_session(args.dsn, drop=args.drop) as bench:
        info = c.machine(args.dsn)
        m = bench.module
        assert m is not None
        variants: dict[str, tuple[int, Callable[[], Any]]] = {
            "plain": (n, lambda: m.noop.enqueue_many([(i,) for i in range(n)])),
            "group": (n, lambda: group(*(m.noop.s(i) for i in range(n))).enqueue()),
            "chord": (n + 1, lambda: chord([m.noop.s(i) for i in range(n)],
                                           m.gather.s(i=n)).enqueue()),
            "chain": (args.chain, lambda: chain(
                m.noop_plain.s(0), *(m.step.s(i=i) for i in range(1, args.chain))).enqueue()),
        }
        for rep in range(1, args.reps + 1):
            for name, (expected, enqueue) in variants.items():
                run = _run(bench, expected=expected, enqueue=enqueue,
                           concurrency=args.concurrency, timeout=args.timeout)
                if name == "chord":
                    starts = dict(run["records"])
                    last_member = max(t for i, t in run["records"] if i < n)
                    run["fan_in_ms"] = (starts[n] - last_member) * 1000
                run.pop("records")
                runs[name].append(run)
                c.log(f"rep {rep} {name}: enqueue {run['enqueue_s'] * 1000:.0f} ms, "
                      f"drain {c.fmt(run['drain_s'])} s")

    def med(name: str, key: str) -> float | None:
        return c.median([r[key] for r in runs[name]])

    drain = {name: med(name, "drain_s") for name in runs}
    per_s = {name: c.rounded(n / drain[name], 1) if drain[name] else None
             for name in ("plain", "group", "chord")}
    plain_s, chord_s = drain["plain"], drain["chord"]
    result = {
        "benchmark": "workflows",
        "members": n, "chain_steps": args.chain, "concurrency": args.concurrency,
        "reps": args.reps,
        "enqueue_ms": {name: c.rounded(med(name, "enqueue_s") * 1000, 1)  # type: ignore[operator]
                       for name in runs},
        "drain_s": {name: c.rounded(value, 3) for name, value in drain.items()},
        "drain_per_s": per_s,
        "group_vs_plain": c.rounded(per_s["group"] / per_s["plain"], 3)
        if per_s["group"] and per_s["plain"] else None,
        "chord_overhead_ms_per_member": c.rounded((chord_s - plain_s) / n * 1000, 4)
        if chord_s and plain_s else None,
        "fan_in_ms": c.rounded(med("chord", "fan_in_ms"), 2),
        "chain_per_step_ms": c.rounded(drain["chain"] / args.chain * 1000, 2)
        if drain["chain"] else None,
        "duplicates": sum(r["duplicates"] for rs in runs.values() for r in rs),
        "missing": sum(r["missing"] for rs in runs.values() for r in rs),
        "complete": all(r["drain_s"] is not None for rs in runs.values() for r in rs),
        "machine": info,
    }
    if not args.quiet:
        c.table(f"{n:,} members, chain of {args.chain}, concurrency {args.concurrency}, "
                f"median of {args.reps}", ["variant", "enqueue_ms", "drain_s", "jobs/s"],
                [[name, result["enqueue_ms"][name], result["drain_s"][name],
                  per_s.get(name, "-")] for name in runs])
        c.table("workflow costs", ["measure", "value"], [
            ["group / plain drain rate", result["group_vs_plain"]],
            ["chord overhead per member (ms)", result["chord_overhead_ms_per_member"]],
            ["fan-in: last member start → callback start (ms)", result["fan_in_ms"]],
            ["chain: per step (ms)", result["chain_per_step_ms"]],
        ])
    c.emit(result)


if __name__ == "__main__":
    main()
